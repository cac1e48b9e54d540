"""Agent-as-tool calls: each is a child run on the callee's actor, started or resumed here."""

from __future__ import annotations

import hashlib
import inspect
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raygents.agents.agent import agent_graph
from raygents.agents.agent_tool import AgentTool
from raygents.agents.result import RunResult
from raygents.agents.tools import ToolResult, to_tool_result
from raygents.agents.tooluse import final_value
from raygents.core.contextdata import diff
from raygents.core.envelope import Envelope, RunState
from raygents.core.events import RunEvent
from raygents.core.messages import Message, ToolCall
from raygents.core.schema import parse_output
from raygents.runtime.link.drive import SuspendToken, drive
from raygents.runtime.worker.tasks import StepResult, tool_error
from raygents.telemetry import tracing

if TYPE_CHECKING:
    from raygents.runtime.link.directory import Directory

__all__ = [
    "child_budget",
    "child_run_id",
    "existing_child",
    "extract",
    "legacy_child_run_id",
    "run_child",
]


def child_run_id(parent_run_id: str, call_id: str) -> str:
    """The child run's id: ``<parent id, cut to 64>.<24 hex digits>``.

    The digits hash the whole parent id and call id, so the id is the same for a given call
    every time (a resumed parent finds its child), differs for different calls (``a:b`` and
    ``a/b`` included), is one store key segment of ASCII whatever the call id holds, and is at
    most 89 characters at any nesting depth. The run table reads the parent back from it
    (:func:`~raygents.records.runinfo.parent_of`) when the child is claimed.
    """
    digest = hashlib.sha256(f"{parent_run_id}\0{call_id}".encode()).hexdigest()[:24]
    return f"{parent_run_id[:64]}.{digest}"


def legacy_child_run_id(parent_run_id: str, call_id: str) -> str:
    """The child id that versions before hashed ids gave a call: only to find such a child
    when a run checkpointed by one of them resumes."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in call_id)[:64] or "call"
    return f"{parent_run_id}.{safe}"


def child_budget(state: RunState) -> int | None:
    """The model calls a child started now may make: an equal share, among the calls of the
    batch, of what the parent has left. The parent adds each child's usage when the batch
    ends, so the run's model calls, its children's included, never pass its budget. A child
    that failed counts as having made its whole share: its state at the failure may not be
    the one it reached."""
    return _share(state, state.max_model_calls, state.usage.requests)


def child_tokens(state: RunState) -> int | None:
    """The tokens a child started now may use (``max_tokens``), shared like its model calls
    (see :func:`child_budget`)."""
    return _share(state, state.max_tokens, state.usage.total_tokens)


def child_cost(state: RunState) -> float | None:
    """The dollars a child started now may spend (``max_cost_usd``), shared like its model
    calls (see :func:`child_budget`)."""
    if state.max_cost_usd is None:
        return None
    return max(0.0, (state.max_cost_usd - (state.usage.cost_usd or 0.0)) / _batch(state))


def _spent(
    state: RunState, calls: int | None, tokens: int | None, cost: float | None
) -> str | None:
    """Which of the run's budgets leaves nothing for a child (its shares given), or None."""
    if calls is not None and calls < 1:
        return f"the run's budget of {state.max_model_calls} model calls"
    if tokens is not None and tokens < 1:
        return f"the run's budget of {state.max_tokens} tokens"
    if cost is not None and cost <= 0:
        return f"the run's budget of ${state.max_cost_usd}"
    return None


