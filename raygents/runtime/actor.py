"""AgentActor: serves one agent to every run that reaches it, driving the pure loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
import traceback
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray
from typing_extensions import assert_never

from raygents import checkpoint, loop
from raygents.agent import Agent, HandoffInputData
from raygents.envelope import Envelope, Outcome, OutcomeKind, RunState
from raygents.errors import CheckpointError, ModelError, RaygentsError, UserError
from raygents.events import RunEvent
from raygents.guardrails import run_input_guardrails, run_output_guardrails
from raygents.hooks import fire
from raygents.messages import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec
from raygents.models.base import Model, check_response, resolve_model
from raygents.runtime.children import run_child
from raygents.runtime.directory import Directory
from raygents.runtime.drive import SuspendToken
from raygents.runtime.liveness import Beater
from raygents.runtime.mailbox import pack
from raygents.runtime.process import tune_collector
from raygents.runtime.tasks import StepResult, run_tool, tool_error
from raygents.schema import type_name, type_schema
from raygents.sessions import load_session, save_session
from raygents.store import FileStore, open_store
from raygents.tools import AgentTool, RunContext, Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from raygents.runtime.coordinator import RunInfo

__all__ = ["AgentActor"]

log = logging.getLogger("raygents")
_exit_actor: Any = ray.actor.exit_actor

Emit = Callable[[RunEvent], None]
_Item = list[RunEvent] | Outcome | tuple[list[RunEvent], Outcome]
"""What a run sends its caller: events, the outcome, or the last events with the outcome."""
_BATCH_WINDOW_S = 0.02  # how long a streamed run's events gather before they go out together
# How long the events of runs that do not stream may wait in an outbox for company (an
# outcome, or a streamed run's events, sends everything waiting at once): a fan-out's children
# and a driver's runs cost a take per few hundred ms instead of one per batch.
_LAZY_EVENTS_S = 0.25
_WRITE_BEHIND = 32  # write-behind records of one run in flight before the run waits for them
_NOTE_WINDOW_S = 0.25  # how long reports of records written here gather before they go out
_OUTBOX_IDLE_S = 120.0  # an outbox its caller has not taken from for this long is dropped
_RETIRE_GRACE_S = 2.0  # how long a retired actor stays idle before it exits
# A finished call that took this long is journaled at once (running it again would cost more
# than a record); a quicker one waits up to _JOURNAL_WAIT_S for company, or for the batch's end.
_JOURNAL_AT_ONCE_S = 0.01
_JOURNAL_WAIT_S = 0.05
# Once two of the last three puts on the event loop took longer than this (a slow disk, a
# network filesystem; not one stall of a shared disk), the actor's puts go to worker threads
# for _SLOW_PUTS_S, so that a slow store does not stall the other runs on the actor's loop.
_INLINE_PUT_MAX_S = 0.005
_SLOW_PUTS_S = 10.0
_HANDOFF_PARAMS = {
    "type": "object",
    "properties": {},
    "required": [],
    "additionalProperties": False,
}


@dataclass
class _Outbox:
    """What one caller's runs sent and the caller has not taken yet."""

    taken: float
    """When the caller last took (or the outbox was made)."""
    items: list[tuple[str, _Item]] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the items must go: one of them is urgent, or the oldest lazy one waited
    ``_LAZY_EVENTS_S``."""
    runs: int = 0
    """Runs of this caller still relaying here."""
    timer: asyncio.TimerHandle | None = None
    takes: list[asyncio.Future[None]] = field(default_factory=list)
    """The takes waiting for the outbox to be ready."""
    lazy: dict[str, list[RunEvent]] = field(default_factory=dict)
    """The event list of each run that does not stream, while it is among the items and
    nothing of the run came after it (:meth:`add_lazy` adds to it)."""

    def post(self, run_id: str, item: _Item, urgent: bool = True) -> None:
        """Add an item; an urgent one (an outcome, a streamed run's events) wakes the take."""
        self.lazy.pop(run_id, None)  # the run's next events go after this item
        self.items.append((run_id, item))
        if urgent:
            self._set_ready()
        elif self.timer is None and not self.ready.is_set():
            self.timer = asyncio.get_running_loop().call_later(_LAZY_EVENTS_S, self._set_ready)

    def add_lazy(self, run_id: str, event: RunEvent) -> None:
        """Add an event of a run that does not stream: to the run's list waiting here, or in
        a new one (the events go with the next urgent item, or ``_LAZY_EVENTS_S`` after the
        oldest lazy one)."""
        events = self.lazy.get(run_id)
        if events is None:
            events = []
            self.post(run_id, events, urgent=False)
            self.lazy[run_id] = events
        events.append(event)

    def _set_ready(self) -> None:
        self.ready.set()
        for take in self.takes:
            _wake(take)

    async def wait_ready(self, wait_s: float) -> None:
        """Wait until the outbox is ready, or ``wait_s`` (a future woken directly, not
        ``asyncio.wait_for``'s task per wait: the take answers two turns of the loop sooner)."""
        loop = asyncio.get_running_loop()
        take: asyncio.Future[None] = loop.create_future()
        self.takes.append(take)
        timer = loop.call_later(wait_s, _wake, take)
        try:
            await take
        finally:
            timer.cancel()
            self.takes.remove(take)

    def drain(self) -> list[tuple[str, _Item]]:
        """Everything waiting, in order; the outbox is empty and not ready afterwards."""
        items, self.items = self.items, []
        self.lazy.clear()
        self.ready.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        return items


class _Relay:
    """Sends one run's events to its caller's outbox, then its outcome (from the callback of
    the run's task).

    The events of a run that does not stream join the run's list in the outbox at once (see
    :meth:`_Outbox.add_lazy`). A streamed run's event waits up to ``_BATCH_WINDOW_S`` for the
    run's next ones (fewer, larger batches cost both sides less; the run never waits for
    them), and its end sends the events not sent yet with its outcome.
    """

    def __init__(self, outbox: _Outbox, envelope: Envelope) -> None:
        self.outbox = outbox
        self.envelope = envelope
        self.batch: list[RunEvent] = []
        self.timer: asyncio.TimerHandle | None = None
        self.ended = False
        outbox.runs += 1

    def emit(self, event: RunEvent) -> None:
        if self.ended:  # nothing follows a run's outcome
            return
        if not self.envelope.stream:
            self.outbox.add_lazy(self.envelope.state.run_id, event)
            return
        self.batch.append(event)
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(_BATCH_WINDOW_S, self._flush)

    def _flush(self) -> None:
        self.timer = None
        batch, self.batch = self.batch, []
        if batch:
            self.outbox.post(self.envelope.state.run_id, batch)

    def done(self, task: asyncio.Future[Outcome]) -> None:
        """The run's task ended: send its last events and its outcome (nothing if the task
        was cancelled: the actor is going away, and its callers recover the run)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.ended = True
        self.outbox.runs -= 1
        if task.cancelled():
            return
        outcome = _outcome_of(task, self.envelope.state)
        batch, self.batch = self.batch, []
        self.outbox.post(self.envelope.state.run_id, (batch, outcome) if batch else outcome)


def _make_dir(store: FileStore, prefix: str) -> None:
    with contextlib.suppress(CheckpointError):  # (the first put tries again, and says why)
        store.make_dir(prefix)


def _wake(take: asyncio.Future[None]) -> None:
    if not take.done():
        take.set_result(None)


def _outcome_of(task: asyncio.Future[Outcome], state: RunState) -> Outcome:
    """A finished run's outcome; a failed one if the run's task itself raised (a bug here),
    so that its caller never waits for an outcome that cannot come."""
    try:
        return task.result()
    except Exception as exc:
        log.exception("run %s failed in its agent actor", state.run_id)
        error = RaygentsError(
            f"internal error in an agent actor: {type(exc).__name__}: {exc}", run_id=state.run_id
        )
        return Outcome("failed", state, error=error)


@dataclass
class _Active:
    """What the actor knows about a run it is executing."""

    token: SuspendToken
    children: dict[str, SuspendToken] = field(default_factory=dict)


class AgentActor:
    """Runs one agent of one graph snapshot. Wrapped with ``ray.remote`` where it is created.

    Args:
        graph: the agent graph by name, or its cloudpickled bytes.
        agent_name: the agent this actor serves.
        graph_fp: the fingerprint of the graph snapshot.
        namespace: the raygents namespace (to find the coordinator).
    """

    def __init__(
        self,
        graph: dict[str, Agent] | bytes,
        agent_name: str,
        graph_fp: str,
        namespace: str,
        coordinator: Any = None,
    ) -> None:
        import os

        self.directory = Directory(
            namespace, coordinator, owner=f"agent:{agent_name}@{graph_fp[:8]}:{os.getpid()}"
        )
        if isinstance(graph, bytes):
            from ray import cloudpickle

            blob = graph
            graph = cloudpickle.loads(blob)
            assert isinstance(graph, dict)
            self.directory.graphs[graph_fp] = (blob, {n: a.replicas for n, a in graph.items()})
        assert isinstance(graph, dict)
        self.graph: dict[str, Agent] = graph
        self.agent = graph[agent_name]
        self.graph_fp = graph_fp
        self._model: Model | None = None
        self._tools: dict[str, Tool] | None = None
        self._static_view: loop.AgentView | None = None
        self.task_cache: dict[str, Any] = {}
        self._active: dict[str, _Active] = {}
        self._early: dict[str, tuple[str, float]] = {}
        self._bodies: dict[str, tuple[int, checkpoint.Body]] = {}
        """The run-state body of each active run's newest record, by run (for deltas)."""
        self._newest: dict[str, RunState] = {}
        """Each active run's state as its newest record wrote it (a failure record follows it)."""
        self._unsettled: dict[str, list[Any]] = {}
        """Write-behind (``async`` mode) checkpoint writes not yet acknowledged, by run."""
        self._store: FileStore | None = None
        self._store_known = False
        self._tails: dict[str, asyncio.Future[Any]] = {}
        """The newest record each run wrote to the store itself, by run (writes chain)."""
        self._threaded_puts = 0
        """Puts running in worker threads now."""
        self._put_this_turn = False
        """Whether a put ran on the event loop in this turn of it."""
        self._threads_until = 0.0
        """Puts go to threads until then (``time.monotonic()``): those on the loop were slow."""
        self._dir_maker: concurrent.futures.ThreadPoolExecutor | None = None
        self._made_dirs: dict[str, concurrent.futures.Future[None]] = {}
        """Directories of fresh runs being made (:meth:`_make_run_dir`), by run."""
        self._slow_inline_puts: deque[bool] = deque(maxlen=3)
        """Whether each of the last puts on the loop was slow."""
        self._keys: dict[str, str] = {}
        """The key of each active run's newest record written here."""
        self._notes: list[tuple[Any, ...]] = []
        self._ends: list[RunInfo] = []
        """Ends of agent-as-tool children run from here, reported with ``_notes``."""
        self._notes_timer: asyncio.TimerHandle | None = None
        self._notes_sent: set[asyncio.Future[None]] = set()
        self._incarnation = uuid.uuid4().hex
        """Tells this incarnation of the actor from the next one, should Ray restart it."""
        self._outboxes: dict[str, _Outbox] = {}
        self._runs: set[asyncio.Future[Outcome]] = set()
        """The tasks of the runs here (the event loop keeps only weak references to tasks)."""
        self._beater: Beater | None = None
        tune_collector()

    # --- public actor methods -----------------------------------------------------------
    async def start(self, envelopes: list[Envelope], caller: str) -> str:
        """Take runs and drive each until it completes, fails, suspends or hands off.

        Returns this actor's incarnation as soon as the runs are here. A run's events and
        then its outcome go to ``caller``'s outbox, which :meth:`take` empties (see
        :class:`_Relay`): those of a run that does not stream in one list per take, which may
        wait there up to ``_LAZY_EVENTS_S``; a streamed run's in batches of up to
        ``_BATCH_WINDOW_S``, its last ones with its outcome (``(batch, outcome)``).
        """
        for envelope in envelopes:
            self._accept(envelope, caller)
        return self._incarnation

    def _accept(self, envelope: Envelope, caller: str) -> None:
        run_id = envelope.state.run_id
        token = SuspendToken(run_id)
        early = self._early.pop(run_id, None)
        cause = envelope.suspend_cause or (early[0] if early else None)
        if cause:
            token.request(cause)
        self._active[run_id] = _Active(token)  # before any await: suspend() may come next
        relay = _Relay(self._outbox(caller), envelope)
        task = asyncio.ensure_future(self._run(envelope, token, relay.emit))
        self._runs.add(task)
        task.add_done_callback(relay.done)
        task.add_done_callback(self._runs.discard)

    async def take(self, caller: str, wait_s: float, known: str | None = None) -> tuple[str, bytes]:
        """What ``caller``'s runs sent since its last take, as ``(run_id, item)`` pairs packed
        in bytes (:func:`~raygents.runtime.mailbox.unpack` reads them).

        Waits up to ``wait_s`` for something that must go (see :class:`_Outbox`), unless the
        caller last saw another incarnation (``known``) of this actor. Also returns this
        actor's incarnation, so the caller notices a restart.
        """
        outbox = self._outbox(caller)
        outbox.taken = time.monotonic()
        if not outbox.ready.is_set() and wait_s > 0 and known in (None, self._incarnation):
            await outbox.wait_ready(wait_s)
        items = outbox.drain()
        outbox.taken = time.monotonic()
        if not outbox.runs and not outbox.items:
            self._outboxes.pop(caller, None)
        return self._incarnation, pack(items)

    def _outbox(self, caller: str) -> _Outbox:
        outbox = self._outboxes.get(caller)
        if outbox is None:
            now = time.monotonic()
            for name, other in list(self._outboxes.items()):
                if now - other.taken > _OUTBOX_IDLE_S:  # its caller is gone
                    del self._outboxes[name]
            outbox = self._outboxes[caller] = _Outbox(taken=now)
        return outbox

    async def suspend(self, requests: list[tuple[str, str]]) -> None:
        """Ask runs, ``(run_id, cause)``, to suspend at their next safe point (a run not here
        yet is remembered for a minute: it may be on its way)."""
        for run_id, cause in requests:
            active = self._active.get(run_id)
            if active is None:
                now = time.monotonic()
                self._early = {k: v for k, v in self._early.items() if now - v[1] < 60}
                self._early[run_id] = (cause, now)
                continue
            active.token.request(cause)
            for child in list(active.children.values()):
                child.request(cause)

    async def retire(self) -> None:
        """Exit once no run has been active here for ``_RETIRE_GRACE_S`` and their callers
        took what they sent (a newer definition of the agent took over). The grace lets runs
        already on their way here arrive: a start may reach a new actor after its retire."""
        idle_since = undelivered_since = None
        while True:
            now = time.monotonic()
            undelivered = any(o.items for o in self._outboxes.values())
            if self._active:
                idle_since = undelivered_since = None
            elif undelivered:
                undelivered_since = undelivered_since or now
                if now - undelivered_since > _OUTBOX_IDLE_S:
                    break  # their callers are gone
            else:
                idle_since = idle_since or now
                if now - idle_since >= _RETIRE_GRACE_S:
                    break
            await asyncio.sleep(0.1)
        _exit_actor()

    def ping(self) -> int:
        """Liveness check; returns the actor's process id."""
        import os

        return os.getpid()

    def _start_beats(self) -> Beater | None:
        """Beat to the coordinator while runs are here (see :mod:`~raygents.runtime.liveness`);
        not outside a Ray actor (an actor built directly, in tests)."""
        actor_id = ray.get_runtime_context().get_actor_id()
        if actor_id is None:
            return None
        coordinator = self.directory.coordinator()
        every = float(self.directory.cached_settings()["recovery"].get("heartbeat_s", 2.0))
        return Beater(
            asyncio.get_running_loop(),
            lambda lag: coordinator.beat.remote(actor_id, lag),
            every,
            lambda: bool(self._active),
        ).start()

    # --- driving one activation ---------------------------------------------------------
    async def _run(self, envelope: Envelope, token: SuspendToken, emit: Emit) -> Outcome:
        outcome = await self._outcome(envelope, token, emit)
        await self._settle_writes(envelope.state.run_id, keep=0)
        await self._dir_made(envelope.state.run_id)
        tail = self._tails.pop(envelope.state.run_id, None)
        if tail is not None:
            if not tail.done():
                await asyncio.wait([tail])
            if outcome.kind == "handoff":  # the next actor may be one that cannot write
                await self._notes_settled()  # itself: the coordinator must have these first
            elif outcome.kind == "completed":
                self._drop_reports(envelope.state.run_id)
            # (a run that stopped otherwise had every report acknowledged before its stop
            # record)
        if self._ends:  # its children's ends reach the coordinator before its outcome leaves
            self._send_notes()
        if outcome.kind != "handoff":
            ctx = self._run_context(outcome.state, envelope.context)
            await fire(
                self.agent.hooks, "on_run_end", ctx, self.agent, outcome.output, outcome.error
            )
        return outcome

    async def _outcome(self, envelope: Envelope, token: SuspendToken, emit: Emit) -> Outcome:
        state = envelope.state
        try:
            return await self._drive(envelope, token, emit)
        except RaygentsError as exc:
            return await self._fail(state, exc.with_run_id(state.run_id))
        except Exception as exc:
            log.exception("run %s failed inside agent %r", state.run_id, self.agent.name)
            error = RaygentsError(
                f"internal error in agent {self.agent.name!r}: {type(exc).__name__}: {exc}\n"
                + traceback.format_exc(limit=5),
                run_id=state.run_id,
            )
            return await self._fail(state, error)
        finally:
            self._active.pop(state.run_id, None)
            self._bodies.pop(state.run_id, None)
            self._newest.pop(state.run_id, None)
            self._keys.pop(state.run_id, None)

    async def _drive(self, envelope: Envelope, token: SuspendToken, emit: Emit) -> Outcome:
        state, view, action = await self._begin(envelope, emit)
        record = False  # the last tool batch's record is still to be written
        while True:
            halted, state, action, record = await self._step(
                envelope, token, emit, view, state, action, record
            )
            if halted is not None:
                return halted

    async def _step(
        self,
        envelope: Envelope,
        token: SuspendToken,
        emit: Emit,
        view: loop.AgentView,
        state: RunState,
        action: loop.Action,
        record: bool,
    ) -> tuple[Outcome | None, RunState, loop.Action, bool]:
        """Take one action: the run's outcome if it ends here, else its next state and action,
        and whether the last tool batch's record is still to be written (``record``): it is
        written while the next model call runs (the call has no effects to protect, and its
        reply is used only once the record is stored; a suspend's record includes it)."""
        if token.cause is not None and isinstance(action, (loop.CallModel, loop.RunTools)):
            # a safe point: before a model call, or before a batch none of which runs yet
            # (the suspend's record holds the model's reply, and a resume runs the batch)
            halted = await self._halt(state, "suspended", emit, cause=token.cause)
            return halted, state, action, False
        hooks = self.agent.hooks
        ctx = self._run_context(state, envelope.context)
        match action:
            case loop.CallModel(request=request):
                await fire(hooks, "on_llm_start", ctx, self.agent, request)
                reply = asyncio.ensure_future(
                    self._call_model(request, state, envelope.stream, emit)
                )
                if record:
                    await asyncio.sleep(0)  # the call goes out first
                    try:
                        state = await self._save(state, "running", emit)
                    except BaseException:
                        reply.cancel()
                        await asyncio.wait([reply])
                        raise
                elif state.seq == 0 and (view.tools or view.handoffs):
                    await asyncio.sleep(0)
                    self._make_run_dir(state.run_id)
                response = await reply
                await fire(hooks, "on_llm_end", ctx, self.agent, response)
                state, action = loop.on_response(state, view, response)
                if isinstance(action, loop.RunTools):
                    state = state.evolve(turn_limit=loop.turn_limit(state, view))
                return None, state, action, False
            case loop.RunTools() as batch:
                return await self._tools_turn(state, view, envelope, batch, emit)
            case loop.Finish(output=output):
                await run_output_guardrails(
                    self.agent.output_guardrails,
                    ctx,
                    state.messages[-1],
                    on_trip=self._on_trip(ctx),
                )
                await self._save_session(state)
                end = {"output": output, "turns": state.turns, "usage": state.usage}
                self._emit(emit, state, "agent_end", **end)
                return Outcome("completed", state, output=output), state, action, False
            case loop.Fail(error=error):
                raise error
            case loop.HandoffTo(target=target, call=call):
                await fire(hooks, "on_handoff", ctx, self.agent, self.graph[target])
                state = await self._handoff(state, target, call, envelope.context)
                state = await self._save(state, "running", emit)
                self._emit(emit, state, "handoff", to_agent=target)
                return Outcome("handoff", state), state, action, False
            case _:
                assert_never(action)

    async def _begin(
        self, envelope: Envelope, emit: Emit
    ) -> tuple[RunState, loop.AgentView, loop.Action]:
        """Activate the agent for this envelope and choose the first action."""
        state = envelope.state
        await self.directory.settings()
        if self._beater is None:
            self._beater = self._start_beats()
        await self.resolve_tools()
        view = await self._view(state, envelope.context)
        if envelope.activate:
            state = loop.activate(state, view)
        ctx = self._run_context(state, envelope.context)
        fresh = envelope.activate and not envelope.resumed and state.turns == 0
        if fresh:
            state = await self._open_session(state)
            ctx = self._run_context(state, envelope.context)
            await run_input_guardrails(
                self.agent.input_guardrails, ctx, list(state.messages), on_trip=self._on_trip(ctx)
            )
        if envelope.resumed:
            await self._resume_session(state)
            await fire(self.agent.hooks, "on_restore", ctx, self.agent, state.seq)
        if envelope.resumed or fresh:
            await fire(self.agent.hooks, "on_run_start", ctx, self.agent, list(state.messages))
        self._emit(emit, state, "agent_start")
        pending = loop.pending_batch(state, view) if envelope.resumed else None
        if pending is not None:
            return state, view, pending
        state, action = loop.next_turn(state, view)
        return state, view, action

    async def _tools_turn(
        self,
        state: RunState,
        view: loop.AgentView,
        envelope: Envelope,
        batch: loop.RunTools,
        emit: Emit,
    ) -> tuple[Outcome | None, RunState, loop.Action, bool]:
        """Gate, checkpoint and run one batch; an outcome if the run must stop here, and
        whether the batch's record is still to be written (see :meth:`_step`)."""
        needs = await self._needs_approval(state, batch, envelope.context)
        state, gated = loop.gate(state, batch, needs, self.agent.name)
        if isinstance(gated, loop.Interrupt):
            return await self._halt(state, "awaiting_approval", emit), state, batch, False
        if not state.journal:
            state = await self._save(state, "running", emit)  # the intent: never ask again
        results, state, halts, journaled = await self._run_batch(state, envelope, gated, emit)
        if halts:
            pending = tuple(p for h in halts if h.kind == "interrupted" for p in h.state.pending)
            if pending:
                state = state.evolve(pending=pending)
                return await self._halt(state, "awaiting_approval", emit), state, batch, False
            cause = next(h.cause for h in halts if h.kind == "suspended")
            return await self._halt(state, "suspended", emit, cause=cause), state, batch, False
        state, action = loop.on_results(state, view, gated, [r.result for r in results])
        # (a handoff writes its own record)
        return None, state, action, isinstance(action, loop.CallModel) and not journaled

    # --- checkpoints --------------------------------------------------------------------
    def _write(
        self,
        state: RunState,
        status: checkpoint.Status,
        *,
        cause: str | None = None,
        error: str | None = None,
        durable: bool = False,
    ) -> tuple[RunState, Any]:
        """Start writing a checkpoint record; the new state and the pending write (or None).

        Sequence numbers are taken here, synchronously, so concurrent writes never collide.
        In ``exit`` mode only records of runs that stop here are written.
        """
        settings = self.directory.cached_settings()
        if settings["durability"] == "exit" and status == "running":
            return state, None
        last = self._bodies.get(state.run_id)
        previous = last[1] if last is not None and last[0] == state.seq else None
        new, record, body = checkpoint.next_record(
            state, status, previous, cause=cause, error=error
        )
        data = checkpoint.encode(record, key=settings["key"])  # (too large: no seq is taken)
        self._bodies[state.run_id] = (new.seq, body)
        self._newest[state.run_id] = new
        info = _info(new, status, error)
        full = record["kind"] == "full"
        run_id = state.run_id
        tail = self._tails.get(run_id)
        store = self._direct_store()
        key = checkpoint.key_for(run_id, new.seq, new.epoch)
        previous_key = self._keys.get(run_id)
        self._keys[run_id] = key
        if store is not None and not durable:
            put = _Put(store, key, previous_key, new, data, info, full)
            behind = settings["durability"] == "async"  # (the run does not wait for it)
            if not behind and (tail is None or tail.done()) and self._put_inline():
                write = asyncio.get_running_loop().create_future()
                started = time.monotonic()
                try:
                    self._reported(put, put.store_it())
                    write.set_result(None)
                except Exception as exc:
                    write.set_exception(exc)
                ended = time.monotonic()
                self._timed_inline_put(ended - started, ended)
            else:
                write = asyncio.ensure_future(self._put(tail, put))
            self._tails[run_id] = write
            return new, write
        args = (run_id, new.seq, data, info, durable, new.epoch, full)
        if tail is None:
            return new, self.directory.coordinator().save.remote(*args)
        del self._tails[run_id]
        return new, asyncio.ensure_future(self._save_after(tail, args))

    def _make_run_dir(self, run_id: str) -> None:
        """Make a fresh run's directory in the store while its first model call runs, so that
        its first record (the intent of its first tool batch) only writes a file (0.6 ms less
        here). The coordinator removes the directory if the run completes without records,
        so the run's outcome waits for it (see :meth:`_run`).

        In a worker thread whose end does not wake the event loop: the loop is neither
        blocked by the directory's fsyncs nor woken during the model call for it. Only for a
        run alone on the actor: the directories of runs that come together (a fan-out's
        children, a burst) are made by their first puts, whose fsyncs overlap in threads.
        """
        store = self._direct_store()
        if store is None or len(self._active) > 1:
            return
        if self._dir_maker is None:
            self._dir_maker = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="raygents-run-dirs"
            )
        prefix = checkpoint.run_prefix(run_id)
        self._made_dirs[run_id] = self._dir_maker.submit(_make_dir, store, prefix)

    async def _dir_made(self, run_id: str) -> None:
        """Wait until the directory that :meth:`_make_run_dir` makes for the run is there."""
        made = self._made_dirs.pop(run_id, None)
        if made is not None and not made.done():
            await asyncio.wrap_future(made)

    def _direct_store(self) -> FileStore | None:
        """The store, if this actor writes running runs' records to it itself: a ``sync`` or
        ``async`` file store that the coordinator shares with this node (it says so in its
        settings). ``async`` records go to worker threads: the run never waits for the disk."""
        if not self._store_known:
            settings = self.directory.cached_settings()
            here = ray.get_runtime_context().get_node_id()
            if settings.get("direct") and settings.get("node") == here:
                store = open_store(settings["store"])
                self._store = store if isinstance(store, FileStore) else None
            self._store_known = True
        return self._store

    def _put_inline(self) -> bool:
        """Whether a put should run on the event loop, blocking it (~0.5-1 ms, fsyncs): when
        no other put is running and none ran on the loop in this turn of it. A thread hop
        costs more CPU than the put (records of runs that end one by one, as a fan-out's
        children do, go this way); puts that come together overlap their fsyncs in threads,
        and so do all puts for a while once those on the loop turn slow."""
        if self._threaded_puts or self._put_this_turn or time.monotonic() < self._threads_until:
            return False
        self._put_this_turn = True
        asyncio.get_running_loop().call_soon(self._next_turn)
        return True

    def _next_turn(self) -> None:
        self._put_this_turn = False

    def _timed_inline_put(self, took: float, now: float) -> None:
        """Follow how long puts on the loop take; once two of the last three took over
        ``_INLINE_PUT_MAX_S``, puts go to threads for ``_SLOW_PUTS_S``, then try again (a single
        slow put is a stall of a shared disk, not a slow store)."""
        self._slow_inline_puts.append(took > _INLINE_PUT_MAX_S)
        if sum(self._slow_inline_puts) >= 2:
            self._threads_until = now + _SLOW_PUTS_S
            self._slow_inline_puts.clear()

    async def _put(self, tail: asyncio.Future[Any] | None, put: _Put) -> None:
        """Write a record to the store in a worker thread, after the run's previous write,
        then report it (see :meth:`_reported`)."""
        if tail is not None and not tail.done():
            await asyncio.wait([tail])  # its own waiter sees its failure
        self._threaded_puts += 1
        try:
            fenced = await asyncio.to_thread(put.store_it)
        finally:
            self._threaded_puts -= 1
        self._reported(put, fenced)

    def _reported(self, put: _Put, fenced: bool) -> None:
        """Report a stored record to the coordinator (batched).

        Raises:
            CheckpointError: the run was dispatched again: this copy is fenced, its record
                is void (the coordinator deletes it).
        """
        run_id, seq, epoch = put.state.run_id, put.state.seq, put.state.epoch
        key, data, info, full = put.key, put.data, put.info, put.full
        if fenced:
            self.directory.coordinator().discard.remote(run_id, key)
            raise CheckpointError(
                f"run {run_id!r}: checkpoint {seq} comes from dispatch {epoch}, but the run "
                "was dispatched again; this copy of the run is fenced",
                run_id=run_id,
                key=key,
            )
        self._notes.append((run_id, seq, epoch, data, info, full))
        self._note_soon()

    def _drop_reports(self, run_id: str) -> None:
        """A run completed: its records are deleted at its end, so its reports still waiting
        here are moot."""
        self._notes = [note for note in self._notes if note[0] != run_id]

    def _child_ended(self, state: RunState) -> None:
        """An agent-as-tool child run completed: report its end with the next reports (its
        parent's journal record of the result is usually one of them)."""
        from raygents.runtime.coordinator import RunInfo

        info = RunInfo(state.run_id, "completed", state.agent_name, state.turns, seq=state.seq)
        self._ends.append(info)
        self._note_soon()

    def _note_soon(self) -> None:
        if self._notes_timer is None:
            loop = asyncio.get_running_loop()
            self._notes_timer = loop.call_later(_NOTE_WINDOW_S, self._send_notes)

    def _send_notes(self) -> None:
        """Report the records written here and the children that ended since the last
        report, in one call."""
        if self._notes_timer is not None:
            self._notes_timer.cancel()
            self._notes_timer = None
        if not self._notes and not self._ends:
            return
        notes, self._notes = self._notes, []
        ends, self._ends = self._ends, []
        ack = self.directory.coordinator().noted.remote(notes, ends)
        sent = asyncio.ensure_future(_acknowledged(ack))
        self._notes_sent.add(sent)
        sent.add_done_callback(self._notes_sent.discard)

    async def _notes_settled(self) -> None:
        """Report pending records now and wait until the coordinator has every report."""
        self._send_notes()
        if self._notes_sent:
            await asyncio.wait(list(self._notes_sent))

    async def _save_after(self, tail: asyncio.Future[Any], args: tuple[Any, ...]) -> None:
        """Have the coordinator store a record once the run's own writes are reported."""
        await asyncio.wait([tail])
        await self._notes_settled()
        await self.directory.coordinator().save.remote(*args)

    async def _save(
        self,
        state: RunState,
        status: checkpoint.Status,
        emit: Emit | None,
        *,
        cause: str | None = None,
        error: str | None = None,
        durable: bool = False,
    ) -> RunState:
        """Write a checkpoint record and wait until the coordinator has it.

        In ``async`` mode a record that need not be durable is not waited for: its write is
        acknowledged before the run's outcome goes out.
        """
        new, write = self._write(state, status, cause=cause, error=error, durable=durable)
        if write is None:
            return new
        if durable or self.directory.cached_settings()["durability"] != "async":
            await write
        else:
            self._unsettled.setdefault(state.run_id, []).append(write)
            await self._settle_writes(state.run_id, keep=_WRITE_BEHIND)
        await self._checkpointed(new, status, emit)
        return new

    async def _checkpointed(
        self, state: RunState, status: checkpoint.Status, emit: Emit | None
    ) -> None:
        """Report a written record: the ``checkpoint`` event and the ``on_checkpoint`` hook."""
        if emit is not None:
            self._emit(emit, state, "checkpoint", data={"seq": state.seq, "status": status})
        ctx = RunContext(state.run_id, self.agent.name, None, state.turns, state.usage)
        await fire(self.agent.hooks, "on_checkpoint", ctx, self.agent, state.seq, status)

    async def _settle_writes(self, run_id: str, keep: int) -> None:
        """Wait for a run's write-behind records until at most ``keep`` are in flight."""
        writes = self._unsettled.get(run_id)
        if not writes or len(writes) <= keep:
            return
        head, rest = writes[: len(writes) - keep], writes[len(writes) - keep :]
        if rest:
            self._unsettled[run_id] = rest
        else:
            del self._unsettled[run_id]
        for result in await asyncio.gather(*head, return_exceptions=True):
            if isinstance(result, BaseException):
                log.warning("run %s: a write-behind checkpoint failed: %s", run_id, result)

    async def _halt(
        self, state: RunState, status: checkpoint.Status, emit: Emit, *, cause: str | None = None
    ) -> Outcome:
        """Stop the run with a durable checkpoint (suspend or approval interrupt)."""
        kind: OutcomeKind = "suspended" if status == "suspended" else "interrupted"
        try:
            state = await self._save(state, status, emit, cause=cause, durable=True)
        except (CheckpointError, ray.exceptions.RayError) as exc:
            log.error("run %s: cannot store its %s checkpoint: %s", state.run_id, status, exc)
            return Outcome(kind, state, cause=cause, checkpoint_error=str(exc))
        return Outcome(kind, state, cause=cause)

    async def _fail(self, state: RunState, error: RaygentsError) -> Outcome:
        """Store the run's failure at its next free seq: after the newest record this
        activation wrote, if it wrote any (``state`` is the one it started from)."""
        newest = self._newest.get(state.run_id)
        if newest is not None and newest.seq > state.seq:
            state = newest
        try:
            state = await self._save(state, "failed", None, error=str(error)[:2000], durable=True)
        except Exception as exc:  # the failure itself is what the caller must see
            log.warning("run %s: cannot store its failure checkpoint: %s", state.run_id, exc)
        return Outcome("failed", state, error=error)

    # --- sessions and guardrails ---------------------------------------------------------
    async def _open_session(self, state: RunState) -> RunState:
        """Prepend the start agent's session history (a fresh top-level run only)."""
        if state.session_id is None or self.agent.session is None:
            return state
        holder = await self.directory.coordinator().lock_session.remote(
            state.session_id, state.run_id
        )
        if holder is not None:
            raise UserError(
                f"session {state.session_id!r} is in use by run {holder!r}; runs on one session "
                "are serialised: wait for it to end, or use another session_id",
                run_id=state.run_id,
            )
        history = await load_session(self.agent.session, state.session_id)
        messages = (*history, *state.messages)
        return state.evolve(messages=messages, input_len=len(messages), recorded=0)

    async def _resume_session(self, state: RunState) -> None:
        """A resumed top-level run takes its session again (a run releases it when it stops).

        While another run holds it, this one waits for that run to end (or stop), polling,
        unless it is asked to suspend: then it goes on to halt at its first safe point, before
        any save. It waits rather than fails: a resumed run cannot pick another session, and
        failing would store it as failed, with the approvals it was given spent.
        """
        session_id = state.session_id
        start = self.graph.get(state.start_agent or self.agent.name)
        if session_id is None or state.depth or start is None or start.session is None:
            return
        delay, waited = 0.05, False
        while True:
            holder = await self.directory.coordinator().lock_session.remote(
                session_id, state.run_id
            )
            active = self._active.get(state.run_id)
            if holder is None or (active is not None and active.token.cause is not None):
                return
            if not waited:
                log.info(
                    "run %s waits for run %s, which holds session %r",
                    state.run_id,
                    holder,
                    session_id,
                )
                waited = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _save_session(self, state: RunState) -> None:
        """Save the conversation to the start agent's session (on success only), keeping
        what other runs saved since this one loaded it (see :func:`save_session`)."""
        if state.session_id is None or state.depth:
            return
        session = self.graph[state.start_agent or self.agent.name].session
        if session is not None:
            # (a history an input_filter rewrote no longer begins with what the run loaded)
            input_len = None if state.rewritten else state.input_len
            await save_session(session, state.session_id, list(state.messages), input_len=input_len)

    def _on_trip(self, ctx: RunContext) -> Any:
        async def on_trip(name: str, result: Any) -> None:
            await fire(
                self.agent.hooks, "on_guardrail_tripped", ctx, self.agent, name, result.message
            )

        return on_trip

    # --- the agent, as the loop sees it -------------------------------------------------
    def tools(self) -> dict[str, Tool]:
        """The agent's tools by name (handoff tools are not included)."""
        assert self._tools is not None, "resolve_tools() must run first"
        return self._tools

    async def resolve_tools(self) -> None:
        """Collect the agent's tools, its MCP servers' tools and its handoff tools.

        MCP servers connect on first use and keep their connection for the actor's life;
        their tool lists are cached until ``reset_cache()``. A name used twice fails the run.
        """
        sources: list[tuple[str, Tool]] = [("the agent's tools", t) for t in self.agent.tools]
        for server in self.agent.mcp_servers:
            for t in await server.list_tools():
                sources.append((f"MCP server {server.name!r}", t))
        owners: dict[str, str] = {}
        for h in self.agent.handoff_configs():
            owners[h.tool_name] = f"the handoff to {h.agent.name!r}"
        for owner, t in sources:
            if t.name in owners:
                raise UserError(
                    f"agent {self.agent.name!r}: tool name {t.name!r} is used by {owners[t.name]} "
                    f"and by {owner}; rename one of them"
                )
            owners[t.name] = owner
        tools = {t.name: t for _, t in sources}
        if self._tools is None or set(tools) != set(self._tools):
            self._tools = tools
            self._static_view = None

    def _base_view(self) -> loop.AgentView:
        if self._static_view is None:
            agent = self.agent
            handoffs = agent.handoff_configs()
            specs = [t.spec() for t in self.tools().values()]
            specs += [
                ToolSpec(
                    name=h.tool_name, description=h.tool_description, parameters=_HANDOFF_PARAMS
                )
                for h in handoffs
            ]
            output_schema = None
            if agent.output_type is not None:
                output_schema = {
                    "name": type_name(agent.output_type),
                    "schema": type_schema(agent.output_type),
                }
            behavior = agent.tool_use_behavior
            self._static_view = loop.AgentView(
                name=agent.name,
                tools=tuple(specs),
                handoffs={h.tool_name: h.agent.name for h in handoffs},
                output_schema=output_schema,
                settings=agent.model_settings.to_data(),
                tool_use_behavior=behavior if isinstance(behavior, str) else behavior.tool_names,
                reset_tool_choice=agent.reset_tool_choice,
                max_turns=agent.max_turns,
                max_empty_output_retries=agent.max_empty_output_retries,
                max_tool_calls_per_turn=agent.max_tool_calls_per_turn,
                max_model_calls=agent.max_model_calls,
            )
        return self._static_view

    async def _view(self, state: RunState, context: Any) -> loop.AgentView:
        base = self._base_view()
        system = await self.agent.system_prompt(self._run_context(state, context))
        changes: dict[str, Any] = {"system": system}
        if state.response_format is not None:
            changes["output_schema"] = state.response_format
        return dataclasses.replace(base, **changes)

    def _run_context(self, state: RunState, context: Any) -> RunContext:
        return RunContext(state.run_id, self.agent.name, context, state.turns, state.usage)

    # --- model calls --------------------------------------------------------------------
    def model(self) -> Model:
        """The agent's model, resolved in this process on first use."""
        if self._model is None:
            self._model = resolve_model(self.agent.model)
        return self._model

    async def _call_model(
        self, request: ModelRequest, state: RunState, stream: bool, emit: Emit
    ) -> ModelResponse:
        model = self.model()
        streamer = getattr(model, "stream", None)
        try:
            if stream and streamer is not None:
                response = await self._stream_model(streamer(request), state, emit)
            else:
                response = await model.respond(request)
        except RaygentsError:
            raise
        except Exception as exc:  # provider errors must not escape as foreign exceptions
            raise ModelError(
                f"cannot call model for agent {self.agent.name!r}: {type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(response, ModelResponse):
            raise ModelError(
                f"model of agent {self.agent.name!r} returned "
                f"{type(response).__name__!r}, not ModelResponse"
            )
        return check_response(response, self.agent.name)

    async def _stream_model(
        self, chunks: AsyncIterator[Any], state: RunState, emit: Emit
    ) -> ModelResponse:
        final = None
        async for chunk in chunks:
            if isinstance(chunk, str):
                if chunk:
                    self._emit(emit, state, "llm_delta", delta=chunk)
            elif isinstance(chunk, ModelResponse):
                final = chunk
        if final is None:
            raise ModelError(
                f"the streaming model of agent {self.agent.name!r} ended without a response"
            )
        return final

    # --- tool calls ---------------------------------------------------------------------
    async def _needs_approval(
        self, state: RunState, batch: loop.RunTools, context: Any
    ) -> frozenset[str]:
        tools = self.tools()
        approval = self.agent.approval
        needs = set()
        for step in batch.steps:
            if not isinstance(step, loop.Execute) or step.call.id in state.journal:
                continue
            t = tools[step.call.name]
            if t.needs_approval or (
                approval is not None
                and await approval.needs(self._run_context(state, context), step.call)
            ):
                needs.add(step.call.id)
        return frozenset(needs)

    async def _run_batch(
        self, state: RunState, envelope: Envelope, batch: loop.RunTools, emit: Emit
    ) -> tuple[list[StepResult], RunState, list[Outcome], bool]:
        """Run a batch; finished calls go to the journal. Returns halted children too, and
        whether the journal records hold every result (then the batch needs no other record:
        a resume replays the results from the journal)."""
        journal = _Journal(self, state, emit, len(batch.steps))

        async def one(step: loop.ToolStep) -> StepResult:
            started = time.perf_counter()
            out = await self._run_step(journal.state, envelope, step, emit)
            took = time.perf_counter() - started
            if isinstance(step, loop.Execute) and out.halt is None:
                journal.finished(took, step.call.id, out.result)
            else:
                journal.finished(took)
            return out

        if batch.sequential:
            results = [await one(step) for step in batch.steps]
        else:
            results = list(await asyncio.gather(*(one(s) for s in batch.steps)))
        complete = await journal.settle()
        state = journal.state
        for r in results:
            if r.usage is not None:
                state = state.evolve(usage=state.usage + r.usage)
                complete = False  # children's usage is not in the journal
        halts = [r.halt for r in results if r.halt is not None]
        return results, state, halts, complete

    async def _run_step(
        self, state: RunState, envelope: Envelope, step: loop.ToolStep, emit: Emit
    ) -> StepResult:
        if isinstance(step, loop.Transfer):
            await self._on_handoff(state, step.target, envelope.context)
        fixed = loop.step_result(step)
        if fixed is not None:
            return StepResult(fixed)
        call = step.call
        if call.id in state.journal:
            return StepResult(state.journal[call.id])
        t = self.tools()[call.name]
        hook_ctx = self._run_context(state, envelope.context)
        await fire(self.agent.hooks, "on_tool_start", hook_ctx, self.agent, call)
        self._emit(
            emit,
            state,
            "tool_start",
            tool_name=call.name,
            call_id=call.id,
            arguments=call.arguments,
        )
        started = time.perf_counter()
        if isinstance(t, AgentTool):
            active = self._active.get(state.run_id)
            tokens = active.children if active is not None else None
            out = await run_child(
                self.directory, state, envelope, call, t, emit, tokens, self._child_ended
            )
        else:
            ctx = ToolContext(
                state.run_id, call.id, call.name, self.agent.name, state.depth, envelope.context
            )
            running = run_tool(t, ctx, call.arguments, self.task_cache)
            if t.remote or t.timeout_s is None:
                out = await running
            else:  # in this actor (a remote call's task has its own limit)
                try:
                    out = await asyncio.wait_for(running, t.timeout_s)
                except asyncio.TimeoutError:
                    out = StepResult(tool_error(t.name, f"timed out after {t.timeout_s} s"))
        self._emit(
            emit,
            state,
            "tool_end",
            tool_name=call.name,
            call_id=call.id,
            result=out.result.content,
            is_error=out.result.is_error,
            duration_s=time.perf_counter() - started,
            data=out.data,
        )
        await fire(self.agent.hooks, "on_tool_end", hook_ctx, self.agent, call, out.result)
        return out

    # --- handoffs -----------------------------------------------------------------------
    def _handoff_config(self, target: str) -> Any:
        return next(h for h in self.agent.handoff_configs() if h.agent.name == target)

    async def _on_handoff(self, state: RunState, target: str, context: Any) -> None:
        callback = self._handoff_config(target).on_handoff
        if callback is None:
            return
        try:
            result = callback(self._run_context(state, context))
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                await result
        except Exception as exc:
            raise RaygentsError(
                f"cannot execute handoff callback for {target!r}: {exc}", run_id=state.run_id
            ) from None

    async def _handoff(
        self, state: RunState, target: str, call: ToolCall, context: Any
    ) -> RunState:
        config = self._handoff_config(target)
        if config.input_filter is None:
            return loop.apply_handoff(state, target)
        data = HandoffInputData(
            state.messages[: state.input_len], state.messages[state.input_len :]
        )
        try:
            messages = list(config.input_filter(data))
        except Exception as exc:
            raise RaygentsError(
                f"handoff input_filter for {target!r} failed: {exc}", run_id=state.run_id
            ) from None
        if not all(isinstance(m, Message) for m in messages):
            raise UserError(f"handoff input_filter for {target!r} must return Message objects")
        return loop.apply_handoff(state, target, messages)

    # --- events -------------------------------------------------------------------------
    def _emit(self, emit: Emit, state: RunState, kind: Any, **fields: Any) -> None:
        emit(
            RunEvent(
                type=kind,
                run_id=state.run_id,
                agent_name=self.agent.name,
                path=state.path,
                **fields,
            )
        )


def _info(state: RunState, status: str, error: str | None) -> tuple[str, str, int, str | None]:
    """A record's run-table fields: status, agent, turns, error (a tuple travels cheaper)."""
    return (status, state.agent_name, state.turns, error)


@dataclass(frozen=True)
class _Put:
    """A record that an agent actor writes to the store itself."""

    store: FileStore
    key: str
    previous_key: str | None
    state: RunState
    data: bytes
    info: tuple[str, str, int, str | None]
    full: bool

    def store_it(self) -> bool:
        """Put the record (blocking); True if this copy of the run turned out to be fenced."""
        fence = checkpoint.fence_key(self.state.run_id, self.state.epoch + 1)
        first = self.state.seq == 1
        return _put_unless_fenced(self.store, self.key, self.data, fence, first, self.previous_key)


def _put_unless_fenced(
    store: FileStore, key: str, data: bytes, fence: str, first: bool, previous: str | None
) -> bool:
    """Put a record; True if this copy of the run is fenced: the run's next dispatch marked
    the store, or the run's records are gone (it ended elsewhere and they were deleted).

    The checks come after the put, mark first: a deletion of the run's records takes the
    records (sorted first) before the mark, so a copy that misses the mark misses
    ``previous`` (its own previous record), and a put after the deletion finds no directory.
    """
    if first:
        store.put(key, data)
    elif not store.put_if_dir(key, data):
        return True
    return store.has(fence) or (previous is not None and not store.has(previous))


async def _acknowledged(ref: Any) -> None:
    try:
        await ref
    except ray.exceptions.RayError as exc:  # the records are stored; the table catches up
        log.warning("the coordinator missed reports of stored checkpoints: %s", exc)


class _Journal:
    """The journal records of one batch, group-committed.

    A finished call's result goes into a record at once if the call took
    ``_JOURNAL_AT_ONCE_S`` or more (running it again would cost more than the record), else
    within ``_JOURNAL_WAIT_S``, with the calls that finish meanwhile; while a record is in
    flight, finished calls go in the next one. The batch's last call is left to the batch's
    own record, which the run writes while its next model call runs.
    """

    def __init__(self, actor: AgentActor, state: RunState, emit: Emit, calls: int) -> None:
        self.actor = actor
        self.state = state
        self.emit = emit
        self.entries = dict(state.journal)
        self.written = set(state.journal)
        self.failed = False
        self.left = calls  # steps of the batch still running
        self._flight: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def finished(
        self, took_s: float, call_id: str | None = None, result: ToolResult | None = None
    ) -> None:
        """A step of the batch finished (``call_id``, ``result``: a call to journal)."""
        self.left -= 1
        if call_id is None or result is None or call_id in self.entries:
            return
        self.entries[call_id] = result
        if self._flight is not None or self.left <= 0:
            return  # the record in flight loops for it, or the batch's own record has it
        if took_s >= _JOURNAL_AT_ONCE_S:
            self._write_now()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(_JOURNAL_WAIT_S, self._due)

    def _due(self) -> None:
        self._timer = None
        if self._flight is None and self.left > 0:
            self._write_now()

    def _write_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._flight = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        try:
            while not self.failed and self.left > 0 and self.written != self.entries.keys():
                ids = set(self.entries)
                state = self.state.evolve(journal=dict(self.entries))
                self.state, write = self.actor._write(state, "running")
                if write is not None:
                    try:
                        await write
                    except Exception as exc:  # the batch's own record covers it
                        log.warning(
                            "run %s: a journal checkpoint failed: %s", self.state.run_id, exc
                        )
                        self.failed = True
                        self.state = self.state.evolve(recorded=0)  # next record: a full one
                        return
                    await self.actor._checkpointed(self.state, "running", self.emit)
                self.written = ids
        finally:
            self._flight = None

    async def settle(self) -> bool:
        """Wait for the records in flight; True if every result is in a written record."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._flight is not None:
            await self._flight
        return not self.failed and self.written == self.entries.keys()
