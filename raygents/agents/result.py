"""Results of a completed run; a final output is parsed into its type by core/schema.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from raygents.agents.items import RunItem, run_items
from raygents.core.messages import Message, Usage
from raygents.core.schema import parse_output

if TYPE_CHECKING:
    from raygents.agents.agent import Agent

__all__ = ["RunResult", "TypedResult"]

T = TypeVar("T")


@dataclass(frozen=True)
class RunResult:
    """A completed run.

    Attributes:
        run_id: the run's id.
        final_output: the final output: an instance of the last agent's ``output_type``
            (parsed and validated in the driver), or the final text for an agent without one
            (or with ``output_type=str``).
        messages: the whole conversation without the system prompt.
        usage: tokens used, agent-as-tool children included.
        turns: model calls made by the run's own agents.
        last_agent: the agent that produced the final output.
        output_text: the final output as the model wrote it (JSON text for structured output).
        input_count: how many of ``messages`` the run started with (its input, session history
            included); a handoff ``input_filter`` that rewrote the history changes it.
        context: the run context as the run left it (every write of tools, hooks and
            callbacks applied); for a ``NotDurable`` context, the value the caller passed.
        start_agent: the agent the run started on (None where it is not known here: then
            every new item is ``last_agent``'s).
    """

    run_id: str
    final_output: Any
    messages: tuple[Message, ...]
    usage: Usage
    turns: int
    last_agent: Agent
    output_text: str = ""
    input_count: int = 0
    context: Any = None
    start_agent: Agent | None = None

    @property
    def interruptions(self) -> list[Any]:
        """Always empty: a completed run waits for nothing (a run that waits for approvals
        raises ``RunInterrupted``, whose ``interruptions`` and ``to_state()`` are these)."""
        return []

    def final_message(self) -> Message:
        """The last message of the conversation (whatever its role)."""
        return self.messages[-1] if self.messages else Message("assistant", "")

    @property
    def new_items(self) -> tuple[RunItem, ...]:
        """The messages the run added to its input (model replies, tool results), each a
        :class:`RunItem` with the agent that added it."""
        start = self.start_agent or self.last_agent
        return run_items(self.messages[self.input_count :], start, self.last_agent)

    def to_input_list(self) -> list[dict[str, Any]]:
        """The conversation as Chat Completions dicts, ready to be the next run's input.

        An assistant message's reasoning items (:attr:`Message.reasoning`) come along under
        the key ``"reasoning"`` (plain JSON), so the next run sends them back to the API that
        produced them; raygents' adapters never send that key itself to a provider. A
        compaction's summary (:attr:`Message.summary`) comes with ``"summary": True``, so the
        next run keeps it a summary (a later compaction summarises it again, and sessions
        record it as one) rather than a user's message.
        """
        out = []
        for message in self.messages:
            item = message.to_openai()
            if message.reasoning:
                item["reasoning"] = [r.model_dump(mode="json") for r in message.reasoning]
            if message.summary:
                item["summary"] = True
            out.append(item)
        return out

    def final_output_as(self, cls: type[T], raise_if_incorrect_type: bool = False) -> T:
        """The final output as ``cls``.

        An output that already is a ``cls`` is returned as is; ``str`` gives the text; a text
        output (an untyped agent's, or an attached run's) is parsed into ``cls``. Any other
        output is returned unchanged, or refused when ``raise_if_incorrect_type`` is set.

        Raises:
            OutputValidationError: the text does not parse into ``cls``.
            TypeError: ``raise_if_incorrect_type`` is set and the output is another type.
        """
        value = self.final_output
        if cls is str:
            return cast(T, value if isinstance(value, str) else self.output_text)
        if isinstance(value, str) and not _is_instance(value, cls):
            return cast(T, parse_output(value, cls, run_id=self.run_id))
        if raise_if_incorrect_type and not _is_instance(value, cls):
            raise TypeError(f"final output is a {type(value).__name__}, not {cls!r}")
        return cast(T, value)


def _is_instance(value: Any, cls: Any) -> bool:
    try:
        return isinstance(value, cls)
    except TypeError:  # (a typing form such as list[int]: never a str)
        return not isinstance(value, str)


@dataclass(frozen=True)
class TypedResult(RunResult, Generic[T]):
    """A completed run whose final output was validated and parsed into ``output``
    (``final_output`` holds the same object)."""

    output: T = None  # type: ignore[assignment]
