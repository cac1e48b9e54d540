"""Results of a completed run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from raygents.messages import Message, Usage

if TYPE_CHECKING:
    from raygents.agent import Agent

__all__ = ["RunResult", "TypedResult"]

T = TypeVar("T")


@dataclass(frozen=True)
class RunResult:
    """A completed run.

    Attributes:
        run_id: the run's id.
        final_output: the final text (JSON text for structured output).
        messages: the whole conversation without the system prompt.
        usage: tokens used, agent-as-tool children included.
        turns: model calls made by the run's own agents.
        last_agent: the agent that produced the final output.
    """

    run_id: str
    final_output: str
    messages: tuple[Message, ...]
    usage: Usage
    turns: int
    last_agent: Agent

    def final_message(self) -> Message:
        """The last message of the conversation (whatever its role)."""
        return self.messages[-1] if self.messages else Message("assistant", "")


@dataclass(frozen=True)
class TypedResult(RunResult, Generic[T]):
    """A completed run whose final output was validated and parsed into ``output``."""

    output: T = None  # type: ignore[assignment]
