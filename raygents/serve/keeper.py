"""Keeper: the actor that holds what outlives one request to the app: each thread's order of
runs (the run in flight and the messages queued behind it) and webhook deliveries. One per
app, found by name by every replica; the runs themselves are the coordinator's. What it holds
is kept in the store as well (:mod:`raygents.serve.keeperstore`): a keeper that restarts reads
it back and goes on, in order."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import raygents as rg
from raygents.core.messages import Message, to_messages
from raygents.errors import CANCEL, RaygentsError, UserError
from raygents.runtime.link.untied import untied
from raygents.serve.document import ENDED, ask, run_document, run_info, run_state
from raygents.serve.keeperstore import KeeperRecords, Queued, Restored, app_folder
from raygents.serve.problems import problem_of
from raygents.serve.settings import ServeSettings, unpacked
from raygents.serve.webhook import Delivery, body_of, deliver

__all__ = ["Keeper", "keeper_actor", "start_options"]

log = logging.getLogger("raygents")
_KEPT_DELIVERIES = 10_000


@dataclass
class _Thread:
    """One conversation: its runs in order, the one in flight, and those queued behind it."""

    agent: str
    runs: list[str] = field(default_factory=list)
    current: str | None = None
    queue: collections.deque[Queued] = field(default_factory=collections.deque)
    inputs: dict[str, int] = field(default_factory=dict)
    """How many input messages each run was started with (a cancelled run's history after
    them is carried into the run that interrupted it)."""
    done: dict[str, asyncio.Event] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while a message is taken: one at a time, in the order they came."""


