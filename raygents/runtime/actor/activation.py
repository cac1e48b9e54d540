"""One activation of a run on an agent actor: from the envelope that brings the run to the
outcome that ends its stay (it completes, fails, suspends or hands off), through the pure loop."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from typing_extensions import assert_never

from raygents.agents.guardrails import run_input_guardrails, run_output_guardrails
from raygents.agents.hooks import fire
from raygents.agents.tooluse import final_value
from raygents.core import loop, recovered
from raygents.core.context import RunContext
from raygents.core.envelope import Envelope, Outcome, RunState
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.errors import CANCEL, RaygentsError, RunCancelled, UserError
from raygents.records import checkpoint
from raygents.runtime.actor.binding import Binding
from raygents.runtime.actor.runsession import open_session, resume_session, save_run_session
from raygents.runtime.actor.stops import Emit
from raygents.runtime.actor.writer import RecordWriter
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.drive import SuspendToken
from raygents.telemetry import logs, metrics, tracing

__all__ = ["Activation", "Active", "Host"]

log = logging.getLogger("raygents")


@dataclass
class Active:
    """What the actor knows about a run it is executing."""

    token: SuspendToken
    children: dict[str, SuspendToken] = field(default_factory=dict)
    drive: asyncio.Future[Outcome] | None = None
    """The task driving the run (a cancel cancels it)."""
    waiting_call: asyncio.Future[ModelResponse] | None = None
    """Its model call while it waits for a turn at the rate limiter (a suspend cancels it:
    nothing went out yet, so the run can stop before the call)."""


@dataclass
class Host:
    """What an activation uses of the actor it runs on."""

    writer: RecordWriter
    directory: Directory
    runs: dict[str, Active]
    """The runs executing on the actor (an activation leaves it as it ends)."""
    beats: Callable[[], None]
    """Starts the actor's beats to the coordinator, if they have not started."""


