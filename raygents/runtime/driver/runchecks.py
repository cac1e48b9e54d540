"""What ``start`` and ``resume`` check of their arguments before a run is claimed: the run's
options and limits, its input, its context, approval decisions and resolutions of calls in
doubt."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from raygents.agents.agent import Agent
from raygents.agents.checks import is_amount
from raygents.agents.hooks import check_hooks
from raygents.core.approvals import ApprovalDecision, PendingApproval
from raygents.core.contextdata import NotDurable, StoredContext, store
from raygents.core.doubt import InDoubt, Resolution
from raygents.core.envelope import RunState
from raygents.core.messages import Message, to_messages
from raygents.core.pricing import check_usd
from raygents.errors import (
    MAX_PAYLOAD_BYTES,
    ApprovalDecisionsMismatch,
    PayloadTooLarge,
    ResolutionsMismatch,
    RunInDoubt,
    UserError,
)

__all__ = [
    "RunInput",
    "check_decisions",
    "check_pending",
    "check_resolutions",
    "in_doubt_error",
    "check_run_args",
    "check_run_limits",
    "input_messages",
    "run_context",
]

RunInput = str | Sequence[Message | Mapping[str, Any]]


def check_run_args(
    agent: Agent,
    timeout_s: float | None,
    max_turns: int | None,
    max_tokens: int | None = None,
    hooks: object = None,
    max_cost_usd: float | None = None,
) -> None:
    """Refuse what is not an agent, bad limits, and hooks that are not ``RunHooks``."""
    if not isinstance(agent, Agent):
        raise UserError(f"expected an Agent, got {type(agent).__name__!r}")
    check_run_limits(timeout_s, max_turns, max_tokens, max_cost_usd)
    check_hooks("run", hooks)


def check_run_limits(
    timeout_s: object, max_turns: object, max_tokens: object, max_cost_usd: object = None
) -> None:
    """Check a run's limits as ``start`` and ``run_batch`` take them.

    Raises:
        UserError: ``timeout_s`` is not None or a positive, finite number of seconds,
            ``max_turns`` / ``max_tokens`` not None or an int >= 1, or ``max_cost_usd`` not
            None or a finite number of dollars > 0.
    """
    if max_cost_usd is not None:
        check_usd("max_cost_usd", max_cost_usd)
        if max_cost_usd == 0:
            raise UserError("max_cost_usd must be more than 0 dollars (or None), got 0")
    if timeout_s is not None and not (is_amount(timeout_s) and timeout_s > 0):
        raise UserError(
            f"timeout_s must be a positive, finite number of seconds (or None), got {timeout_s!r}"
        )
    for name, value in (("max_turns", max_turns), ("max_tokens", max_tokens)):
        if value is not None and (type(value) is not int or value < 1):
            raise UserError(f"{name} must be an int >= 1, got {value!r}")


def input_messages(input: RunInput) -> tuple[Message, ...]:
    try:
        messages = to_messages(input)
    except (TypeError, KeyError, ValueError) as exc:
        raise UserError(f"invalid run input: {exc}") from None
    if not messages:
        raise UserError("run input is empty: pass a string or at least one message")
    size = sum(
        PayloadTooLarge.size_of(m.text)
        + sum(PayloadTooLarge.size_of(c.arguments) for c in m.tool_calls)
        for m in messages
    )
    limit = MAX_PAYLOAD_BYTES["run input"]
    if size > limit:
        raise PayloadTooLarge(kind="run input", size=size, limit=limit)
    return messages


def run_context(context: Any) -> tuple[Any, StoredContext | None]:
    """A run's context as its processes get it, and as its state keeps it (None for none,
    and for a ``NotDurable`` one).

    Raises:
        UserError: it cannot be stored as plain data (see :func:`contextdata.store`).
        PayloadTooLarge: it is over the run input's cap (every checkpoint may carry it).
    """
    if isinstance(context, NotDurable):
        return context.value, None
    stored = store(context)
    if stored is not None:
        text = json.dumps(stored.data, ensure_ascii=False)
        PayloadTooLarge.check("run input", text, what="the run context")
    return context, stored


def check_pending(state: RunState, shown: tuple[PendingApproval, ...]) -> None:
    """Refuse decisions made on pending calls that are no longer the run's: ``shown`` (what
    the caller showed a person) must be exactly the pending calls of the claimed run, ids,
    agents, tools and arguments, or a call of the same id with other arguments would be
    approved unseen."""
    if state.pending == shown:
        return
    raise ApprovalDecisionsMismatch(
        f"the pending calls of run {state.run_id!r} changed since they were read: nothing "
        f"was decided; look at them again (now {len(state.pending)}, "
        f"ids {sorted(p.call_id for p in state.pending)!r})",
        run_id=state.run_id,
    )


def check_decisions(
    state: RunState, decisions: dict[str, ApprovalDecision]
) -> dict[str, ApprovalDecision]:
    pending = {p.call_id for p in state.pending}
    if set(decisions) == pending:
        return decisions
    missing = sorted(pending - set(decisions))
    unknown = sorted(set(decisions) - pending)
    raise ApprovalDecisionsMismatch(
        f"approval decisions must cover exactly the pending calls; missing {missing!r}, "
        f"unknown {unknown!r}",
        run_id=state.run_id,
    )


def check_resolutions(state: RunState, resolutions: dict[str, Resolution]) -> None:
    """Refuse resolutions that do not cover exactly the run's calls in doubt (none for a run
    that has none), naming the calls missing and those unknown."""
    doubted = {d.call_id for d in state.in_doubt}
    if set(resolutions) == doubted:
        return
    missing = sorted(doubted - set(resolutions))
    unknown = sorted(set(resolutions) - doubted)
    raise ResolutionsMismatch(
        f"resolutions must cover exactly the calls in doubt of run {state.run_id!r} "
        f"(now {sorted(doubted)!r}); missing {missing!r}, unknown {unknown!r}",
        run_id=state.run_id,
        missing=missing,
        unknown=unknown,
    )


def in_doubt_error(run_id: str, calls: list[InDoubt]) -> RunInDoubt:
    """The error of a run that stopped on ``calls`` in doubt."""
    named = ", ".join(f"{c.tool_name} ({c.call_id}, key {c.idempotency_key})" for c in calls)
    return RunInDoubt(
        f"run stopped in doubt: {len(calls)} tool call(s) may or may not have had their "
        f"effect: {named}; check each and resume with resolutions",
        run_id=run_id,
        calls=calls,
    )
