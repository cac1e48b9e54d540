"""ToolCalls: an agent actor's tool batches: which calls need approval, the calls, their journal."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from raygents.agents.agent import Agent
from raygents.agents.agent_tool import AgentTool
from raygents.agents.hooks import fire
from raygents.agents.toolguardrails import (
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    run_tool_input_guardrails,
    run_tool_output_guardrails,
)
from raygents.agents.tools import Tool, ToolContext, ToolResult, call_needs_approval
from raygents.core import loop
from raygents.core.context import RunContext
from raygents.core.contextdata import diff, to_plain
from raygents.core.envelope import Envelope, Outcome, RunState
from raygents.core.events import RunEvent
from raygents.core.messages import ToolCall
from raygents.errors import UserError
from raygents.runtime.actor.children import run_child
from raygents.runtime.actor.journal import Journal
from raygents.runtime.actor.toolbox import Toolbox
from raygents.runtime.actor.writer import RecordWriter
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.drive import SuspendToken
from raygents.runtime.worker.tasks import StepResult, run_tool, tool_error
from raygents.telemetry import metrics, tracing

__all__ = ["ToolCalls"]

Emit = Callable[[RunEvent], None]


class ToolCalls:
    """Runs the tool batches of one agent's runs.

    Args:
        agent: the agent.
        toolbox: its tools.
        directory: the actor's directory (children's actors, the coordinator).
        writer: the actor's record writer (the batches' journals, children's ends).
        event: sends one of a run's events (``event(emit, state, type, **fields)``).
        children: the suspend tokens of a run's agent-as-tool children, by run (None if the
            run is not active here).
    """

    def __init__(
        self,
        agent: Agent,
        toolbox: Toolbox,
        directory: Directory,
        writer: RecordWriter,
        event: Callable[..., None],
        children: Callable[[str], dict[str, SuspendToken] | None],
    ) -> None:
        self.agent = agent
        self.toolbox = toolbox
        self.directory = directory
        self.writer = writer
        self.task_cache: dict[str, Any] = {}
        """Tool tasks' options, by tool (see :func:`~raygents.runtime.worker.tasks.run_tool`)."""
        self._event = event
        self._children = children

    def _ctx(self, state: RunState, context: Any) -> RunContext:
        return RunContext(state.run_id, self.agent.name, context, state.turns, state.usage)

    async def needs_approval(
        self, state: RunState, batch: loop.RunTools, context: Any
    ) -> frozenset[str]:
        """The calls of the batch that wait for a human's approval (a call decided already,
        on a resume, is not asked about again: its decision stands)."""
        tools = self.toolbox.tools()
        approval = self.agent.approval
        needs = set()
        for step in batch.steps:
            if not isinstance(step, loop.Execute):
                continue
            if step.call.id in state.journal or step.call.id in state.approvals:
                continue
            t = tools[step.call.name]
            ctx = self._ctx(state, context)
            if await call_needs_approval(t, ctx, step.call) or (
                approval is not None and await approval.needs(ctx, step.call)
            ):
                needs.add(step.call.id)
        return frozenset(needs)

    def asks(self, batch: loop.RunTools) -> frozenset[str]:
        """The ids of the batch's calls of ``on_recovery="ask"`` tools."""
        tools = self.toolbox.tools()
        return frozenset(
            s.call.id
            for s in batch.steps
            if isinstance(s, loop.Execute)
            and getattr(tools.get(s.call.name), "on_recovery", "rerun") == "ask"
        )

    async def run_batch(
        self, state: RunState, envelope: Envelope, batch: loop.RunTools, emit: Emit
    ) -> tuple[list[StepResult], RunState, list[Outcome], bool]:
        """Run a batch; finished calls go to the journal. Returns halted children too, and
        whether the journal records hold every result (then the batch needs no other record:
        a resume replays the results from the journal)."""
        journal = Journal(self.writer, state, emit, len(batch.steps), lambda: envelope.context)

        async def one(step: loop.ToolStep) -> StepResult:
            started = time.perf_counter()
            out = await self.run_step(journal.state, envelope, step, emit)
            took = time.perf_counter() - started
            if isinstance(step, loop.Execute) and out.halt is None and not out.lost:
                journal.finished(took, step.call.id, out.result, out.writes)
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
        if halts or any(r.lost for r in results):  # the run stops: its record keeps what finished
            state = state.evolve(journal=dict(journal.entries), context_writes=dict(journal.writes))
        return results, state, halts, complete

    async def run_step(
        self, state: RunState, envelope: Envelope, step: loop.ToolStep, emit: Emit
    ) -> StepResult:
        """Run one step of a batch: a call (unless the journal has its result), a handoff's
        callback, or a step whose result the loop fixed."""
        if isinstance(step, loop.Transfer):
            await self.toolbox.on_handoff(state, step.target, self._ctx(state, envelope.context))
        fixed = loop.step_result(step)
        if fixed is not None:
            return StepResult(fixed)
        call = step.call
        if call.id in state.journal:
            return StepResult(state.journal[call.id], writes=state.context_writes.get(call.id))
        tools = self.toolbox.tools()
        t = tools[call.name]
        if t.tool_input_guardrails:
            data = ToolInputGuardrailData(self._tool_ctx(state, envelope, call), self.agent)
            rejected = await run_tool_input_guardrails(t.tool_input_guardrails, data)
            if rejected is not None:  # (the call does not run, nor its hooks)
                return StepResult(ToolResult(rejected))
        hook_ctx = self._ctx(state, envelope.context)
        await fire(self.agent.hooks, "on_tool_start", hook_ctx, self.agent, call)
        self._event(
            emit,
            state,
            "tool_start",
            tool_name=call.name,
            call_id=call.id,
            arguments=call.arguments,
        )
        started = time.perf_counter()
        kind = "agent" if isinstance(t, AgentTool) else "function"
        with tracing.tool_span(state.run_id, call.name, call.id, kind) as span:
            out = await self._call(state, envelope, call, t, emit)
            if t.tool_output_guardrails and out.halt is None:
                data = ToolOutputGuardrailData(
                    self._tool_ctx(state, envelope, call), self.agent, out.result.content
                )
                rejected = await run_tool_output_guardrails(t.tool_output_guardrails, data)
                if rejected is not None:
                    out.result = ToolResult(rejected)
            tracing.tool_done(span, out.result.is_error, out.result.content)
        took = time.perf_counter() - started
        metrics.tool_call(self.agent.name, call.name, took, error=out.result.is_error)
        self._event(
            emit,
            state,
            "tool_end",
            tool_name=call.name,
            call_id=call.id,
            arguments=call.arguments,
            result=out.result.content,
            is_error=out.result.is_error,
            duration_s=took,
            data=out.data,
        )
        await fire(self.agent.hooks, "on_tool_end", hook_ctx, self.agent, call, out.result)
        return out

    def _tool_ctx(self, state: RunState, envelope: Envelope, call: ToolCall) -> ToolContext:
        """What a tool guardrail sees of a call."""
        return ToolContext(
            state.run_id,
            call.id,
            call.name,
            self.agent.name,
            state.depth,
            envelope.context,
            tool_arguments=call.arguments,
        )

    async def _call(
        self, state: RunState, envelope: Envelope, call: ToolCall, t: Tool, emit: Emit
    ) -> StepResult:
        """Call one tool: a child run for an agent tool, else its task (or in this actor)."""
        sent = None  # the context as the call gets it (plain data), for its writes
        if state.context is not None and (t.remote or isinstance(t, AgentTool)):
            sent = state.context.model_copy(
                update={"data": to_plain(envelope.context, check=False)}
            )
        if isinstance(t, AgentTool):
            tokens = self._children(state.run_id)
            return await run_child(
                self.directory,
                state.evolve(context=sent),
                envelope,
                call,
                t,
                emit,
                tokens,
                self.writer.child_ended,
            )
        ctx = ToolContext(
            state.run_id, call.id, call.name, self.agent.name, state.depth, envelope.context
        )
        running = run_tool(t, ctx, call.arguments, self.task_cache)
        if t.remote or t.timeout_s is None:
            out = await running
            return out if sent is None or not out.wrote else _with_writes(t, out, sent.data)
        try:  # in this actor (a remote call's task has its own limit)
            return await asyncio.wait_for(running, t.timeout_s)
        except asyncio.TimeoutError:
            return StepResult(tool_error(t.name, f"timed out after {t.timeout_s} s"))


def _with_writes(t: Tool, out: StepResult, sent: Any) -> StepResult:
    """A tool task's result with its writes to the run context (an error result if what it
    left there is not plain data)."""
    try:
        after = to_plain(out.context, check=False)
    except UserError as exc:
        return StepResult(tool_error(t.name, f"it wrote to the run context: {exc}"), data=out.data)
    out.writes, out.context = diff(sent, after) or None, None
    return out
