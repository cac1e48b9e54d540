"""The pure turn logic: run state in, new state and the next action out. No Ray, no I/O.

An actor drives a run by calling :func:`next_turn`, performing the returned action (a model
call, a batch of tool calls), and feeding the outcome back through :func:`on_response` or
:func:`on_results`, until the action is :class:`Finish`, :class:`Fail` or :class:`HandoffTo`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from typing_extensions import assert_never

from raygents.core.corrections import (
    DEFAULT_MAX_OUTPUT_RETRIES,
    correction,
    exhausted,
    output_error,
    parse_arguments,
    schema_error,
    unique_call_ids,
)
from raygents.core.envelope import RunState
from raygents.core.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelSettingsData,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from raygents.errors import (
    MaxTurnsExceeded,
    ModelError,
    RaygentsError,
    ToolNotFound,
    UsageLimitExceeded,
    excerpt,
)

__all__ = [
    "DEFAULT_MAX_MODEL_CALLS",
    "DEFAULT_MAX_OUTPUT_RETRIES",
    "DEFAULT_MAX_TOOL_CALLS_PER_TURN",
    "NUDGE",
    "SKIPPED_AFTER_HANDOFF",
    "Action",
    "AgentView",
    "CallModel",
    "Execute",
    "Fail",
    "Finish",
    "HandoffTo",
    "Reject",
    "RunTools",
    "Skip",
    "ToolStep",
    "Transfer",
    "Interrupt",
    "activate",
    "apply_handoff",
    "count_corrections",
    "gate",
    "pending_batch",
    "next_turn",
    "on_response",
    "executed",
    "on_results",
]

NUDGE = "Based on everything you have gathered, produce the final structured output now."
SKIPPED_AFTER_HANDOFF = "Tool call was not executed because a handoff occurred."
DEFAULT_MAX_TOOL_CALLS_PER_TURN = 128
"""Tool calls of one model reply that are run, unless an agent says otherwise."""
DEFAULT_MAX_MODEL_CALLS = 1000
"""Model calls of a run, its agent-as-tool runs included, unless its agents say otherwise."""


@dataclass(frozen=True)
class AgentView:
    """What the loop needs to know about the active agent, as plain data."""

    name: str
    system: str = ""
    tools: tuple[ToolSpec, ...] = ()
    handoffs: Mapping[str, str] = field(default_factory=dict)
    """Handoff tool name -> target agent name."""
    output_schema: dict[str, Any] | None = None
    """``{"name": ..., "schema": ...}`` when the final output must be structured."""
    schema_on_every_call: bool = False
    """Send the output schema with every model call (tools stay offered) instead of exploring
    with tools first and then synthesising; the first reply without tool calls is the final
    output."""
    settings: ModelSettingsData = field(default_factory=ModelSettingsData)
    tool_use_behavior: (
        Literal["run_llm_again", "stop_on_first_tool"] | tuple[str, ...] | DecideFinal
    ) = "run_llm_again"
    """The behaviour, with ``StopAtTools`` given as its tuple of tool names, and a function as
    a :data:`DecideFinal` that the agent's actor builds."""
    reset_tool_choice: bool = True
    max_turns: int = 10
    max_empty_output_retries: int = 2
    max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES
    """Model replies with malformed output the run answers with a correction; the next one
    fails the run with ``ModelOutputError``."""
    max_tool_calls_per_turn: int = DEFAULT_MAX_TOOL_CALLS_PER_TURN
    """Calls of one reply past this many are not run: each is answered with an error."""
    max_model_calls: int = DEFAULT_MAX_MODEL_CALLS
    """A cap on the run's model calls, children included, while this agent is active."""


DecideFinal = Callable[[RunState, Sequence[tuple[ToolCall, ToolResult]]], str | None]
"""Given the run's state and the (call, result) pairs of the calls of a batch that ran: the
final output, or ``None`` to go on."""


# Tool steps: what the actor does with each call of a batch.
@dataclass(frozen=True)
class Execute:
    """Run the tool."""

    call: ToolCall


