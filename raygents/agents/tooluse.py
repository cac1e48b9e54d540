"""Tool use behaviour: whether a turn's tool results end the run, and with what output."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from raygents.agents.checks import is_function
from raygents.core.context import RunContext
from raygents.core.schema import parse_output, parse_tool_output
from raygents.errors import OutputValidationError, UserError, excerpt

__all__ = [
    "StopAtTools",
    "final_value",
    "ToolUseBehavior",
    "ToolsToFinalOutput",
    "check_stop_at_tools",
    "check_tool_use_behavior",
]


@dataclass(frozen=True)
class StopAtTools:
    """Tool use behaviour: the first result of one of these tools is the final output.

    ``tool_names`` is one name or a collection of them, as the model sees them (an agent
    tool's ``name``, an MCP tool's name as raygents offers it). The agent refuses a name that
    is none of its tools when it is built, unless it has ``mcp_servers``: their tools are
    listed only when a run starts, so such an agent takes any name (one that none of its tools
    has never ends the run). A handoff's tool name is always refused: a handoff has no result.

    Raises:
        UserError: ``tool_names`` is not a str or a collection of str, or it is empty.
    """

    tool_names: tuple[str, ...]

    def __init__(self, tool_names: Iterable[str]) -> None:
        names = _tool_names(tool_names)
        if not names:
            raise UserError(
                "StopAtTools needs at least one tool name; to never stop at a tool, use "
                "tool_use_behavior='run_llm_again'"
            )
        object.__setattr__(self, "tool_names", names)


def _tool_names(given: object) -> tuple[str, ...]:
    """``StopAtTools``' names as a tuple; a value that is not a str or a collection of str
    (``None``, a number, bytes, a dict) raises ``UserError``."""
    if isinstance(given, str):
        return (given,)
    what = "a str or a list of str"
    if isinstance(given, bytes | Mapping) or not isinstance(given, Iterable):
        raise UserError(f"StopAtTools needs tool names: {what}, got {excerpt(repr(given), 80)}")
    names = tuple(given)
    for name in names:
        if not isinstance(name, str):
            raise UserError(
                f"StopAtTools needs tool names: {what}, got {excerpt(repr(name), 80)} in "
                f"{excerpt(repr(names), 80)}"
            )
    return names


ToolsToFinalOutput = Callable[[RunContext, list[Any]], Any]
"""A ``tool_use_behavior`` function ``(ctx, results) -> final output or None`` (sync or
async): ``results`` lists ``(ToolCall, ToolResult)`` pairs of the calls of the turn that ran;
``None`` lets the model see the results, anything else ends the run with it as the final
output."""
ToolUseBehavior = Literal["run_llm_again", "stop_on_first_tool"] | StopAtTools | ToolsToFinalOutput


def check_tool_use_behavior(owner: str, behavior: object) -> None:
    """Check an agent's ``tool_use_behavior`` (its StopAtTools names are checked apart).

    Raises:
        UserError: it is none of the behaviours, naming ``owner`` (the agent).
    """
    if behavior in ("run_llm_again", "stop_on_first_tool") or isinstance(behavior, StopAtTools):
        return
    if is_function(behavior):
        return
    raise UserError(
        f"{owner}: tool_use_behavior must be 'run_llm_again', 'stop_on_first_tool', "
        f"StopAtTools(...) or a function (ctx, results), got {behavior!r}"
    )


def check_stop_at_tools(
    owner: str,
    names: Sequence[str],
    *,
    tools: Sequence[str],
    handoffs: Mapping[str, str],
    more_tools: bool,
) -> None:
    """Each name must be one of ``tools``, the names of the agent's tools. With
    ``more_tools`` (an agent with MCP servers, whose tools are known only when a run lists
    them) any name is taken but one of ``handoffs`` (tool name -> target agent's name).

    Raises:
        UserError: a name is a handoff's, or none of the tools', naming ``owner`` and it.
    """
    for name in names:
        if name in handoffs:
            raise UserError(
                f"{owner}: StopAtTools names {name!r}, which is the handoff to "
                f"{handoffs[name]!r}: a handoff hands the run over and has no result to "
                "stop at; name tools only"
            )
        if name not in tools and not more_tools:
            raise UserError(
                f"{owner}: StopAtTools names {name!r}, which is none of its tools "
                f"({excerpt(', '.join(map(repr, tools)) or 'it has none', 200)}); "
                "name a tool it has"
            )


def final_value(agent: Any, text: str, tool: str | None) -> Any:
    """A final output as a hook or the result holds it: the return value of the tool whose
    result ended the run (``tool``), typed as the tool declares it; else the text parsed into
    the agent's ``output_type`` (the text where it does not parse: the run then fails with
    ``OutputValidationError`` in the driver).
    """
    if tool is not None:
        found = next((t for t in agent.tools if getattr(t, "name", None) == tool), None)
        returns = getattr(found, "return_type", None)
        return text if returns is None else parse_tool_output(text, returns())
    try:
        return parse_output(text, agent.output_type)
    except OutputValidationError:
        return text
