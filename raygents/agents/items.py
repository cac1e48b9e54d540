"""Run items: the messages a run added, each with the agent that added it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import PrivateAttr

from raygents.core.messages import Message

if TYPE_CHECKING:
    from raygents.agents.agent import Agent

__all__ = ["ItemType", "RunItem", "run_items"]

ItemType = Literal[
    "message_output_item", "tool_call_item", "tool_call_output_item", "handoff_output_item"
]


class RunItem(Message):
    """A message a run added (``RunResult.new_items``) and the agent that added it.

    It is the message (it compares equal to it); ``type`` names it as the OpenAI Agents SDK
    names its run items, and the tool result of a handoff has ``source_agent`` and
    ``target_agent``.
    """

    _agent: Any = PrivateAttr(None)
    _source: Any = PrivateAttr(None)
    _target: Any = PrivateAttr(None)

    @classmethod
    def of(cls, message: Message, agent: Agent) -> RunItem:
        """``message`` as added by ``agent``."""
        item = cls(
            role=message.role,
            content=message.content,
            tool_calls=message.tool_calls,
            tool_call_id=message.tool_call_id,
        )
        item._agent = agent
        return item

    @property
    def agent(self) -> Agent:
        """The agent that added the message."""
        agent: Agent = self._agent
        return agent

    @property
    def source_agent(self) -> Agent | None:
        """For a handoff's tool result: the agent that handed the run over."""
        source: Agent | None = self._source
        return source

    @property
    def target_agent(self) -> Agent | None:
        """For a handoff's tool result: the agent the run was handed to."""
        target: Agent | None = self._target
        return target

    @property
    def type(self) -> ItemType:
        """``message_output_item`` (the model's text), ``tool_call_item`` (the model's tool
        calls), ``tool_call_output_item`` (a tool's result) or ``handoff_output_item``."""
        if self.role == "tool":
            return "handoff_output_item" if self._target is not None else "tool_call_output_item"
        return "tool_call_item" if self.tool_calls else "message_output_item"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return _fields(self) == _fields(other)

    def __hash__(self) -> int:
        return hash(_fields(self))


def _fields(message: Message) -> tuple[Any, ...]:
    return (message.role, message.content, message.tool_calls, message.tool_call_id)


def run_items(messages: Sequence[Message], start: Agent, last: Agent) -> tuple[RunItem, ...]:
    """The run's new ``messages`` as items of the agents that added them: ``start``'s until
    its handoff (the tool result of the handoff call the run took), the target's after it.
    A history that a handoff's ``input_filter`` rewrote may lack the handoff: the final
    reply is ``last``'s whatever the messages before it say."""
    current, after = start, None
    taken: dict[str, Agent] = {}
    items: list[RunItem] = []
    for message in messages:
        if message.role != "tool" and after is not None:
            current, after = after, None
        item = RunItem.of(message, current)
        if message.role == "assistant":
            handoffs = {h.tool_name: h.agent for h in current.handoff_configs()}
            taken = {c.id: handoffs[c.name] for c in message.tool_calls if c.name in handoffs}
            taken = dict(list(taken.items())[:1])  # (the first handoff of a reply is taken)
        elif message.tool_call_id in taken:
            item._source, item._target = current, taken.pop(message.tool_call_id)
            after = item._target
        items.append(item)
    if items and items[-1].role == "assistant" and items[-1].agent is not last:
        items[-1]._agent = last
    return tuple(items)