@dataclass(frozen=True)
class Reject:
    """Do not run the call; answer it with ``message`` (invalid arguments)."""

    call: ToolCall
    message: str
    malformed: str | None = None
    """What was malformed about the arguments (not a JSON object), when that is why: such a
    correction counts against ``max_output_retries``."""


@dataclass(frozen=True)
class Transfer:
    """Hand the conversation to ``target``."""

    call: ToolCall
    target: str


@dataclass(frozen=True)
class Skip:
    """A call after a handoff in the same batch: not run."""

    call: ToolCall


ToolStep = Execute | Reject | Transfer | Skip


# Actions: what the driver of the loop does next.
@dataclass(frozen=True)
class CallModel:
    """Call the model with ``request``."""

    request: ModelRequest


@dataclass(frozen=True)
class RunTools:
    """Run a batch; in parallel, or in order up to a handoff when ``sequential``."""

    steps: tuple[ToolStep, ...]
    sequential: bool = False


@dataclass(frozen=True)
class Finish:
    """The run completed with ``output`` (the final message is already in the history)."""

    output: str
    tool: str | None = None
    """The tool whose result is the output, when the tool use behaviour stopped at a tool."""


@dataclass(frozen=True)
class Fail:
    """The run failed."""

    error: RaygentsError


@dataclass(frozen=True)
class HandoffTo:
    """Continue the run on ``target``; the actor applies input filters, then ``apply_handoff``."""

    target: str
    call: ToolCall


Action = CallModel | RunTools | Finish | Fail | HandoffTo


def activate(state: RunState, view: AgentView) -> RunState:
    """Prepare the state for an agent that has just become active (start, handoff, resume)."""
    budget = view.max_model_calls
    if state.max_model_calls is not None:
        budget = min(budget, state.max_model_calls)
    return state.evolve(
        agent_name=view.name,
        exploring=view.output_schema is not None
        and bool(view.tools)
        and not view.schema_on_every_call,
        forced_synthesis=False,
        max_model_calls=budget,
    )


def turn_limit(state: RunState, view: AgentView) -> int:
    """The active agent's turn limit, capped by the run's (a checkpointed limit wins)."""
    if state.turn_limit is not None:
        return state.turn_limit
    if state.max_turns is None:
        return view.max_turns
    return min(view.max_turns, state.max_turns)


def next_turn(state: RunState, view: AgentView) -> tuple[RunState, CallModel | Fail]:
    """Check the turn limit and the run's model-call budget, and build the next request."""
    budget = state.max_model_calls
    if budget is not None and state.usage.requests >= budget:
        return state, Fail(
            MaxTurnsExceeded(
                f"run {state.run_id!r} used its budget of {budget} model calls (its agent-as-"
                f"tool runs included); raise max_model_calls of the agents if this is expected",
                run_id=state.run_id,
                limit="max_model_calls",
                value=budget,
            )
        )
    tokens, used = state.max_tokens, state.usage.total_tokens
    if tokens is not None and used >= tokens:
        return state, Fail(
            UsageLimitExceeded(
                f"run {state.run_id!r} used {used} tokens of its budget of {tokens} "
                "(max_tokens; its agent-as-tool runs included)",
                run_id=state.run_id,
                value=tokens,
                used=used,
            )
        )
    spent = _over_cost(state)
    if spent is not None:
        return state, Fail(spent)
    limit = turn_limit(state, view)
    if state.turns >= limit:
        if state.exploring:
            state = _begin_synthesis(state).evolve(forced_synthesis=True)
        elif not (state.forced_synthesis and state.turns == limit):
            return state, Fail(
                MaxTurnsExceeded(
                    f"agent {view.name!r} exceeded maximum number of turns ({limit})",
                    run_id=state.run_id,
                    max_turns=limit,
                )
            )
    return state, CallModel(build_request(state, view))