def _share(state: RunState, budget: int | None, used: int) -> int | None:
    """An equal share, among the calls of the batch, of what is left of ``budget``."""
    if budget is None:
        return None
    return max(0, (budget - used) // _batch(state))


def _batch(state: RunState) -> int:
    """How many calls the batch being run has (its children share what the run has left)."""
    last = state.messages[-1] if state.messages else None
    return len(last.tool_calls) if last is not None and last.tool_calls else 1


async def run_child(
    directory: Directory,
    state: RunState,
    envelope: Envelope,
    call: ToolCall,
    tool: AgentTool,
    emit: Callable[[RunEvent], None],
    tokens: dict[str, SuspendToken] | None,
    ended: Callable[[RunState], None],
) -> StepResult:
    """Run (or resume) the child run for one agent-as-tool call. A completed child's final
    state goes to ``ended`` (the caller tells the coordinator, with its other reports)."""
    callee = tool.agent
    cap = callee.max_tool_depth
    if state.max_tool_depth is not None:
        cap = min(cap, state.max_tool_depth)
    if state.depth >= cap:
        return StepResult(
            tool_error(tool.name, f"agent-tool delegation exceeded maximum depth ({cap})")
        )
    budget, spend, cost = child_budget(state), child_tokens(state), child_cost(state)
    spent = _spent(state, budget, spend, cost)
    if spent is not None:
        return StepResult(tool_error(tool.name, f"{spent} leaves none for this sub-agent"))
    child_id, child = await existing_child(directory, state, call, envelope)
    fresh = child is None
    if child is None:
        child = RunState(
            run_id=child_id,
            agent_name=callee.name,
            messages=(Message("user", json.loads(call.arguments)["input"]),),
            input_len=1,
            max_turns=state.max_turns,
            depth=state.depth + 1,
            max_tool_depth=cap,
            max_model_calls=budget,
            max_tokens=spend,
            max_cost_usd=cost,
            tenant=state.tenant,  # (its model calls count against the tenant's budget)
            parent_run_id=state.run_id,
            path=(*state.path, f"{callee.name}/{call.id}"),
            started_at=time.time(),
            context=state.context,
            workflow=state.workflow,
        )
    _, epoch = await directory.claim(child_id, child.agent_name)
    # (its agent spans go under this call's span, a resumed child's too)
    child = child.evolve(epoch=epoch, trace=tracing.child_trace() or child.trace)
    token = SuspendToken(child_id)
    if tokens is not None:
        tokens[child_id] = token
    child_envelope = Envelope(
        child,
        envelope.graph_fp,
        envelope.context,
        envelope.stream,
        envelope.llm_events,
        activate=fresh,
        resumed=not fresh,
        approvals=envelope.approvals,
        resolutions=envelope.resolutions,
    )
    try:
        outcome = await drive(
            child_envelope,
            directory,
            token,
            emit,
            client=directory.client,
            mailboxes=directory.mailboxes,
        )
    finally:
        if tokens is not None:
            tokens.pop(child_id, None)
    usage = outcome.state.usage
    writes = _writes(state, outcome.state)
    if outcome.kind == "completed":
        ended(outcome.state)
        if tool.output_extractor is not None:
            made = await extract(tool, outcome.state, outcome.output or "", outcome.tool)
            return StepResult(made, usage=usage, writes=writes)
        return StepResult(ToolResult(outcome.output or ""), usage=usage, writes=writes)
    if outcome.kind == "failed":
        if budget is not None and usage.requests < budget:  # (see child_budget)
            usage = usage.model_copy(update={"requests": budget})
        error = tool_error(tool.name, outcome.error or "sub-agent failed")
        return StepResult(error, usage=usage, writes=writes)
    return StepResult(ToolResult(f"sub-agent run {outcome.kind}"), halt=outcome)


def _writes(state: RunState, child: RunState) -> list[Any] | None:
    """The child run's writes to the run context (the parent's, as the call sent it)."""
    if state.context is None or child.context is None:
        return None
    return diff(state.context.data, child.context.data) or None


async def extract(
    tool: AgentTool, state: RunState, text: str, ended_by: str | None = None
) -> ToolResult:
    """The tool result that the tool's ``custom_output_extractor`` makes of the child's result
    (an error result naming the tool if it raises); ``ended_by``: the tool whose result ended
    the child run, if one did."""
    assert tool.output_extractor is not None
    graph = agent_graph(tool.agent)
    last = graph.get(state.agent_name, tool.agent)
    try:
        result = RunResult(
            run_id=state.run_id,
            final_output=(
                parse_output(text, last.output_type, run_id=state.run_id)
                if ended_by is None
                else final_value(last, text, ended_by)
            ),
            messages=state.messages,
            usage=state.usage,
            turns=state.turns,
            last_agent=last,
            output_text=text,
            input_count=state.input_len,
            start_agent=tool.agent,
        )
        value = tool.output_extractor(result)
        if inspect.isawaitable(value):
            value = await value
        return to_tool_result(value)
    except Exception as exc:
        return tool_error(tool.name, f"custom_output_extractor raised {type(exc).__name__}: {exc}")


async def existing_child(
    directory: Directory, state: RunState, call: ToolCall, envelope: Envelope
) -> tuple[str, RunState | None]:
    """The id of a call's child run, and its state to resume when a resumed parent finds one
    that did not end. A child that a version before hashed ids started keeps its old id."""
    child_id = child_run_id(state.run_id, call.id)
    if not envelope.resumed:
        return child_id, None
    child = await _resumable(directory, child_id, envelope)
    legacy = legacy_child_run_id(state.run_id, call.id)
    if child is None and legacy.isascii() and len(legacy) <= 128:
        found = await _resumable(directory, legacy, envelope)
        if found is not None:
            return legacy, found
    return child_id, child


async def _resumable(directory: Directory, child_id: str, envelope: Envelope) -> RunState | None:
    found = await directory.client.load_state(child_id)
    if found is None:
        return None
    child, last = found
    if last["status"] in ("failed", "completed", "cancelled"):
        return None
    mine = {p.call_id for p in child.pending}
    decisions = {k: v for k, v in envelope.approvals.items() if k in mine}
    doubted = {d.call_id for d in child.in_doubt if d.run_id in ("", child.run_id)}
    resolved = {k: v for k, v in envelope.resolutions.items() if k in doubted}
    return child.evolve(
        approvals={**child.approvals, **decisions},
        pending=(),
        resolutions={**child.resolutions, **resolved},
        in_doubt=(),
    )
