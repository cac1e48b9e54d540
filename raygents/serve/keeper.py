"""Keeper: the actor that holds what outlives one request to the app: each thread's order of
runs (the run in flight and the messages queued behind it) and webhook deliveries. One per
app, found by name by every replica; the runs themselves are the coordinator's."""

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
from raygents.serve.document import ENDED, ask, run_document, run_info, run_state
from raygents.serve.problems import problem_of
from raygents.serve.settings import ServeSettings
from raygents.serve.webhook import Delivery, deliver

__all__ = ["Keeper", "keeper_actor", "start_options"]

log = logging.getLogger("raygents")
_KEPT_DELIVERIES = 10_000


@dataclass
class _Thread:
    """One conversation: its runs in order, the one in flight, and those queued behind it."""

    agent: str
    runs: list[str] = field(default_factory=list)
    current: str | None = None
    queue: collections.deque[tuple[str, dict[str, Any]]] = field(default_factory=collections.deque)
    inputs: dict[str, int] = field(default_factory=dict)
    """How many input messages each run was started with (a cancelled run's history after
    them is carried into the run that interrupted it)."""
    done: dict[str, asyncio.Event] = field(default_factory=dict)


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
    """Threads and webhook deliveries of one app (an async actor; its state is lost if it
    restarts: queued messages and pending deliveries with it, never a run)."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        rg.init(
            namespace=settings.namespace,
            store=settings.store,
            detached=True,
            handle_sigterm=False,
        )
        self.threads: dict[str, _Thread] = {}
        self.thread_of: dict[str, str] = {}
        self.deliveries: collections.OrderedDict[str, Delivery] = collections.OrderedDict()
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- threads ------------------------------------------------------------------------
    async def post(self, thread_id: str, request: dict[str, Any], if_busy: str) -> dict[str, Any]:
        """A message to a thread: its run starts now, after the run in flight
        (``enqueue``), in its place (``interrupt``), or not at all (``reject``, while one is
        in flight). Returns ``{"run_id", "queued"}``, ``{"busy": run_id}`` or ``{"problem":
        (status, type, message)}``."""
        thread = self.threads.setdefault(thread_id, _Thread(request["agent"]))
        if thread.agent != request["agent"]:
            message = f"thread {thread_id!r} belongs to agent {thread.agent!r}"
            return {"problem": (409, "ThreadAgentMismatch", message)}
        run_id = request.get("run_id") or rg_run_id()
        request = {**request, "run_id": run_id}
        busy = thread.current is not None or bool(thread.queue)
        if busy and if_busy == "reject":
            return {"busy": thread.current or thread.queue[0][0]}
        self.thread_of[run_id] = thread_id
        thread.runs.append(run_id)
        thread.done[run_id] = asyncio.Event()
        if busy and if_busy == "interrupt":
            thread.queue.appendleft((run_id, {**request, "_carry": thread.current}))
            if thread.current is not None:
                await ask(rg_client().suspend([(thread.current, CANCEL)]))
            else:
                self._next(thread_id)
            return {"run_id": run_id, "queued": True}
        thread.queue.append((run_id, request))
        if busy:
            return {"run_id": run_id, "queued": True}
        problem = await self._start_next(thread_id)
        if problem is not None:
            return {"problem": problem}
        return {"run_id": run_id, "queued": False}

    def _next(self, thread_id: str) -> None:
        task = asyncio.ensure_future(self._start_next(thread_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_next(self, thread_id: str) -> tuple[int, str, str] | None:
        """Start the thread's first queued message; the problem if it could not start (it
        is then the next one's turn)."""
        thread = self.threads[thread_id]
        if thread.current is not None or not thread.queue:
            return None
        run_id, request = thread.queue.popleft()
        thread.current = run_id
        try:
            try:
                messages = await self._input(thread, request)
            except (TypeError, KeyError, ValueError) as exc:
                raise UserError(f"invalid run input: {exc}") from None
            thread.inputs[run_id] = len(messages)
            agent = self.settings.agents[thread.agent]
            options = start_options(request)
            handle = await asyncio.to_thread(
                rg.start, agent, list(messages), session_id=thread_id, **options
            )
        except RaygentsError as exc:
            problem = problem_of(exc)
            log.warning("run %s of thread %s did not start: %s", run_id, thread_id, exc)
            self._ended(thread_id, run_id)
            return (problem.status, problem.type, problem.message)
        task = asyncio.ensure_future(self._follow(thread_id, run_id, handle))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return None

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
        with contextlib.suppress(BaseException):  # (its outcome is the run's; the thread goes on)
            await handle
        self._ended(thread_id, run_id)

    def _ended(self, thread_id: str, run_id: str) -> None:
        thread = self.threads[thread_id]
        if thread.current == run_id:
            thread.current = None
        thread.done.pop(run_id, asyncio.Event()).set()
        self._next(thread_id)

    async def wait(self, run_id: str) -> None:
        """Return once a run of a thread stopped (one queued behind another first starts)."""
        thread_id = self.thread_of.get(run_id)
        if thread_id is None:
            return
        event = self.threads[thread_id].done.get(run_id)
        if event is not None:
            await event.wait()

    def queued(self, run_id: str) -> bool:
        """Whether a run of a thread waits for its turn (it is not started yet)."""
        thread_id = self.thread_of.get(run_id)
        if thread_id is None:
            return False
        return any(r == run_id for r, _ in self.threads[thread_id].queue)

    def thread(self, thread_id: str) -> dict[str, Any] | None:
        """A thread's agent, runs in order, the run in flight and the queued ones."""
        thread = self.threads.get(thread_id)
        if thread is None:
            return None
        return {
            "agent": thread.agent,
            "runs": list(thread.runs),
            "current": thread.current,
            "queued": [r for r, _ in thread.queue],
        }

    def thread_of_run(self, run_id: str) -> str | None:
        """The thread a run belongs to, or None."""
        return self.thread_of.get(run_id)

    def runs_of(self, thread_id: str) -> list[str]:
        """The runs of a thread, in order."""
        thread = self.threads.get(thread_id)
        return list(thread.runs) if thread is not None else []

    # --- webhooks -----------------------------------------------------------------------
    def watch(self, run_id: str, url: str | None = None) -> None:
        """Deliver the run's outcome to ``url`` when it stops (``url`` None: again to the
        URL it was given, once it was resumed; nothing if it has none)."""
        if url is None:
            known = self.deliveries.get(run_id)
            if known is None:
                return
            url = known.url
        delivery = self.deliveries[run_id] = Delivery(url)
        self.deliveries.move_to_end(run_id)
        while len(self.deliveries) > _KEPT_DELIVERIES:
            self.deliveries.popitem(last=False)
        task = asyncio.ensure_future(self._deliver(run_id, delivery))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, run_id: str, delivery: Delivery) -> None:
        try:
            await self.wait(run_id)
            while (await run_info(run_id)).status not in ENDED:
                await ask(rg_client().wait(run_id))
            payload = await run_document(run_id, self.settings.agents)
            s = self.settings
            await deliver(delivery, payload, s.signing_key, s.webhook_networks)
        except Exception as exc:
            delivery.state, delivery.last_error = "failed", f"{type(exc).__name__}: {exc}"
        if delivery.state == "failed":
            log.warning("webhook of run %s failed: %s", run_id, delivery.last_error)

    def about(self, run_id: str) -> tuple[str | None, dict[str, Any] | None]:
        """A run's thread and where its webhook stands (None where it has none)."""
        return self.thread_of.get(run_id), self.delivery(run_id)

    def delivery(self, run_id: str) -> dict[str, Any] | None:
        """Where the run's webhook stands, or None."""
        found = self.deliveries.get(run_id)
        return found.document() if found is not None else None


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


def keeper_actor(settings: ServeSettings) -> Any:
    """The app's keeper: the one that holds its name in raygents' namespace, else a new one
    (detached: it outlives the replica that made it; :func:`raygents.serve.stop` removes
    it)."""
    import ray

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
        )
        .remote(settings)
    )