def _over_cost(state: RunState) -> UsageLimitExceeded | None:
    """The error for a run whose cost reached its budget in dollars, or None."""
    budget, cost = state.max_cost_usd, state.usage.cost_usd or 0.0
    if budget is None or cost < budget:
        return None
    return UsageLimitExceeded(
        f"run {state.run_id!r} cost ${cost:.6f} of its budget of ${budget:.6f} "
        "(max_cost_usd; its agent-as-tool runs included)",
        run_id=state.run_id,
        limit="max_cost_usd",
        value=budget,
        used=cost,
    )


def build_request(state: RunState, view: AgentView) -> ModelRequest:
    """The model request for the next turn."""
    schema = None if state.exploring else view.output_schema
    settings = view.settings
    tool_choice = settings.tool_choice
    if state.tool_used_in_run and view.reset_tool_choice:
        tool_choice = None
    if schema is not None and view.tools and not view.schema_on_every_call:
        tool_choice = "none"
    if tool_choice != settings.tool_choice:
        settings = settings.model_copy(update={"tool_choice": tool_choice})
    return ModelRequest(
        agent_name=view.name,
        system=view.system,
        messages=state.messages,
        tools=view.tools,
        response_format=schema,
        settings=settings,
    )


def _begin_synthesis(state: RunState) -> RunState:
    messages = state.messages
    if messages and messages[-1].role == "assistant" and not messages[-1].text.strip():
        messages = messages[:-1]
    return state.evolve(
        exploring=False,
        messages=(*messages, Message("user", NUDGE)),
        recorded=min(state.recorded, len(messages)),
    )


def on_response(
    state: RunState, view: AgentView, response: ModelResponse
) -> tuple[RunState, Action]:
    """Account for a model reply and decide what happens next.

    Call ids the reply repeats (in it or from earlier turns), and empty or overlong ones, are
    renamed before the reply enters the history, so each call has its own id everywhere: in
    the journal, its idempotency key, its approval and its answer. A reply whose calls are
    to run fixes the active agent's turn limit in the state (its checkpoints keep it, and it
    wins over the live agent's on resume).
    """
    message = unique_call_ids(response.message, state.messages)
    reported = response.usage.input_tokens
    state = state.evolve(
        usage=state.usage + response.usage + Usage(requests=1),
        turns=state.turns + 1,
        messages=(*state.messages, message),
        prompt_tokens=reported if reported > 0 else None,
        prompt_len=len(state.messages) if reported > 0 else 0,
    )
    reason = response.finish_reason
    if reason == "tool_calls" and not response.message.tool_calls:
        reason = "stop"
    match reason:
        case "stop" | "length":
            return _on_stop(state, view, response.message)
        case "tool_calls":
            return _on_tool_calls(state, view, message.tool_calls)
        case "content_filter":
            return state, Fail(
                ModelError(
                    "cannot complete: content was filtered by the provider", run_id=state.run_id
                )
            )
        case _:
            assert_never(reason)


def _on_tool_calls(
    state: RunState, view: AgentView, calls: Sequence[ToolCall]
) -> tuple[RunState, RunTools | Fail]:
    state = state.evolve(tool_used_in_run=True, empty_retries=0)
    state, plan = count_corrections(state, view, plan_tools(state, view, calls))
    if isinstance(plan, RunTools):
        state = state.evolve(turn_limit=turn_limit(state, view))
    return state, plan


def _on_stop(state: RunState, view: AgentView, message: Message) -> tuple[RunState, Action]:
    limit = turn_limit(state, view)
    if state.exploring:
        state = _begin_synthesis(state)
        if state.turns >= limit:
            state = state.evolve(forced_synthesis=True)
        return next_turn(state, view)
    if view.output_schema is not None:
        if (
            not message.text.strip()
            and state.empty_retries < view.max_empty_output_retries
            and state.turns < limit
        ):
            state = state.evolve(
                messages=state.messages[:-1],
                empty_retries=state.empty_retries + 1,
                recorded=min(state.recorded, len(state.messages) - 1),
            )
            return next_turn(state, view)
        error = output_error(state.run_id, view.output_schema, message.text)
        if error is not None:
            return state, Fail(error)
    return state, Finish(message.text)


