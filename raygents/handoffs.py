"""Handoffs: an agent's transfer of a run to another agent, offered to the model as a tool."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raygents.errors import UserError
from raygents.schema import excerpt
from raygents.tools import IsEnabled, RunContext, _sanitise, check_is_enabled, valid_tool_name

if TYPE_CHECKING:
    from raygents.agent import Agent
    from raygents.messages import Message

__all__ = ["Handoff", "HandoffInputData", "check_handoff", "handoff", "handoff_section"]

HandoffDescriptionLimit = 200


@dataclass(frozen=True)
class HandoffInputData:
    """What a handoff ``input_filter`` gets: the run's input and what the run added since."""

    input_history: tuple[Message, ...]
    new_items: tuple[Message, ...]


@dataclass
class Handoff:
    """A handoff to another agent, offered to the model as a tool.

    ``input_filter(HandoffInputData) -> list[Message]`` may rewrite the history the target sees;
    ``on_handoff(RunContext)`` (sync or async) runs when the handoff happens.
    """

    agent: Agent
    tool_name: str
    tool_description: str
    input_filter: Callable[[HandoffInputData], Sequence[Message]] | None = None
    on_handoff: Callable[[RunContext], Any] | None = None
    is_enabled: IsEnabled = True
    """Whether the model is offered the handoff, or a predicate ``(ctx, agent) -> bool``."""


def handoff(
    agent: Agent,
    *,
    tool_name: str | None = None,
    tool_description: str | None = None,
    input_filter: Callable[[HandoffInputData], Sequence[Message]] | None = None,
    on_handoff: Callable[[RunContext], Any] | None = None,
    is_enabled: IsEnabled = True,
) -> Handoff:
    """Configure a handoff to ``agent``.

    The default tool name is ``transfer_to_<name>`` (lowercased, non-alphanumerics as ``_``);
    the default description is ``Transfer the conversation to <name>.`` plus the agent's
    ``handoff_description``. ``is_enabled`` (a bool, or a predicate ``(ctx, agent) -> bool``
    asked each time the agent becomes active) decides whether the model is offered it.
    """
    from raygents.agent import Agent  # (here: raygents.agent imports this module)

    if not isinstance(agent, Agent):
        raise UserError(f"handoff() needs an Agent, got {type(agent).__name__!r}")
    check_is_enabled(f"handoff to {agent.name!r}", is_enabled)
    name = tool_name or f"transfer_to_{_sanitise(agent.name)}"
    _check_handoff_name(agent, name, given=bool(tool_name))
    description = f"Transfer the conversation to {agent.name}."
    if agent.handoff_description:
        description += " " + agent.handoff_description
    return Handoff(
        agent=agent,
        tool_name=name,
        tool_description=tool_description or description,
        input_filter=input_filter,
        on_handoff=on_handoff,
        is_enabled=is_enabled,
    )


def check_handoff(config: Handoff) -> None:
    """Check a :class:`Handoff` built directly (``handoff()`` checks its own).

    Raises:
        UserError: one of its options is not what :func:`handoff` takes.
    """
    _check_handoff_name(config.agent, config.tool_name)
    check_is_enabled(f"handoff to {config.agent.name!r}", config.is_enabled)


def _check_handoff_name(agent: Agent, name: object, *, given: bool = True) -> None:
    """Refuse a handoff tool name that model APIs would refuse (see ``valid_tool_name``)."""
    if valid_tool_name(name):
        return
    hint = "" if given else " (made from the agent's name): pass tool_name="
    raise UserError(
        f"handoff to {agent.name!r}: tool name {excerpt(repr(name), 80)} is invalid: use 1-64 "
        f"letters, digits, '_' or '-'{hint}"
    )


def handoff_section(handoffs: Sequence[Handoff]) -> str:
    """The ``## Handoffs`` section of a system prompt, or ``""`` without handoffs."""
    if not handoffs:
        return ""
    lines = [
        "\n\n## Handoffs\n"
        "You can transfer the conversation to a more specialized agent when appropriate:\n"
    ]
    for h in handoffs:
        desc = h.tool_description
        if len(desc) > HandoffDescriptionLimit:
            desc = desc[:HandoffDescriptionLimit] + "..."
        lines.append(f"- {h.agent.name}: {desc}\n" if desc else f"- {h.agent.name}\n")
    return "".join(lines).rstrip("\n")
