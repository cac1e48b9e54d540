"""A run's terminal event, as the outcome of its drive gives it."""

from __future__ import annotations

from typing import Any

from raygents.core.envelope import Outcome
from raygents.core.events import RunEvent
from raygents.errors import RaygentsError

__all__ = ["failure_of", "terminal_event"]


def failure_of(outcome: Outcome) -> RaygentsError:
    """The error of a run that failed (or was cancelled) with ``outcome``."""
    state = outcome.state
    return outcome.error or RaygentsError("run failed", run_id=state.run_id)


def terminal_event(outcome: Outcome, error: RaygentsError | None = None) -> RunEvent:
    """The event that ends a run whose drive ended with ``outcome`` (``complete``,
    ``suspended``, ``interrupted`` or ``error``); ``error``: the failure its driver reports
    instead of the outcome's (a final output that does not parse)."""
    state = outcome.state
    base = {"run_id": state.run_id, "agent_name": state.agent_name, "turns": state.turns}
    if error is not None:
        return RunEvent(type="error", error=str(error), **base)
    if outcome.kind == "completed":
        return RunEvent(type="complete", output=outcome.output or "", usage=state.usage, **base)
    if outcome.kind == "suspended":
        return RunEvent(type="suspended", error=outcome.cause, **base)
    if outcome.kind == "interrupted":
        data: dict[str, Any] = {"pending": [p.model_dump() for p in state.pending]}
        if state.in_doubt:
            data["in_doubt"] = [d.model_dump() for d in state.in_doubt]
        return RunEvent(type="interrupted", data=data, **base)
    return RunEvent(type="error", error=str(failure_of(outcome)), **base)