def count_corrections(
    state: RunState, view: AgentView, plan: RunTools | Fail
) -> tuple[RunState, RunTools | Fail]:
    """Count a reply's batch against ``max_output_retries`` if it corrects malformed output.

    A reply counts once however many of its calls were malformed: the model answers all the
    corrections in its next reply. Past the limit the run fails with ``ModelOutputError``.
    """
    if isinstance(plan, Fail):
        return state, plan
    bad = next((s for s in plan.steps if isinstance(s, Reject) and s.malformed), None)
    if bad is None or bad.malformed is None:
        return state, plan
    if state.output_retries >= view.max_output_retries:
        error = exhausted(
            run_id=state.run_id,
            agent=view.name,
            tool=bad.call.name,
            problem=bad.malformed,
            arguments=bad.call.arguments,
            limit=view.max_output_retries,
        )
        return state, Fail(error)
    return state.evolve(output_retries=state.output_retries + 1), plan


def plan_tools(state: RunState, view: AgentView, calls: Sequence[ToolCall]) -> RunTools | Fail:
    """Decide what to do with each call of a batch.

    Calls past ``view.max_tool_calls_per_turn`` are not run (nor looked at): each is answered
    with an error that tells the model the cap.
    """
    specs = {t.name: t for t in view.tools}
    cap = view.max_tool_calls_per_turn
    planned, over = calls[:cap], calls[cap:]
    for call in planned:
        if call.name not in specs and call.name not in view.handoffs:
            return Fail(
                ToolNotFound(
                    f"cannot dispatch tool call: unknown tool {excerpt(call.name, 64)!r} "
                    f"for agent {view.name!r}",
                    run_id=state.run_id,
                    tool_name=excerpt(call.name, 64),
                )
            )
    handoff_at = next((i for i, c in enumerate(planned) if c.name in view.handoffs), None)
    steps: list[ToolStep] = []
    for i, call in enumerate(planned):
        if handoff_at is not None and i > handoff_at:
            steps.append(Skip(call))
        elif i == handoff_at:
            steps.append(Transfer(call, view.handoffs[call.name]))
        else:
            steps.append(_check_call(specs[call.name], call))
    refusal = (
        f"Tool call was not executed: at most {cap} tool calls are run per turn and this turn "
        f"asked for {len(calls)}. Make the remaining calls in a later turn."
    )
    steps.extend(Reject(call, refusal) for call in over)
    return RunTools(tuple(steps), sequential=handoff_at is not None)


def _check_call(spec: ToolSpec, call: ToolCall) -> Execute | Reject:
    value, malformed = parse_arguments(call.arguments)
    if malformed is not None:
        return Reject(call, correction(spec.name, malformed, call.arguments), malformed)
    problem = schema_error(spec, value or {})
    return Reject(call, problem) if problem else Execute(call)


def step_result(step: ToolStep) -> ToolResult | None:
    """The fixed result of a step that needs no execution, or None for :class:`Execute`."""
    match step:
        case Execute():
            return None
        case Reject(message=message):
            return ToolResult(message, is_error=True)
        case Transfer(target=target):
            return ToolResult(f"Transferred to {target}")
        case Skip():
            return ToolResult(SKIPPED_AFTER_HANDOFF)
        case _:
            assert_never(step)


