"""AgentActor: serves one agent to every run that reaches it, driving the pure loop."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from typing_extensions import assert_never

from raygents.agents.agent import Agent
from raygents.agents.guardrails import run_input_guardrails, run_output_guardrails
from raygents.agents.hooks import fire
from raygents.agents.tools import Tool
from raygents.agents.tooluse import final_value
from raygents.core import loop, recovered
from raygents.core.context import RunContext
from raygents.core.envelope import Envelope, Outcome, RunState, SuspendRequest
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.errors import CANCEL, RaygentsError, RunCancelled, UserError
from raygents.models.base import Model, resolve_model
from raygents.records import checkpoint
from raygents.runtime.actor.compactor import Compactor
from raygents.runtime.actor.idle import Idleness, holds, quiet, retiring, watch
from raygents.runtime.actor.inputs import RunInputs
from raygents.runtime.actor.outbox import Outboxes, Relay
from raygents.runtime.actor.runsession import open_session, resume_session, save_run_session
from raygents.runtime.actor.stops import Emit, Stops, send_event
from raygents.runtime.actor.toolbox import Toolbox
from raygents.runtime.actor.toolcalls import ToolCalls
from raygents.runtime.actor.writer import RecordWriter
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.drive import SuspendToken
from raygents.runtime.link.liveness import Beater, watch_coordinator
from raygents.runtime.link.mailbox import RETIRED
from raygents.runtime.link.process import tune_collector
from raygents.telemetry import logs, metrics, tracing

__all__ = ["EARLY_S", "AgentActor"]

log = logging.getLogger("raygents")
_exit_actor: Any = ray.actor.exit_actor

_RETIRE_GRACE_S = 2.0  # how long a retired actor stays idle before it exits
EARLY_S = 60.0
"""How long a suspend request for a run not on the actor is kept (the run may be on its way)."""


@dataclass
class _Active:
    """What the actor knows about a run it is executing."""

    token: SuspendToken
    children: dict[str, SuspendToken] = field(default_factory=dict)
    drive: asyncio.Future[Outcome] | None = None
    """The task driving the run (a cancel cancels it)."""
    waiting_call: asyncio.Future[ModelResponse] | None = None
    """Its model call while it waits for a turn at the rate limiter (a suspend cancels it:
    nothing went out yet, so the run can stop before the call)."""


class AgentActor:
    """Runs one agent of one graph snapshot. Wrapped with ``ray.remote`` where it is created.

    Args:
        graph: the agent graph by name, or its cloudpickled bytes.
        agent_name: the agent this actor serves.
        graph_fp: the fingerprint of the graph snapshot.
        namespace: the raygents namespace (to find the coordinator).
        coordinator: the coordinator's handle (found by name in ``namespace`` if None).
        definitions: the definition fingerprints of the graph's agents (to register the
            graph again with a restarted coordinator).
    """

    def __init__(
        self,
        graph: dict[str, Agent] | bytes,
        agent_name: str,
        graph_fp: str,
        namespace: str,
        coordinator: Any = None,
        definitions: dict[str, str] | None = None,
    ) -> None:
        self.namespace = namespace
        self.directory = Directory(namespace, coordinator)
        self.writer = RecordWriter(self.directory, self._checkpointed)
        self._bind(graph, agent_name, graph_fp, definitions)
        self._active: dict[str, _Active] = {}
        self._early: dict[str, tuple[str, float, int | None]] = {}
        """Requests for runs not here: ``(cause, when, epoch)`` by run id (see :meth:`suspend`)."""
        self._incarnation = uuid.uuid4().hex
        """Tells this incarnation of the actor from the next one, should Ray restart it."""
        self._outboxes = Outboxes()
        self._runs: set[asyncio.Future[Outcome]] = set()
        """The tasks of the runs here (the event loop keeps only weak references to tasks)."""
        self._beater: Beater | None = None
        self._watch: asyncio.Future[None] | None = None
        self.idleness = Idleness(self._busy)
        self._idle_watch: asyncio.Future[None] | None = None
        self.retiring = False
        """It was idle for ``idle_actor_s`` and is leaving: it takes no run any more."""
        self._leaving = False
        """It was told to retire: it takes no other agent (see :meth:`adopt`)."""
        tune_collector()
        logs.setup()

    def _bind(
        self,
        graph: dict[str, Agent] | bytes,
        agent_name: str,
        graph_fp: str,
        definitions: dict[str, str] | None,
    ) -> None:
        """Serve agent ``agent_name`` of graph ``graph_fp`` (see :meth:`__init__`): what the
        actor keeps of the agent it serves, built from its definition (nothing changes if
        that raises)."""
        blob = None
        if isinstance(graph, bytes):
            from ray import cloudpickle

            blob, graph = graph, cloudpickle.loads(graph)
        assert isinstance(graph, dict)
        agent = graph[agent_name]
        toolbox = Toolbox(agent)
        if blob is not None:
            replicas = {n: a.replicas for n, a in graph.items()}
            self.directory.graphs.clear()  # (an adopted graph replaces the one before)
            self.directory.graphs[graph_fp] = (blob, replicas, definitions)
        self.directory.owner = f"agent:{agent_name}@{graph_fp[:8]}:{os.getpid()}"
        self.graph: dict[str, Agent] = graph
        self.agent = agent
        self.graph_fp = graph_fp
        self._model: Model | None = None
        self.toolbox = toolbox
        self.stops = Stops(agent)
        self.stops.writer = self.writer
        self.calls = ToolCalls(
            agent, toolbox, self.directory, self.writer, self._emit, self._children
        )
        self.task_cache = self.calls.task_cache
        self.inputs = RunInputs(agent_name, self.directory)
        self.compactor = Compactor(
            agent, self.model, self.namespace, self.directory.cached_settings
        )

    async def _checkpointed(
        self, state: RunState, status: checkpoint.Status, emit: Emit | None
    ) -> None:
        """A record was written (the writer's report, to the agent served now)."""
        await self.stops.checkpointed(state, status, emit)

    # --- public actor methods -----------------------------------------------------------
    async def start(self, envelopes: list[Envelope], caller: str) -> str:
        """Take runs and drive each until it completes, fails, suspends or hands off.

        Returns this actor's incarnation as soon as the runs are here, or ``RETIRED`` (and
        takes none of them) once the actor retires for idleness, or when a run is not for the
        agent it serves now (its caller's handle is older than an :meth:`adopt`). A run's
        events and then its outcome go to ``caller``'s outbox, which :meth:`take` empties (see
        :class:`~raygents.runtime.actor.outbox.Relay`): those of a run that does not stream in one
        list per take, which may wait there a moment for company; a streamed run's in small
        batches, its last ones with its outcome (``(batch, outcome)``).
        """
        if self.retiring or not all(self._serves(envelope) for envelope in envelopes):
            return RETIRED
        if self._idle_watch is None:
            self._idle_watch = asyncio.ensure_future(self._watch_idleness())
        for envelope in envelopes:
            self._accept(envelope, caller)
        return self._incarnation

    def _serves(self, envelope: Envelope) -> bool:
        return envelope.graph_fp == self.graph_fp and envelope.state.agent_name == self.agent.name

    def adopt(
        self,
        graph: bytes,
        agent_name: str,
        graph_fp: str,
        definitions: dict[str, str] | None,
        idle_s: float,
    ) -> bool:
        """Serve agent ``agent_name`` of graph ``graph_fp`` from now on, instead of the agent
        it serves, if this actor has held nothing a caller needs for ``idle_s`` (and is not
        leaving, and its agent keeps no connections to MCP servers). The coordinator asks
        this of an idle actor before it starts a new process for an agent.

        A caller that still holds this actor's handle for the agent it served before is
        refused (:meth:`start` answers ``RETIRED``) and asks the coordinator again. Returns
        whether the actor took the agent: not if the definition cannot be loaded here (a new
        actor then reports why).
        """
        if self.retiring or self._leaving or self.agent.mcp_servers:
            return False
        if self._busy() or self.idleness.idle_for() < idle_s:
            return False
        try:
            self._bind(graph, agent_name, graph_fp, definitions)
        except Exception:
            log.info("agent %r cannot be loaded by an idle actor", agent_name, exc_info=True)
            return False
        self.idleness.touch()
        log.info("an idle actor now serves agent %r (graph %s)", agent_name, graph_fp[:8])
        return True

    def _accept(self, envelope: Envelope, caller: str) -> None:
        run_id = envelope.state.run_id
        token = SuspendToken(run_id)
        early = self._early.pop(run_id, None)
        if early is not None and early[2] is not None and envelope.state.epoch > early[2]:
            early = None  # (asked of an earlier dispatch: this one came after it)
        cause = envelope.suspend_cause or (early[0] if early else None)
        if cause:
            token.request(cause)
        self._active[run_id] = _Active(token)  # before any await: suspend() may come next
        relay = Relay(self._outboxes.get(caller), envelope)
        task = asyncio.ensure_future(self._run(envelope, token, relay.emit))
        self._runs.add(task)
        task.add_done_callback(relay.done)
        task.add_done_callback(self._runs.discard)
        task.add_done_callback(lambda _: self.idleness.touch())
        self.idleness.touch()

    async def take(self, caller: str, wait_s: float, known: str | None = None) -> tuple[str, bytes]:
        """What ``caller``'s runs sent since its last take, as ``(run_id, item)`` pairs packed
        in bytes (:func:`~raygents.runtime.link.mailbox.unpack` reads them).

        Waits up to ``wait_s`` for something that must go (see
        :class:`~raygents.runtime.actor.outbox.Outbox`), unless the caller last saw another
        incarnation (``known``) of this actor. Also returns this actor's incarnation, so the
        caller notices a restart.
        """
        wait = known in (None, self._incarnation)
        return self._incarnation, await self._outboxes.take(caller, wait_s, wait)

    async def suspend(self, requests: Sequence[SuspendRequest]) -> None:
        """Ask runs, ``(run_id, cause[, epoch])``, to suspend at their next safe point.

        A run not here yet is remembered for a minute: it may be on its way. With the epoch
        of the dispatch the request was made for, it then holds only for that dispatch: a
        request that arrives after the run left (it suspended here) does not suspend the
        run's next dispatch (its resume) when it comes.
        """
        for run_id, cause, *rest in requests:
            active = self._active.get(run_id)
            if active is None:
                now = time.monotonic()
                self._early = {k: v for k, v in self._early.items() if now - v[1] < EARLY_S}
                self._early[run_id] = (cause, now, rest[0] if rest else None)
                continue
            active.token.request(cause)
            for child in list(active.children.values()):
                child.request(cause)
            if cause == CANCEL and active.drive is not None:
                active.drive.cancel()  # (its tool tasks are cancelled through Ray)
            elif active.waiting_call is not None:
                active.waiting_call.cancel()

    async def retire(
        self, grace_s: float = _RETIRE_GRACE_S, serving: tuple[str, str] | None = None
    ) -> None:
        """Exit once no run has been active here for ``grace_s`` and their callers took what
        they sent (a newer definition of the agent took over, or the actor was idle), with
        its reports to the coordinator acknowledged. The grace lets runs already on their
        way here arrive: a start may reach a new actor after its retire. A retire meant for
        the actor ``serving`` an agent, ``(graph_fp, agent_name)``, is ignored by one that
        serves another now (it took another agent, see :meth:`adopt`)."""
        if serving is not None and serving != (self.graph_fp, self.agent.name):
            return
        self._leaving = True
        await quiet(lambda: bool(self._active), self._outboxes, grace_s)
        await self.writer.reports.settled()
        tracing.flush()
        _exit_actor()

    def _busy(self) -> bool:
        return holds(self._active, self._outboxes, self._early, EARLY_S)

    async def _watch_idleness(self) -> None:
        """Once idle for the namespace's ``idle_actor_s`` (if set, and in a Ray actor), take
        no run, have the coordinator stop handing this actor out, then exit (in an actor
        call: Ray exits an async actor only from one)."""
        me = ray.get_runtime_context().get_actor_id()
        idle_s = None if me is None else (await self.directory.settings()).idle_actor_s
        if me is not None and idle_s is not None:
            await watch(self.idleness, idle_s)
            self.retiring = True
            await retiring(self.directory.client, self.graph_fp, self.agent.name, me, idle_s)
            ray.get_runtime_context().current_actor.retire.remote(_RETIRE_GRACE_S)

    def ping(self) -> int:
        """Liveness check; returns the actor's process id."""
        return os.getpid()

    async def flush_spans(self) -> None:
        """Export the spans this actor holds (before it is stopped)."""
        await asyncio.to_thread(tracing.flush, 2.0)

    # --- the agent, as the loop sees it -------------------------------------------------
    def tools(self) -> dict[str, Tool]:
        """The agent's tools by name (handoff tools are not included)."""
        return self.toolbox.tools()

    async def resolve_tools(self) -> None:
        """Collect the agent's tools (see :meth:`Toolbox.resolve_tools`)."""
        await self.toolbox.resolve_tools()

    def model(self) -> Model:
        """The agent's model, resolved in this process on first use."""
        if self._model is None:
            self._model = resolve_model(self.agent.model)
        return self._model

    def _start_beats(self) -> Beater | None:
        """Beat to the coordinator while runs are here (see :mod:`~raygents.runtime.link.liveness`);
        not outside a Ray actor (an actor built directly, in tests)."""
        actor_id = ray.get_runtime_context().get_actor_id()
        if actor_id is None:
            return None
        client = self.directory.client
        every = self.directory.cached_settings().recovery.heartbeat_s
        self._watch = asyncio.ensure_future(watch_coordinator(client, every, self.agent.name))
        return Beater(
            asyncio.get_running_loop(),
            lambda lag: client.beat(actor_id, lag),
            every,
            lambda: bool(self._active),
        ).start()

    def _children(self, run_id: str) -> dict[str, SuspendToken] | None:
        active = self._active.get(run_id)
        return active.children if active is not None else None

    # --- driving one activation ---------------------------------------------------------
    async def _run(self, envelope: Envelope, token: SuspendToken, emit: Emit) -> Outcome:
        logs.bind(envelope.state.run_id, self.agent.name)  # (this task's log records)
        trace = tracing.trace_of(envelope.state)  # (a top-level run's trace begins here)
        if trace is not envelope.state.trace:
            envelope = dataclasses.replace(envelope, state=envelope.state.evolve(trace=trace))
        outcome = await self._outcome(envelope, token, emit)
        await self.writer.finish(outcome)
        metrics.run_ended(self.agent.name, outcome)
        if outcome.kind in ("completed", "failed") and outcome.state.trace is not None:
            self._end_trace(outcome)
        if outcome.kind != "handoff":
            ctx = self._run_context(outcome.state, envelope.context)
            await fire(
                self.agent.hooks, "on_run_end", ctx, self.agent, outcome.output, outcome.error
            )
            try:  # (its writes reach the result; the run's records are written already)
                outcome.state = self.inputs.captured(outcome.state, envelope)
            except UserError:
                log.warning("run %s: on_run_end left a context that is not plain data", ctx.run_id)
        return outcome

    async def _outcome(self, envelope: Envelope, token: SuspendToken, emit: Emit) -> Outcome:
        state = envelope.state
        try:
            if token.cause == CANCEL:
                return await self.stops.cancelled(state)
            # the run's context as the run left it (where it ran before), for this activation
            # (envelope: this activation's own copy, shared by every step of it)
            envelope.context = self.inputs.revived(state, envelope.context)
            drive = asyncio.ensure_future(self._drive(envelope, token, emit))
            active = self._active.get(state.run_id)
            if active is not None:
                active.drive = drive
            try:
                return await drive
            except asyncio.CancelledError:
                if token.cause != CANCEL or not drive.cancelled():
                    raise
                return await self.stops.cancelled(state)
        except RaygentsError as exc:
            return await self.stops.fail(state, exc.with_run_id(state.run_id))
        except Exception as exc:
            log.exception("run %s failed inside agent %r", state.run_id, self.agent.name)
            error = RaygentsError(
                f"internal error in agent {self.agent.name!r}: {type(exc).__name__}: {exc}\n"
                + traceback.format_exc(limit=5),
                run_id=state.run_id,
            )
            return await self.stops.fail(state, error)
        finally:
            self._active.pop(state.run_id, None)
            self.writer.forget(state.run_id)

    def _end_trace(self, outcome: Outcome) -> None:
        """Export a top-level run's root span as the run ends here."""
        state = outcome.state
        status = "completed" if outcome.kind == "completed" else "failed"
        if isinstance(outcome.error, RunCancelled):
            status = "cancelled"
        error = None if outcome.error is None else str(outcome.error)
        tracing.run_end(state, state.start_agent or self.agent.name, status, error)

    async def _drive(self, envelope: Envelope, token: SuspendToken, emit: Emit) -> Outcome:
        first = envelope.state
        if envelope.resumed:
            tracing.lost(first)  # (the activation its record names never ended)
        with tracing.agent_span(first, self.agent.name, resumed=envelope.resumed) as span:
            trace = tracing.begun(first, span)  # (its records name this activation)
            if trace is not first.trace:
                envelope.state = first.evolve(trace=trace)
            state, view, action = await self._begin(envelope, token, emit)
            record = False  # the last tool batch's record is still to be written
            while True:
                halted, state, action, record = await self._step(
                    envelope, token, emit, view, state, action, record
                )
                if halted is not None:
                    tracing.agent_done(span, first, halted.state, halted.kind)
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
        if token.cause == CANCEL:  # (the drive is being cancelled, or is about to be)
            raise asyncio.CancelledError
        state = self.inputs.captured(state, envelope)  # what the last step wrote to the context
        if token.cause is not None and isinstance(action, (loop.CallModel, loop.RunTools)):
            # a safe point: before a model call, or before a batch none of which runs yet
            # (the suspend's record holds the model's reply, and a resume runs the batch)
            halted = await self.stops.halt(state, "suspended", emit, cause=token.cause)
            return halted, state, action, False
        hooks = self.agent.hooks
        ctx = self._run_context(state, envelope.context)
        match action:
            case loop.CallModel() as call:
                return await self._model_turn(envelope, token, emit, view, state, call, record)
            case loop.RunTools() as batch:
                return await self._tools_turn(state, view, envelope, batch, emit)
            case loop.Finish(output=output, tool=tool):
                await run_output_guardrails(
                    self.agent.output_guardrails,
                    ctx,
                    state.messages[-1],
                    on_trip=self._on_trip(ctx),
                )
                await save_run_session(self.graph[state.start_agent or self.agent.name], state)
                if hooks is not None:
                    value = final_value(self.agent, output, tool)
                    await fire(hooks, "on_agent_end", ctx, self.agent, value)
                state = self.inputs.captured(state, envelope)
                self._emit(emit, state, "agent_end", output=output, tool_name=tool)
                return Outcome("completed", state, output=output, tool=tool), state, action, False
            case loop.Fail(error=error):
                raise error
            case loop.HandoffTo(target=target):
                await fire(hooks, "on_handoff", ctx, self.agent, self.graph[target])
                state = self.toolbox.handoff(self.inputs.captured(state, envelope), target)
                state = state.evolve(trace=tracing.ended(state))
                state = await self.writer.save(state, "running", emit)
                tracing.event("raygents.handoff", {"raygents.to_agent": target})
                self._emit(emit, state, "handoff", to_agent=target)
                return Outcome("handoff", state), state, action, False
            case _:
                assert_never(action)

    async def _model_turn(
        self,
        envelope: Envelope,
        token: SuspendToken,
        emit: Emit,
        view: loop.AgentView,
        state: RunState,
        call: loop.CallModel,
        record: bool,
    ) -> tuple[Outcome | None, RunState, loop.Action, bool]:
        """Call the model (writing the last tool batch's record meanwhile, see :meth:`_step`);
        the run stops here only if it is suspended while the call waits for a turn at the
        rate limiter (nothing went out yet). A compaction of the history comes first, with
        a record of its own."""
        state, checked = await self._compacted(state, view, call, emit)
        if checked is not call:
            record, call = False, checked  # (the compaction's record holds the last batch)
        hooks, request = self.agent.hooks, call.request
        await self.inputs.before_call(state, request, self.model())
        await fire(
            hooks, "on_llm_start", self._run_context(state, envelope.context), self.agent, request
        )
        if envelope.llm_events:
            self._emit(emit, state, "llm_start", request=request)
        active = self._active.get(state.run_id)
        reply = asyncio.ensure_future(
            self._call_model(request, state, envelope.stream, emit, active)
        )
        if active is not None:
            active.waiting_call = reply
        if record:
            await asyncio.sleep(0)  # the call goes out first
            try:  # (unchecked: it gates nothing; the next batch's intent is checked)
                state = await self.writer.save(state, "running", emit, checked=False)
            except BaseException:
                reply.cancel()
                await asyncio.wait([reply])
                raise
        elif state.seq == 0 and (view.tools or view.handoffs):
            await asyncio.sleep(0)
            self.writer.make_run_dir(state.run_id, alone=len(self._active) == 1)
        try:
            response = await reply
        except asyncio.CancelledError:
            if not reply.cancelled() or token.cause in (None, CANCEL):
                raise
            halted = await self.stops.halt(state, "suspended", emit, cause=token.cause)
            return halted, state, call, False
        metrics.turn(self.agent.name)
        state, action = loop.on_response(state, view, response)
        ctx = self._run_context(state, envelope.context)  # (usage with this call)
        await fire(hooks, "on_llm_end", ctx, self.agent, response)
        if envelope.llm_events:
            self._emit(emit, state, "llm_end", response=response)
        return None, state, action, False

    async def _compacted(
        self, state: RunState, view: loop.AgentView, call: loop.CallModel, emit: Emit
    ) -> tuple[RunState, loop.CallModel]:
        """The state after a compaction of the history (if the agent's policy calls for one
        before this call), with a record of its own, and the call to make then (``call``
        itself when nothing was compacted)."""
        state, compacted = await self.compactor.compact(state, call.request)
        if compacted is None:
            return state, call
        state = await self.writer.save(state, "running", emit, cause="compacted")
        self._emit(emit, state, "compacted", data=compacted.data())
        state, checked = loop.next_turn(state, view)  # (the summariser spent from budgets)
        if isinstance(checked, loop.Fail):
            raise checked.error
        return state, checked

    async def _begin(
        self, envelope: Envelope, token: SuspendToken, emit: Emit
    ) -> tuple[RunState, loop.AgentView, loop.Action]:
        """Activate the agent for this envelope and choose the first action."""
        state = envelope.state
        await self.directory.settings()
        self.writer.check_node(self.agent.name)
        if self._beater is None:
            self._beater = self._start_beats()
        await self.toolbox.resolve_tools()
        view = await self.toolbox.view(state, self._run_context(state, envelope.context))
        if envelope.activate:
            state = loop.activate(state, view)
        ctx = self._run_context(state, envelope.context)
        fresh = envelope.activate and not envelope.resumed and state.turns == 0
        if fresh:
            state = await open_session(self.directory, self.agent, state)
            ctx = self._run_context(state, envelope.context)
            await run_input_guardrails(
                self.agent.input_guardrails, ctx, list(state.messages), on_trip=self._on_trip(ctx)
            )
        if envelope.resumed:
            start = self.graph.get(state.start_agent or self.agent.name)
            await resume_session(self.directory, start, state, lambda: token.cause is not None)
            await fire(self.agent.hooks, "on_restore", ctx, self.agent, state.seq)
        if envelope.resumed or fresh:
            metrics.run_started(self.agent.name, resumed=envelope.resumed)
            await fire(self.agent.hooks, "on_run_start", ctx, self.agent, list(state.messages))
        await fire(self.agent.hooks, "on_agent_start", ctx, self.agent)  # (a handoff's too)
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
        needs = await self.calls.needs_approval(state, batch, envelope.context)
        state, gated = loop.gate(state, batch, needs, self.agent.name)
        if isinstance(gated, loop.Interrupt):
            return await self.stops.halt(state, "awaiting_approval", emit), state, batch, False
        ask = self.calls.asks(gated)
        resolved = bool(state.resolutions)
        state, stop = recovered.settle(state, gated, ask, self.agent.name)
        if stop:
            return await self.stops.halt(state, "in_doubt", emit), state, batch, False
        marked = recovered.mark_started(state, gated, ask, time.time())
        if not state.journal or resolved or marked is not state:
            # the intent: never ask again; and the "ask" calls that start, durable first
            state = await self.writer.save(marked, "running", emit, durable=marked is not state)
        results, state, halts, journaled = await self.calls.run_batch(state, envelope, gated, emit)
        state = self.inputs.captured(state, envelope)  # (hooks, callbacks, remote=False tools)
        lost = [
            recovered.in_doubt(state, s.call, self.agent.name)
            for s, r in zip(gated.steps, results, strict=True)
            if r.lost and isinstance(s, loop.Execute)
        ]
        if halts or lost:
            waiting = [h.state for h in halts if h.kind == "interrupted"]
            pending = tuple(p for w in waiting for p in w.pending)
            doubts = (*lost, *(d for w in waiting for d in w.in_doubt))
            if pending or doubts:
                state = state.evolve(pending=pending, in_doubt=doubts)
                status: checkpoint.Status = "in_doubt" if doubts else "awaiting_approval"
                return await self.stops.halt(state, status, emit), state, batch, False
            cause = next(h.cause for h in halts if h.kind == "suspended")
            return await self.stops.halt(state, "suspended", emit, cause=cause), state, batch, False
        state = self.inputs.with_writes(state, envelope, results)
        outputs = await self.inputs.kept(results)
        view = await self.toolbox.decided(view, state, envelope.context, gated, outputs)
        state, action = loop.on_results(state, view, gated, outputs)
        # (a handoff writes its own record)
        return None, state, action, isinstance(action, loop.CallModel) and not journaled

    # --- model calls, guardrails, events ------------------------------------------------
    async def _call_model(
        self,
        request: ModelRequest,
        state: RunState,
        stream: bool,
        emit: Emit,
        active: _Active | None,
    ) -> ModelResponse:
        def on_delta(delta: str) -> None:
            self._emit(emit, state, "llm_delta", delta=delta)

        def on_turn() -> None:
            if active is not None:
                active.waiting_call = None  # (it goes out: a suspend waits for its answer)

        return await self.inputs.answered(
            self.model(), request, state, on_delta if stream else None, on_turn
        )

    def _on_trip(self, ctx: RunContext) -> Any:
        async def on_trip(name: str, result: Any) -> None:
            await fire(
                self.agent.hooks, "on_guardrail_tripped", ctx, self.agent, name, result.message
            )

        return on_trip

    def _run_context(self, state: RunState, context: Any) -> RunContext:
        return RunContext(state.run_id, self.agent.name, context, state.turns, state.usage)

    def _emit(self, emit: Emit, state: RunState, kind: Any, **fields: Any) -> None:
        send_event(emit, state, self.agent.name, kind, **fields)
