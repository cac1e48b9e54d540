"""Run events, as delivered by ``RunHandle.events()``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from raygents.core.messages import ModelRequest, ModelResponse, Usage

__all__ = ["EventType", "RunEvent", "TERMINAL_EVENTS"]

EventType = Literal[
    "agent_start",
    "llm_start",
    "llm_delta",
    "llm_end",
    "tool_start",
    "tool_end",
    "handoff",
    "agent_end",
    "checkpoint",
    "compacted",
    "suspended",
    "interrupted",
    "recovered",
    "complete",
    "error",
    "lagged",
]

TERMINAL_EVENTS = frozenset({"complete", "error", "suspended", "interrupted"})


class RunEvent(BaseModel):
    """Something that happened in a run.

    ``path`` is empty for the run itself and names the agent-as-tool calls leading to a child
    run otherwise (``("analyst/call_1",)``). Only the fields of the event's type are set.

    ``seq`` numbers a run's events 1, 2, 3, ... in the order the process that drives the run
    (its driver, or the coordinator for a detached run) emits them; every handle of the run,
    in any process, sees the same number on the same event. A resumed run goes on after the
    number its previous drive ended with. Events that were never numbered live (a history
    replayed from checkpoints, ``data["replayed"]``, and ``lagged`` markers) have ``None``.
    A ``lagged`` event says that a follower missed the events ``data["missed"]`` (first and
    last seq) because it fell too far behind; see :meth:`~raygents.RunHandle.events`.
    """

    model_config = ConfigDict(frozen=True)

    type: EventType
    run_id: str
    agent_name: str
    path: tuple[str, ...] = ()
    delta: str | None = None
    """``llm_delta``: a piece of the model's text."""
    tool_name: str | None = None
    """``tool_start`` / ``tool_end``: the tool; ``agent_end``: the tool whose result is the
    output, when the agent's tool use behaviour stopped at one."""
    call_id: str | None = None
    arguments: str | None = None
    result: str | None = None
    """``tool_end``: the content sent to the model."""
    is_error: bool | None = None
    duration_s: float | None = None
    """``tool_end``: how long the call took."""
    to_agent: str | None = None
    """``handoff``: the agent taking over."""
    output: str | None = None
    """``agent_end`` / ``complete``: the final output."""
    error: str | None = None
    """``error`` / ``suspended`` / ``interrupted``: what happened."""
    turns: int | None = None
    usage: Usage | None = None
    """The run's model calls and usage so far (its agent-as-tool children's once they ended)."""
    request: ModelRequest | None = None
    """``llm_start``: what the model is sent (only for a run whose run-level hooks have
    ``on_llm_start`` or ``on_llm_end``)."""
    response: ModelResponse | None = None
    """``llm_end``: the model's reply (as ``llm_start``)."""
    data: dict[str, Any] | None = None
    seq: int | None = None
    """The event's number in its run (see above); None where it was never numbered."""

    @property
    def is_terminal(self) -> bool:
        """Whether this event ends the run (for this driver)."""
        return self.type in TERMINAL_EVENTS and not self.path
