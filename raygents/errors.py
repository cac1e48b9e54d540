"""The raygents exception tree; every error survives a pickle round trip.

    RaygentsError
    ├── UserError                  bad input or configuration from the caller
    ├── MaxTurnsExceeded           a run reached its turn limit
    ├── MaxToolDepthExceeded       agent-as-tool nesting reached its depth limit
    ├── InputGuardrailTripped      an input guardrail stopped the run
    ├── OutputGuardrailTripped     an output guardrail rejected the final message
    ├── SuspendedError             the run suspended gracefully; resume it later
    ├── RunInterrupted             the run waits for approval of tool calls
    ├── ApprovalDecisionsMismatch  approval decisions do not cover the pending set
    ├── ToolNotFound               the model called a tool the agent does not have
    ├── ModelError                 the model provider failed or answered badly
    ├── OutputValidationError      typed output failed its schema or type
    ├── RunNotFound                no run with that id is known
    └── CheckpointError            a checkpoint could not be stored or loaded
        └── CheckpointCorrupt      checkpoint bytes failed their integrity checks

Errors can be built from a message alone; every other field is a keyword argument and is kept
when the error crosses a process boundary.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "SUSPEND_FOR_CHECKPOINT",
    "ApprovalDecisionsMismatch",
    "CheckpointCorrupt",
    "CheckpointError",
    "InputGuardrailTripped",
    "MaxToolDepthExceeded",
    "MaxTurnsExceeded",
    "ModelError",
    "OutputGuardrailTripped",
    "OutputValidationError",
    "RaygentsError",
    "RunInterrupted",
    "RunNotFound",
    "SuspendedError",
    "ToolNotFound",
    "UserError",
]

SUSPEND_FOR_CHECKPOINT = "suspend_for_checkpoint"
"""The cause of a graceful suspend asked for by a user or a driver shutting down."""


class RaygentsError(Exception):
    """Base of every raygents error.

    Attributes:
        message: the human-readable description.
        run_id: the run the error belongs to, when there is one.
    """

    _fields: tuple[str, ...] = ()

    def __init__(self, message: str = "", *, run_id: str | None = None, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        unknown = set(fields) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected fields {sorted(unknown)!r}")
        for name in self._fields:
            setattr(self, name, fields.get(name))

    def __reduce__(self) -> tuple[Any, ...]:
        state = {name: getattr(self, name) for name in self._fields}
        return (_rebuild, (type(self), self.message, self.run_id, state))

    def __str__(self) -> str:
        if self.run_id and self.run_id not in self.message:
            return f"{self.message} (run {self.run_id})"
        return self.message

    def with_run_id(self, run_id: str) -> RaygentsError:
        """Set the run id if the error has none yet, and return the error."""
        if self.run_id is None:
            self.run_id = run_id
        return self


def _rebuild(
    cls: type[RaygentsError], message: str, run_id: str | None, state: dict[str, Any]
) -> RaygentsError:
    return cls(message, run_id=run_id, **state)


class UserError(RaygentsError):
    """The caller passed something raygents cannot use; the message says what to change."""


class MaxTurnsExceeded(RaygentsError):
    """The active agent reached ``max_turns`` model calls."""

    _fields = ("max_turns",)
    max_turns: int | None


class MaxToolDepthExceeded(RaygentsError):
    """An agent-as-tool call would nest deeper than the callee's ``max_tool_depth``."""

    _fields = ("max_depth",)
    max_depth: int | None


class InputGuardrailTripped(RaygentsError):
    """An input guardrail rejected the run's input before any model call."""

    _fields = ("guardrail", "guardrail_message")


class OutputGuardrailTripped(RaygentsError):
    """An output guardrail rejected the final message."""

    _fields = ("guardrail", "guardrail_message")


class SuspendedError(RaygentsError):
    """The run stopped at a safe point with a checkpoint; ``resume(run_id)`` continues it.

    ``checkpoint`` carries the checkpoint inline only when it could not be stored.
    """

    _fields = ("cause", "checkpoint")
    cause: str | None
    checkpoint: Any


class RunInterrupted(RaygentsError):
    """Tool calls need approval; resume with a decision for each of ``pending``."""

    _fields = ("pending",)
    pending: list[Any] | None


class ApprovalDecisionsMismatch(RaygentsError):
    """Approval decisions must cover exactly the pending calls of an interrupted run."""


class ToolNotFound(RaygentsError):
    """The model called a tool that the active agent does not have."""

    _fields = ("tool_name",)
    tool_name: str | None


class ModelError(RaygentsError):
    """The model provider failed, refused, or answered with something unusable."""

    _fields = ("status_code", "retryable")


class OutputValidationError(RaygentsError):
    """The final output does not match the expected schema or type.

    ``errors`` lists ``(path, message)`` pairs, the path in JSON-pointer form.
    """

    _fields = ("errors", "output")


class RunNotFound(RaygentsError):
    """No run with that id is known to the coordinator or the store."""


class CheckpointError(RaygentsError):
    """A checkpoint could not be written, read or decoded."""

    _fields: tuple[str, ...] = ("key",)


class CheckpointCorrupt(CheckpointError):
    """Checkpoint bytes failed their size, integrity, format or version checks."""

    _fields = ("key", "reason")
