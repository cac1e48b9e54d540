"""Agent tools: an agent called as a tool, each call a child run (see ``Agent.as_tool``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raygents.agents.checks import check_is_enabled, check_needs_approval, check_tool_name
from raygents.agents.tools import Tool
from raygents.core.context import IsEnabled, NeedsApproval
from raygents.core.messages import ToolResult
from raygents.core.toolcall import ToolContext
from raygents.errors import UserError, excerpt

if TYPE_CHECKING:
    # Recursive data: an agent tool holds the agent it calls, and an agent holds its tools.
    from raygents.agents.agent import Agent

__all__ = ["AgentTool", "OutputExtractor"]


OutputExtractor = Callable[[Any], Any]
"""``custom_output_extractor`` of an agent tool: the child run's ``RunResult`` in, the tool's
result out (a str, or any value a tool may return; sync or async)."""


class AgentTool(Tool):
    """An agent called as a tool: each call is a child run on the callee's actor."""

    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The request for the agent."}},
        "required": ["input"],
        "additionalProperties": False,
    }
    _checked_parameters = parameters

    def __init__(
        self,
        agent: Agent,
        name: str | None,
        description: str | None,
        *,
        output_extractor: OutputExtractor | None = None,
        is_enabled: IsEnabled = True,
        needs_approval: NeedsApproval = False,
    ) -> None:
        self.agent = agent
        if name == "":
            raise UserError(
                f"agent tool of {agent.name!r}: name is empty: pass a name, or leave it out "
                "for the agent's own"
            )
        self.name = name or _sanitise(agent.name)
        check_tool_name(self.name)
        if not isinstance(description, str | None):
            raise UserError(
                f"agent tool {self.name!r}: description must be a str or None, "
                f"got {excerpt(repr(description), 80)}"
            )
        self.description = (
            description or agent.handoff_description or f"Ask the {agent.name} agent."
        )
        if output_extractor is not None and not callable(output_extractor):
            raise UserError(
                f"agent tool {self.name!r}: custom_output_extractor must be a function "
                f"(RunResult) -> str, got {excerpt(repr(output_extractor), 80)}"
            )
        self.output_extractor = output_extractor
        check_is_enabled(f"tool {self.name!r}", is_enabled)
        self.is_enabled = is_enabled
        check_needs_approval(self.name, needs_approval)
        self.needs_approval = needs_approval

    async def execute(self, ctx: ToolContext, arguments: str) -> ToolResult:
        """Agent tools run as child runs through the runtime, never through this method."""
        raise UserError(f"agent tool {self.name!r} can only run inside a raygents run")


def _sanitise(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).lower()
