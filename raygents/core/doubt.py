"""Calls in doubt: an ``on_recovery="ask"`` call that may have run before its run was lost,
and what a person decides about it (:mod:`~raygents.core.recovered` finds them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from raygents.core.messages import ToolResult

__all__ = ["InDoubt", "OnRecovery", "Resolution", "normalise"]

OnRecovery = Literal["rerun", "ask"]
"""What recovery does with a tool's call that started but left no result: run it again with
the same idempotency key (``"rerun"``), or stop the run until a person decides (``"ask"``)."""


class InDoubt(BaseModel):
    """A call that may or may not have had its effect: it started, and its run was lost before
    its result was recorded. ``run_id`` is the (possibly nested) run it is in."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    agent_name: str
    tool_name: str
    arguments: str
    idempotency_key: str
    """The key the call ran with (``ToolContext.idempotency_key``): what to look up on the
    other side to learn whether the effect happened."""
    started_at: float
    """When the call's start was recorded (``time.time()``)."""
    run_id: str = ""


class Resolution(BaseModel):
    """A person's decision on a call in doubt: run it again, or take ``result`` as its
    result (the outcome they checked on the other side)."""

    model_config = ConfigDict(frozen=True)

    rerun: bool = False
    result: ToolResult | None = None


def normalise(resolutions: Mapping[str, Any] | None) -> dict[str, Resolution]:
    """Resolutions keyed by call id, from ``"rerun"`` or a ``ToolResult`` each.

    Raises:
        UserError: a call id is not a string, or a resolution is neither.
    """
    from raygents.errors import UserError, excerpt

    out: dict[str, Resolution] = {}
    for call_id, given in dict(resolutions or {}).items():
        if not isinstance(call_id, str):
            raise UserError(f"resolutions are keyed by call id (str), got {call_id!r}")
        if given == "rerun":
            out[call_id] = Resolution(rerun=True)
        elif isinstance(given, ToolResult):
            out[call_id] = Resolution(result=given)
        elif isinstance(given, Resolution) and given.rerun != (given.result is not None):
            out[call_id] = given
        else:
            raise UserError(
                f'the resolution of call {call_id!r} must be "rerun" or a '
                f"ToolResult(content, is_error=...), got {excerpt(repr(given), 80)}"
            )
    return out
