"""Handoffs: an agent's transfer of a run to another agent, offered to the model as a tool."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raygents.agents.agent_tool import _sanitise
from raygents.agents.checks import check_is_enabled, is_function, valid_tool_name
from raygents.core.context import IsEnabled, RunContext
from raygents.errors import UserError, excerpt

if TYPE_CHECKING:
    # Recursive data: a handoff holds the agent it goes to, and an agent holds its handoffs.
    from raygents.agents.agent import Agent
    from raygents.core.messages import Message

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
    a ``tool_name`` given must be 1-64 letters, digits, ``_`` or ``-`` (an empty one is
    refused). The default description, also used for an empty ``tool_description``, is
    ``Transfer the conversation to <name>.`` plus the agent's ``handoff_description``.
    ``is_enabled`` (a bool, or a predicate ``(ctx, agent) -> bool`` asked each time the agent
    becomes active) decides whether the model is offered it.

    Raises:
        UserError: an option is not what it must be, naming the handoff and the option.
    """
    _check_target(agent, "handoff() needs an Agent")
    owner = f"handoff to {agent.name!r}"
    if tool_name == "":
        raise UserError(
            f"{owner}: tool_name is empty: pass a name, or leave tool_name out for the default"
        )
    if not isinstance(tool_description, str | None):
        raise UserError(
            f"{owner}: tool_description must be a str or None, "
            f"got {excerpt(repr(tool_description), 80)}"
        )
    name = f"transfer_to_{_sanitise(agent.name)}" if tool_name is None else tool_name
    _check_handoff_name(agent, name, given=tool_name is not None)
    description = f"Transfer the conversation to {agent.name}."
    if agent.handoff_description:
        description += " " + agent.handoff_description
    config = Handoff(
        agent=agent,
        tool_name=name,
        tool_description=tool_description or description,
        input_filter=input_filter,
        on_handoff=on_handoff,
        is_enabled=is_enabled,
    )
    _check_callbacks(config)
    return config


def check_handoff(config: Handoff) -> None:
    """Check a :class:`Handoff` built directly (``handoff()`` checks its own).

    Raises:
        UserError: one of its options is not what :func:`handoff` takes.
    """
    _check_target(config.agent, "Handoff(...) needs an Agent")
    _check_handoff_name(config.agent, config.tool_name)
    if not isinstance(config.tool_description, str):
        raise UserError(
            f"handoff to {config.agent.name!r}: tool_description must be a str, "
            f"got {excerpt(repr(config.tool_description), 80)}"
        )
    _check_callbacks(config)


def _check_target(agent: object, needs: str) -> None:
    from raygents.agents.agent import Agent  # (here: raygents.agents.agent imports this module)

    if not isinstance(agent, Agent):
        raise UserError(f"{needs}, got {excerpt(repr(agent), 80)}")


def _check_callbacks(config: Handoff) -> None:
    """``input_filter`` and ``on_handoff`` must be functions (or None), as the agent's actor
    calls them; ``is_enabled`` a bool or a predicate."""
    owner = f"handoff to {config.agent.name!r}"
    for field, shape in (
        ("input_filter", "(HandoffInputData) -> list[Message]"),
        ("on_handoff", "(ctx) (sync or async)"),
    ):
        value = getattr(config, field)
        if value is not None and not is_function(value):
            raise UserError(
                f"{owner}: {field} must be a function {shape} or None, "
                f"got {excerpt(repr(value), 80)}"
            )
    check_is_enabled(owner, config.is_enabled)


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