def on_results(
    state: RunState,
    view: AgentView,
    batch: RunTools,
    results: Sequence[ToolResult],
) -> tuple[RunState, Action]:
    """Append a batch's results in call order and decide what happens next."""
    if len(results) != len(batch.steps):
        raise ValueError(f"expected {len(batch.steps)} results, got {len(results)}")
    tool_messages = tuple(
        Message("tool", r.content, tool_call_id=s.call.id, parts=r.parts)
        for s, r in zip(batch.steps, results, strict=True)
    )
    state = state.evolve(
        messages=(*state.messages, *tool_messages),
        journal={},
        approvals={},
        pending=(),
        started={},
        resolutions={},
        in_doubt=(),
    )
    final, tool = _final_output(state, view, batch, results)
    if final is not None:
        state = state.evolve(messages=(*state.messages, Message("assistant", final)))
        return state, Finish(final, tool)
    transfer = next((s for s in batch.steps if isinstance(s, Transfer)), None)
    if transfer is not None:
        return state, HandoffTo(transfer.target, transfer.call)
    return next_turn(state, view)


def executed(batch: RunTools, results: Sequence[ToolResult]) -> list[tuple[ToolCall, ToolResult]]:
    """The ``(call, result)`` pairs of a batch's calls that ran (not rejected, handed off or
    skipped), in call order: what a tool use behaviour decides on."""
    return [
        (s.call, r) for s, r in zip(batch.steps, results, strict=True) if isinstance(s, Execute)
    ]


def _final_output(
    state: RunState, view: AgentView, batch: RunTools, results: Sequence[ToolResult]
) -> tuple[str | None, str | None]:
    """The final output the tool use behaviour takes from a batch, if any, and the tool whose
    result it is (None for a function's)."""
    ran = executed(batch, results)
    behavior = view.tool_use_behavior
    if behavior == "run_llm_again" or not ran:
        return None, None
    if behavior == "stop_on_first_tool":
        return ran[0][1].content, ran[0][0].name
    if callable(behavior):
        return behavior(state, ran), None
    return next(((r.content, c.name) for c, r in ran if c.name in behavior), (None, None))


def apply_handoff(
    state: RunState, target: str, messages: Sequence[Message] | None = None
) -> RunState:
    """Switch the run to ``target``, optionally with a filtered history.

    The target's actor then calls :func:`activate` with its own view.
    """
    if messages is not None:
        state = state.evolve(
            messages=tuple(messages),
            input_len=min(state.input_len, len(messages)),
            recorded=0,
            rewritten=True,
            session_summary=None,  # (what it stood for in the session is unknown now)
        )
    return state.evolve(
        agent_name=target, tool_used_in_run=False, turn_limit=None, prompt_tokens=None, prompt_len=0
    )


def pending_batch(state: RunState, view: AgentView) -> RunTools | Fail | None:
    """The batch a resumed run still owes answers to: the last message asked for tools."""
    if not state.messages:
        return None
    last = state.messages[-1]
    if last.role != "assistant" or not last.tool_calls:
        return None
    return plan_tools(state, view, last.tool_calls)


@dataclass(frozen=True)
class Interrupt:
    """Calls of the batch need approval; the run waits (``state.pending`` lists them)."""


def gate(
    state: RunState, batch: RunTools, needs_approval: frozenset[str], agent_name: str
) -> tuple[RunState, RunTools | Interrupt]:
    """Apply approval decisions to a batch, or stop it when a call still needs one.

    ``needs_approval`` holds the ids of calls that need approval. If any lacks a decision,
    nothing in the batch runs. Denied calls are answered with the denial message.
    """
    from raygents.core.approvals import PendingApproval

    undecided = [
        s.call
        for s in batch.steps
        if isinstance(s, Execute)
        and s.call.id in needs_approval
        and s.call.id not in state.approvals
    ]
    if undecided:
        pending = tuple(
            PendingApproval(
                call_id=c.id,
                agent_name=agent_name,
                tool_name=c.name,
                arguments=c.arguments,
                run_id=state.run_id,
            )
            for c in undecided
        )
        return state.evolve(pending=pending), Interrupt()
    steps: list[ToolStep] = []
    for step in batch.steps:
        decision = state.approvals.get(step.call.id) if isinstance(step, Execute) else None
        if decision is not None and not decision.approved:
            steps.append(Reject(step.call, decision.denial()))
        else:
            steps.append(step)
    return state, RunTools(tuple(steps), batch.sequential)
