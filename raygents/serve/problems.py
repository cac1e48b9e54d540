"""Problem: an error the API answers with (its status and ``{"error": {type, message}}``), and
which raygents error is which status."""

from __future__ import annotations

from typing import Any

from raygents.errors import (
    ApprovalDecisionsMismatch,
    PayloadTooLarge,
    RaygentsError,
    ResolutionsMismatch,
    RunNotFound,
    TooManyRuns,
    UserError,
)

__all__ = ["Problem", "problem_of"]


class Problem(Exception):
    """An answer other than success: ``status``, and the document's ``type``, ``message``
    and any other fields (``field``, ``pending``...)."""

    def __init__(self, status: int, type: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.fields = fields

    def document(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"type", "message", ...}}``."""
        return {"error": {"type": self.type, "message": self.message, **self.fields}}


def problem_of(exc: RaygentsError) -> Problem:
    """The answer for a raygents error raised by a request (not by a run: a run's outcome is
    never an HTTP error)."""
    name = type(exc).__name__
    if isinstance(exc, RunNotFound):
        return Problem(404, name, str(exc))
    if isinstance(exc, TooManyRuns):
        return Problem(429, name, str(exc))
    if isinstance(exc, PayloadTooLarge):
        return Problem(413, name, str(exc))
    if isinstance(exc, (ApprovalDecisionsMismatch, ResolutionsMismatch)):
        return Problem(409, name, str(exc))
    if isinstance(exc, UserError):
        text = str(exc)
        if "already in use" in text or "already running" in text or "cancelled" in text:
            return Problem(409, name, text)  # (the run's state, not the request, is in the way)
        return Problem(422, name, text)
    return Problem(500, name, str(exc))