class Activation:
    """Drives one run on the agent ``bound`` serves, from ``envelope`` to its outcome.

    Args:
        bound: the agent the actor serves.
        host: what the activation uses of the actor.
        envelope: the run, as it arrived (the activation's own copy).
        token: where a suspend or cancel request for the run arrives.
        emit: sends the run's events to its caller.
    """

    def __init__(
        self, bound: Binding, host: Host, envelope: Envelope, token: SuspendToken, emit: Emit
    ) -> None:
        self.bound = bound
        self.agent = bound.agent
        self.host = host
        self.envelope = envelope
        self.token = token
        self.emit = emit
        self.active = host.runs.get(envelope.state.run_id)

    async def run(self) -> Outcome:
        """Drive the run until it completes, fails, suspends or hands off; its outcome, with
        the run's records written."""
        logs.bind(self.envelope.state.run_id, self.agent.name)  # (this task's log records)
        trace = tracing.trace_of(self.envelope.state)  # (a top-level run's trace begins here)
        if trace is not self.envelope.state.trace:
            self.envelope = dataclasses.replace(
                self.envelope, state=self.envelope.state.evolve(trace=trace)
            )
        outcome = await self._outcome()
        await self.host.writer.finish(outcome)
        metrics.run_ended(self.agent.name, outcome)
        if outcome.kind in ("completed", "failed") and outcome.state.trace is not None:
            self._end_trace(outcome)
        if outcome.kind != "handoff":
            ctx = self.bound.context(outcome.state, self.envelope.context)
            await fire(
                self.agent.hooks, "on_run_end", ctx, self.agent, outcome.output, outcome.error
            )
            try:  # (its writes reach the result; the run's records are written already)
                outcome.state = self.bound.inputs.captured(outcome.state, self.envelope)
            except UserError:
                log.warning("run %s: on_run_end left a context that is not plain data", ctx.run_id)
        return outcome

    async def _outcome(self) -> Outcome:
        state = self.envelope.state
        try:
            if self.token.cause == CANCEL:
                return await self.bound.stops.cancelled(state)
            # the run's context as the run left it (where it ran before), for this activation
            # (envelope: this activation's own copy, shared by every step of it)
            self.envelope.context = self.bound.inputs.revived(state, self.envelope.context)
            drive = asyncio.ensure_future(self._drive())
            if self.active is not None:
                self.active.drive = drive
            try:
                return await drive
            except asyncio.CancelledError:
                if self.token.cause != CANCEL or not drive.cancelled():
                    raise
                return await self.bound.stops.cancelled(state)
        except RaygentsError as exc:
            return await self.bound.stops.fail(state, exc.with_run_id(state.run_id))
        except Exception as exc:
            log.exception("run %s failed inside agent %r", state.run_id, self.agent.name)
            error = RaygentsError(
                f"internal error in agent {self.agent.name!r}: {type(exc).__name__}: {exc}\n"
                + traceback.format_exc(limit=5),
                run_id=state.run_id,
            )
            return await self.bound.stops.fail(state, error)
        finally:
            self.host.runs.pop(state.run_id, None)
            self.host.writer.forget(state.run_id)

    def _end_trace(self, outcome: Outcome) -> None:
        """Export a top-level run's root span as the run ends here."""
        state = outcome.state
        status = "completed" if outcome.kind == "completed" else "failed"
        if isinstance(outcome.error, RunCancelled):
            status = "cancelled"
        error = None if outcome.error is None else str(outcome.error)
        tracing.run_end(state, state.start_agent or self.agent.name, status, error)

    async def _drive(self) -> Outcome:
        first = self.envelope.state
        if self.envelope.resumed:
            tracing.lost(first)  # (the activation its record names never ended)
        with tracing.agent_span(first, self.agent.name, resumed=self.envelope.resumed) as span:
            trace = tracing.begun(first, span)  # (its records name this activation)
            if trace is not first.trace:
                self.envelope.state = first.evolve(trace=trace)
            state, view, action = await self._begin()
            record = False  # the last tool batch's record is still to be written
            while True:
                halted, state, action, record = await self._step(view, state, action, record)
                if halted is not None:
                    tracing.agent_done(span, first, halted.state, halted.kind)
                    return halted

    async def _step(
        self,
        view: loop.AgentView,
        state: RunState,
        action: loop.Action,
        record: bool,
    ) -> tuple[Outcome | None, RunState, loop.Action, bool]:
        """Take one action: the run's outcome if it ends here, else its next state and action,
        and whether the last tool batch's record is still to be written (``record``): it is
        written while the next model call runs (the call has no effects to protect, and its
        reply is used only once the record is stored; a suspend's record includes it)."""
        if self.token.cause == CANCEL:  # (the drive is being cancelled, or is about to be)
            raise asyncio.CancelledError
        state = self.bound.inputs.captured(
            state, self.envelope
        )  # what the last step wrote to the context
        if self.token.cause is not None and isinstance(action, (loop.CallModel, loop.RunTools)):
            # a safe point: before a model call, or before a batch none of which runs yet
            # (the suspend's record holds the model's reply, and a resume runs the batch)
            halted = await self.bound.stops.halt(
                state, "suspended", self.emit, cause=self.token.cause
            )
            return halted, state, action, False
        hooks = self.agent.hooks
        ctx = self.bound.context(state, self.envelope.context)
        match action:
            case loop.CallModel() as call:
                return await self._model_turn(view, state, call, record)
            case loop.RunTools() as batch:
                return await self._tools_turn(state, view, batch)
            case loop.Finish(output=output, tool=tool):
                await run_output_guardrails(
                    self.agent.output_guardrails,
                    ctx,
                    state.messages[-1],
                    on_trip=self._on_trip(ctx),
                )
                await save_run_session(
                    self.bound.graph[state.start_agent or self.agent.name], state
                )
                if hooks is not None:
                    value = final_value(self.agent, output, tool)
                    await fire(hooks, "on_agent_end", ctx, self.agent, value)
                state = self.bound.inputs.captured(state, self.envelope)
                self.bound.event(self.emit, state, "agent_end", output=output, tool_name=tool)
                return Outcome("completed", state, output=output, tool=tool), state, action, False
            case loop.Fail(error=error):
                raise error
            case loop.HandoffTo(target=target):
                await fire(hooks, "on_handoff", ctx, self.agent, self.bound.graph[target])
                state = self.bound.toolbox.handoff(
                    self.bound.inputs.captured(state, self.envelope), target
                )
                state = state.evolve(trace=tracing.ended(state))
                state = await self.host.writer.save(state, "running", self.emit)
                tracing.event("raygents.handoff", {"raygents.to_agent": target})
                self.bound.event(self.emit, state, "handoff", to_agent=target)
                return Outcome("handoff", state), state, action, False
            case _:
                assert_never(action)

    async def _model_turn(
        self,
        view: loop.AgentView,
        state: RunState,
        call: loop.CallModel,
        record: bool,
    ) -> tuple[Outcome | None, RunState, loop.Action, bool]:
        """Call the model (writing the last tool batch's record meanwhile, see :meth:`_step`);
        the run stops here only if it is suspended while the call waits for a turn at the
        rate limiter (nothing went out yet). A compaction of the history comes first, with
        a record of its own."""
        state, checked = await self._compacted(state, view, call)
        if checked is not call:
            record, call = False, checked  # (the compaction's record holds the last batch)
        hooks, request = self.agent.hooks, call.request
        await self.bound.inputs.before_call(state, request, self.bound.model())
        await fire(
            hooks,
            "on_llm_start",
            self.bound.context(state, self.envelope.context),
            self.agent,
            request,
        )
        if self.envelope.llm_events:
            self.bound.event(self.emit, state, "llm_start", request=request)
        reply = asyncio.ensure_future(self._call_model(request, state))
        if self.active is not None:
            self.active.waiting_call = reply
        if record:
            await asyncio.sleep(0)  # the call goes out first
            try:  # (unchecked: it gates nothing; the next batch's intent is checked)
                state = await self.host.writer.save(state, "running", self.emit, checked=False)
            except BaseException:
                reply.cancel()
                await asyncio.wait([reply])
                raise
        elif state.seq == 0 and (view.tools or view.handoffs):
            await asyncio.sleep(0)
            self.host.writer.make_run_dir(state.run_id, alone=len(self.host.runs) == 1)
        try:
            response = await reply
        except asyncio.CancelledError:
            if not reply.cancelled() or self.token.cause in (None, CANCEL):
                raise
            halted = await self.bound.stops.halt(
                state, "suspended", self.emit, cause=self.token.cause
            )
            return halted, state, call, False
        metrics.turn(self.agent.name)
        state, action = loop.on_response(state, view, response)
        ctx = self.bound.context(state, self.envelope.context)  # (usage with this call)
        await fire(hooks, "on_llm_end", ctx, self.agent, response)
        if self.envelope.llm_events:
            self.bound.event(self.emit, state, "llm_end", response=response)
        return None, state, action, False

    async def _compacted(
        self, state: RunState, view: loop.AgentView, call: loop.CallModel
    ) -> tuple[RunState, loop.CallModel]:
        """The state after a compaction of the history (if the agent's policy calls for one
        before this call), with a record of its own, and the call to make then (``call``
        itself when nothing was compacted)."""
        state, compacted = await self.bound.compactor.compact(state, call.request)
        if compacted is None:
            return state, call
        state = await self.host.writer.save(state, "running", self.emit, cause="compacted")
        self.bound.event(self.emit, state, "compacted", data=compacted.data())
        state, checked = loop.next_turn(state, view)  # (the summariser spent from budgets)
        if isinstance(checked, loop.Fail):
            raise checked.error
        return state, checked

    async def _begin(self) -> tuple[RunState, loop.AgentView, loop.Action]:
        """Activate the agent for this envelope and choose the first action."""
        state = self.envelope.state
        await self.host.directory.settings()
        self.host.writer.check_node(self.agent.name)
        self.host.beats()
        await self.bound.toolbox.resolve_tools()
        view = await self.bound.toolbox.view(
            state, self.bound.context(state, self.envelope.context)
        )
        if self.envelope.activate:
            state = loop.activate(state, view)
        ctx = self.bound.context(state, self.envelope.context)
        fresh = self.envelope.activate and not self.envelope.resumed and state.turns == 0
        if fresh:
            state = await open_session(self.host.directory, self.agent, state)
            ctx = self.bound.context(state, self.envelope.context)
            await run_input_guardrails(
                self.agent.input_guardrails, ctx, list(state.messages), on_trip=self._on_trip(ctx)
            )
        if self.envelope.resumed:
            start = self.bound.graph.get(state.start_agent or self.agent.name)
            await resume_session(
                self.host.directory, start, state, lambda: self.token.cause is not None
            )
            await fire(self.agent.hooks, "on_restore", ctx, self.agent, state.seq)
        if self.envelope.resumed or fresh:
            metrics.run_started(self.agent.name, resumed=self.envelope.resumed)
            await fire(self.agent.hooks, "on_run_start", ctx, self.agent, list(state.messages))
        await fire(self.agent.hooks, "on_agent_start", ctx, self.agent)  # (a handoff's too)
        self.bound.event(self.emit, state, "agent_start")
        pending = loop.pending_batch(state, view) if self.envelope.resumed else None
        if pending is not None:
            return state, view, pending
        state, action = loop.next_turn(state, view)
        return state, view, action

    async def _tools_turn(
        self,
        state: RunState,
        view: loop.AgentView,
        batch: loop.RunTools,
    ) -> tuple[Outcome | None, RunState, loop.Action, bool]:
        """Gate, checkpoint and run one batch; an outcome if the run must stop here, and
        whether the batch's record is still to be written (see :meth:`_step`)."""
        needs = await self.bound.calls.needs_approval(state, batch, self.envelope.context)
        state, gated = loop.gate(state, batch, needs, self.agent.name)
        if isinstance(gated, loop.Interrupt):
            return (
                await self.bound.stops.halt(state, "awaiting_approval", self.emit),
                state,
                batch,
                False,
            )
        ask = self.bound.calls.asks(gated)
        resolved = bool(state.resolutions)
        state, stop = recovered.settle(state, gated, ask, self.agent.name)
        if stop:
            return await self.bound.stops.halt(state, "in_doubt", self.emit), state, batch, False
        marked = recovered.mark_started(state, gated, ask, time.time())
        if not state.journal or resolved or marked is not state:
            # the intent: never ask again; and the "ask" calls that start, durable first
            state = await self.host.writer.save(
                marked, "running", self.emit, durable=marked is not state
            )
        results, state, halts, journaled = await self.bound.calls.run_batch(
            state, self.envelope, gated, self.emit
        )
        state = self.bound.inputs.captured(
            state, self.envelope
        )  # (hooks, callbacks, remote=False tools)
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
                return await self.bound.stops.halt(state, status, self.emit), state, batch, False
            cause = next(h.cause for h in halts if h.kind == "suspended")
            return (
                await self.bound.stops.halt(state, "suspended", self.emit, cause=cause),
                state,
                batch,
                False,
            )
        state = self.bound.inputs.with_writes(state, self.envelope, results)
        outputs = await self.bound.inputs.kept(results)
        view = await self.bound.toolbox.decided(view, state, self.envelope.context, gated, outputs)
        state, action = loop.on_results(state, view, gated, outputs)
        # (a handoff writes its own record)
        return None, state, action, isinstance(action, loop.CallModel) and not journaled

    # --- model calls, guardrails, events ------------------------------------------------
    async def _call_model(
        self,
        request: ModelRequest,
        state: RunState,
    ) -> ModelResponse:
        def on_delta(delta: str) -> None:
            self.bound.event(self.emit, state, "llm_delta", delta=delta)

        def on_turn() -> None:
            if self.active is not None:
                self.active.waiting_call = None  # (it goes out: a suspend waits for its answer)

        return await self.bound.inputs.answered(
            self.bound.model(), request, state, on_delta if self.envelope.stream else None, on_turn
        )

    def _on_trip(self, ctx: RunContext) -> Any:
        async def on_trip(name: str, result: Any) -> None:
            await fire(
                self.agent.hooks, "on_guardrail_tripped", ctx, self.agent, name, result.message
            )

        return on_trip