def start_options(request: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``rg.start`` a run request carries."""
    return {
        "context": request.get("context"),
        "run_id": request.get("run_id"),
        "max_turns": request.get("max_turns"),
        "max_tokens": request.get("max_tokens"),
        "timeout_s": request.get("timeout_s"),
    }


class Keeper:
    """Threads and webhook deliveries of one app (an async actor). What it holds is in the
    store too: a keeper that restarts reads back the messages queued and the deliveries not
    made, and goes on with them (runs are the coordinator's: none is ever lost)."""

    def __init__(self, app_settings: bytes) -> None:
        """``app_settings``: the app's :func:`~raygents.serve.settings.packed` settings."""
        from raygents.runtime.driver.client import current

        self.settings = settings = unpacked(app_settings)
        rg.init(
            namespace=settings.namespace,
            store=settings.store,
            durability=settings.durability,
            detached=True,
            handle_sigterm=False,
        )
        rt = current().settings
        folder = app_folder(settings.namespace, settings.route_prefix)
        self.records = KeeperRecords(rt.store, rt.key, folder)
        self.threads: dict[str, _Thread] = {}
        self.thread_of: dict[str, str] = {}
        self.deliveries: collections.OrderedDict[str, Delivery] = collections.OrderedDict()
        self.generations: dict[str, int] = {}
        self._seq = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._restoring: asyncio.Future[None] | None = None
        _restore_soon()

    async def restore(self) -> None:
        """Read back what the keeper held before a restart and go on with it (once; every
        request waits for it)."""
        if self._restoring is None:
            self._restoring = asyncio.ensure_future(self._read_back())
        try:
            await asyncio.shield(self._restoring)
        except Exception:
            self._restoring = None  # (the store failed: the next call tries again)
            raise

    async def _read_back(self) -> None:
        restored = await self.records.read_back()
        for thread_id, record in restored.threads.items():
            thread = self.threads[thread_id] = _Thread(record.agent)
            for turn, run_id, inputs in record.started:  # (a turn is past its message's seq)
                thread.inputs[run_id] = inputs
                self.thread_of[run_id] = thread_id
                self._seq = max(self._seq, turn)
            for queued in record.queued:
                thread.queue.append(queued)
                thread.done[queued.run_id] = asyncio.Event()
                self.thread_of[queued.run_id] = thread_id
                self._seq = max(self._seq, queued.seq)
            thread.runs = [run_id for _, run_id, _ in record.started]
            thread.runs += [q.run_id for q in sorted(record.queued, key=lambda q: q.seq)]
            if record.started:
                await self._resume_current(thread_id, thread, record.started[-1][1])
            self._next(thread_id)
        self._read_back_webhooks(restored)
        if restored.threads or restored.webhooks:
            log.info(
                "serve keeper: read back %d threads and %d webhook deliveries",
                len(restored.threads),
                len(restored.webhooks),
            )

    async def _resume_current(self, thread_id: str, thread: _Thread, run_id: str) -> None:
        """Follow a thread's newest run if it has not stopped: the messages after it wait."""
        try:
            status = (await run_info(run_id)).status
        except RaygentsError:
            return  # (gone: past retention, or in a store the coordinator lost)
        if status not in ENDED:
            thread.current = run_id
            thread.done[run_id] = asyncio.Event()
            self._spawn(self._follow(thread_id, run_id, None))

    def _read_back_webhooks(self, restored: Restored) -> None:
        for run_id, record in restored.webhooks.items():
            delivery = Delivery(record.url)
            self.generations[run_id] = record.gen
            self.deliveries[run_id] = delivery
            if record.done is not None:
                delivery.state = str(record.done.get("state") or "failed")
                delivery.attempts = int(record.done.get("attempts") or 0)
                delivery.status_code = record.done.get("status_code")
                delivery.last_error = record.done.get("last_error")
                continue
            self._spawn(self._deliver(run_id, delivery, record.gen, record.body))

    def _spawn(self, coro: Any) -> None:
        # (a run followed or a delivery outlives the request that asked for it)
        task = untied().run(asyncio.ensure_future, coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- threads ------------------------------------------------------------------------
    async def post(self, thread_id: str, request: dict[str, Any], if_busy: str) -> dict[str, Any]:
        """A message to a thread: its run starts now, after the run in flight
        (``enqueue``), in its place (``interrupt``), or not at all (``reject``, while one is
        in flight). It is in the store before this returns. Returns ``{"run_id",
        "queued"}``, ``{"busy": run_id}`` or ``{"problem": (status, type, message)}``."""
        await self.restore()
        thread = self.threads.setdefault(thread_id, _Thread(request["agent"]))
        if thread.agent != request["agent"]:
            message = f"thread {thread_id!r} belongs to agent {thread.agent!r}"
            return {"problem": (409, "ThreadAgentMismatch", message)}
        async with thread.lock:
            return await self._take(thread_id, thread, request, if_busy)

    async def _take(
        self, thread_id: str, thread: _Thread, request: dict[str, Any], if_busy: str
    ) -> dict[str, Any]:
        run_id = request.get("run_id") or rg_run_id()
        request = {**request, "run_id": run_id}
        busy = thread.current is not None or bool(thread.queue)
        if busy and if_busy == "reject":
            return {"busy": thread.current or thread.queue[0].run_id}
        interrupt = busy and if_busy == "interrupt"
        if interrupt:
            request["_carry"] = thread.current
        self._seq += 1
        queued = Queued(run_id, request, self._seq, front=interrupt)
        try:
            await self.records.accepted(thread_id, thread.agent, queued)
        except RaygentsError as exc:
            log.warning("thread %s: cannot keep a message in the store: %s", thread_id, exc)
            return {"problem": (503, "StoreUnavailable", f"the message was not taken: {exc}")}
        self.thread_of[run_id] = thread_id
        thread.runs.append(run_id)
        thread.done[run_id] = asyncio.Event()
        if interrupt:
            thread.queue.appendleft(queued)
            if thread.current is not None:
                await ask(rg_client().suspend([(thread.current, CANCEL)]))
            else:
                self._next(thread_id)
            return {"run_id": run_id, "queued": True}
        thread.queue.append(queued)
        if busy:
            return {"run_id": run_id, "queued": True}
        problem = await self._start_next(thread_id)
        if problem is not None:
            return {"problem": problem}
        return {"run_id": run_id, "queued": False}

    def _next(self, thread_id: str) -> None:
        self._spawn(self._start_next(thread_id))

    async def _start_next(self, thread_id: str) -> tuple[int, str, str] | None:
        """Start the thread's first queued message; the problem if it could not start (it
        is then the next one's turn)."""
        thread = self.threads[thread_id]
        if thread.current is not None or not thread.queue:
            return None
        queued = thread.queue.popleft()
        run_id = thread.current = queued.run_id
        try:
            handle = await self._begin(thread_id, thread, queued)
        except RaygentsError as exc:
            problem = problem_of(exc)
            log.warning("run %s of thread %s did not start: %s", run_id, thread_id, exc)
            await self.records.started(thread_id, thread.agent, queued, None)
            self._ended(thread_id, run_id)
            return (problem.status, problem.type, problem.message)
        self._seq += 1
        turn = self._seq
        await self.records.started(thread_id, thread.agent, queued, thread.inputs[run_id], turn)
        self._spawn(self._follow(thread_id, run_id, handle))
        return None

    async def _begin(self, thread_id: str, thread: _Thread, queued: Queued) -> Any:
        """Start a message's run; its handle (None: a message read back whose run had
        started before the keeper restarted)."""
        request = queued.request
        try:
            messages = await self._input(thread, request)
        except (TypeError, KeyError, ValueError) as exc:
            raise UserError(f"invalid run input: {exc}") from None
        thread.inputs[queued.run_id] = len(messages)
        if queued.restored and await ask(rg_client().get_run(queued.run_id)) is not None:
            return None
        agent = self.settings.agents.get(thread.agent)
        if agent is None:
            raise UserError(f"agent {thread.agent!r} is no longer served here")
        options = start_options(request)
        return await asyncio.to_thread(
            rg.start, agent, list(messages), session_id=thread_id, **options
        )

    async def _input(self, thread: _Thread, request: dict[str, Any]) -> tuple[Message, ...]:
        """A message's input, after what the run it interrupted said past its own input (a
        cancelled run saves nothing to the thread's session)."""
        messages = to_messages(request["input"])
        carried = request.get("_carry")
        if carried is None:
            return messages
        state = await run_state(carried)
        if state is None:
            return messages
        start = max(0, state.input_len - thread.inputs.get(carried, 0))
        return (*_complete(state.messages[start:]), *messages)

    async def _follow(self, thread_id: str, run_id: str, handle: Any) -> None:
        """Wait for a thread's run to stop (``handle`` None: a run started before a restart,
        followed through the coordinator), then start the thread's next message."""
        with contextlib.suppress(BaseException):  # (its outcome is the run's; the thread goes on)
            if handle is not None:
                await handle
            else:
                await _stopped(run_id)
        self._ended(thread_id, run_id)

    def _ended(self, thread_id: str, run_id: str) -> None:
        thread = self.threads[thread_id]
        if thread.current == run_id:
            thread.current = None
        thread.done.pop(run_id, asyncio.Event()).set()
        self._next(thread_id)

    async def wait(self, run_id: str) -> None:
        """Return once a run of a thread stopped (one queued behind another first starts)."""
        await self.restore()
        thread_id = self.thread_of.get(run_id)
        if thread_id is None:
            return
        event = self.threads[thread_id].done.get(run_id)
        if event is not None:
            await event.wait()

    async def queued(self, run_id: str) -> bool:
        """Whether a run of a thread waits for its turn (it is not started yet)."""
        await self.restore()
        thread_id = self.thread_of.get(run_id)
        if thread_id is None:
            return False
        return any(q.run_id == run_id for q in self.threads[thread_id].queue)

    async def thread(self, thread_id: str) -> dict[str, Any] | None:
        """A thread's agent, runs in order, the run in flight and the queued ones."""
        await self.restore()
        thread = self.threads.get(thread_id)
        if thread is None:
            return None
        return {
            "agent": thread.agent,
            "runs": list(thread.runs),
            "current": thread.current,
            "queued": [q.run_id for q in thread.queue],
        }

    async def thread_of_run(self, run_id: str) -> str | None:
        """The thread a run belongs to, or None."""
        await self.restore()
        return self.thread_of.get(run_id)

    async def runs_of(self, thread_id: str) -> list[str]:
        """The runs of a thread, in order."""
        await self.restore()
        thread = self.threads.get(thread_id)
        return list(thread.runs) if thread is not None else []

    # --- webhooks -----------------------------------------------------------------------
    async def watch(self, run_id: str, url: str | None = None) -> None:
        """Deliver the run's outcome to ``url`` when it stops (``url`` None: again to the
        URL it was given, once it was resumed; nothing if it has none). The delivery is in
        the store before this returns.

        Raises:
            CheckpointError: the store failed (nothing will be delivered).
        """
        await self.restore()
        if url is None:
            known = self.deliveries.get(run_id)
            if known is None:
                return
            url = known.url
        gen = self.generations[run_id] = self.generations.get(run_id, 0) + 1
        await self.records.watching(run_id, gen, url)
        delivery = self.deliveries[run_id] = Delivery(url)
        self.deliveries.move_to_end(run_id)
        evicted = []
        while len(self.deliveries) > _KEPT_DELIVERIES:
            evicted.append(self.deliveries.popitem(last=False)[0])
            self.generations.pop(evicted[-1], None)
        if evicted:
            self._spawn(self.records.forget(evicted))
        self._spawn(self._deliver(run_id, delivery, gen, None))

    async def _deliver(self, run_id: str, delivery: Delivery, gen: int, body: bytes | None) -> None:
        """Make a delivery once the run stopped: the body kept in the store before the first
        attempt (``body``: the one kept before a restart, sent as it was), and how it ended
        after the last."""
        try:
            await self.wait(run_id)
            await _stopped(run_id)
            if body is None:
                body = body_of(await run_document(run_id, self.settings.agents))
                await self.records.body(run_id, gen, body)
            s = self.settings
            await deliver(delivery, body, s.signing_key, s.webhook_networks)
        except Exception as exc:
            delivery.state, delivery.last_error = "failed", f"{type(exc).__name__}: {exc}"
        if self.generations.get(run_id) == gen:  # (not since watched again, nor forgotten)
            await self.records.ended(run_id, gen, delivery.document())
        if delivery.state == "failed":
            log.warning("webhook of run %s failed: %s", run_id, delivery.last_error)

    async def about(self, run_id: str) -> tuple[str | None, dict[str, Any] | None]:
        """A run's thread and where its webhook stands (None where it has none)."""
        await self.restore()
        return self.thread_of.get(run_id), self.delivery_of(run_id)

    async def delivery(self, run_id: str) -> dict[str, Any] | None:
        """Where the run's webhook stands, or None."""
        await self.restore()
        return self.delivery_of(run_id)

    def delivery_of(self, run_id: str) -> dict[str, Any] | None:
        """Where the run's webhook stands, or None (as the keeper holds it now)."""
        found = self.deliveries.get(run_id)
        return found.document() if found is not None else None


async def _stopped(run_id: str) -> None:
    """Return once the run stopped (completed, failed, cancelled, or waits: suspended,
    awaiting approval, in doubt)."""
    while (await run_info(run_id)).status not in ENDED:
        await ask(rg_client().wait(run_id))


def _restore_soon() -> None:
    """Have this actor read back its records as soon as it is up (its first call does
    otherwise; a keeper built outside Ray, in a test, reads them at its first call)."""
    import ray

    if not ray.is_initialized():
        return
    try:
        actor = ray.get_runtime_context().current_actor
    except RuntimeError:  # (not in an actor)
        return
    actor.restore.remote()


def _complete(messages: tuple[Message, ...] | Any) -> list[Message]:
    """``messages`` up to the last point where every tool call has its result (a cancelled
    run may stop between a call and its result, which no model takes as input)."""
    out: list[Message] = []
    open_calls: set[str] = set()
    last_whole = 0
    for m in messages:
        out.append(m)
        if m.role == "assistant":
            open_calls |= {c.id for c in m.tool_calls}
        elif m.role == "tool" and m.tool_call_id is not None:
            open_calls.discard(m.tool_call_id)
        if not open_calls:
            last_whole = len(out)
    return out[:last_whole]


def rg_run_id() -> str:
    """A new run id."""
    from raygents.core.envelope import new_run_id

    return new_run_id()


def rg_client() -> Any:
    """This process's coordinator client."""
    from raygents.runtime.driver.client import current

    return current().directory.client


def keeper_actor(settings: ServeSettings, app_settings: bytes) -> Any:
    """The app's keeper: the one that holds its name in raygents' namespace, else a new one
    (detached: it outlives the replica that made it; :func:`raygents.serve.stop` removes
    it; Ray restarts it if it dies, and it reads its records back). With a ``file://`` store
    it runs on the coordinator's node, where the store's directory is."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from raygents.runtime.driver.client import current

    placement: dict[str, Any] = {}
    ours = current().directory.cached_settings()
    if ours.store.startswith("file://") and ours.node:
        # (a file:// store is a directory on the coordinator's node: the keeper's records too)
        placement["scheduling_strategy"] = NodeAffinitySchedulingStrategy(ours.node, soft=False)
    return (
        ray.remote(Keeper)
        .options(
            name=settings.keeper_name,
            namespace=settings.namespace,
            get_if_exists=True,
            lifetime="detached",
            num_cpus=0,
            max_concurrency=10_000,
            max_restarts=-1,
            **placement,
        )
        .remote(app_settings)
    )
