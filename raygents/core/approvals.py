"""Human approval of tool calls: which calls need it, the decisions, and what waits for them."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from raygents.core.context import RunContext
from raygents.core.messages import ToolCall

__all__ = ["Approval", "ApprovalDecision", "PendingApproval", "DENIED"]

DENIED = "Tool call was denied by human review."


class ApprovalDecision(BaseModel):
    """A human's decision on one pending call; ``message`` replaces the default denial text."""

    model_config = ConfigDict(frozen=True)

    approved: bool
    message: str | None = None

    def __init__(self, approved: bool, message: str | None = None, **data: Any) -> None:
        BaseModel.__init__(self, approved=approved, message=message, **data)

    def denial(self) -> str:
        """What the model is told when the call was denied."""
        return self.message or DENIED


class PendingApproval(BaseModel):
    """A tool call waiting for a decision; ``run_id`` is the (possibly nested) run it is in."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    agent_name: str
    tool_name: str
    arguments: str
    run_id: str = ""


@dataclass
class Approval:
    """Which tool calls of an agent need human approval.

    Args:
        tools: names of tools whose every call needs approval.
        should_approve: ``(RunContext, ToolCall) -> bool`` (sync or async); when given, it
            decides for every call and wins over ``tools``.
    """

    tools: Iterable[str] = ()
    should_approve: Callable[[RunContext, ToolCall], Any] | None = None

    def __post_init__(self) -> None:
        self.tools = frozenset((self.tools,) if isinstance(self.tools, str) else self.tools)

    async def needs(self, ctx: RunContext, call: ToolCall) -> bool:
        """Whether ``call`` needs approval."""
        if self.should_approve is not None:
            verdict = self.should_approve(ctx, call)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            return bool(verdict)
        return call.name in self.tools


def normalise(decisions: dict[str, ApprovalDecision | bool] | None) -> dict[str, ApprovalDecision]:
    """Decisions keyed by call id, with plain booleans turned into decisions."""
    out: dict[str, ApprovalDecision] = {}
    for call_id, decision in (decisions or {}).items():
        if isinstance(decision, bool):
            decision = ApprovalDecision(decision)
        if not isinstance(decision, ApprovalDecision):
            from raygents.errors import UserError

            raise UserError(
                f"approval for {call_id!r} must be a bool or ApprovalDecision, got {decision!r}"
            )
        out[call_id] = decision
    return out
