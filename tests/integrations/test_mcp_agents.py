"""MCP servers as tool sources of agents running in actors (a real stdio server)."""

from __future__ import annotations

import json
import sys

import pytest

import raygents as rg
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


def time_server() -> rg.MCPServerStdio:
    return rg.MCPServerStdio(
        "clock", sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"]
    )


def test_an_agent_calls_a_tool_of_an_mcp_server_over_stdio() -> None:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        names = {t.name for t in req.tools}
        assert "get_current_time" in names
        results = [m.text for m in req.messages if m.role == "tool"]
        if not results:
            return calls(
                call("get_current_time", {"timezone": "UTC"}, id="t1"),
                call("get_current_time", {"timezone": "Not/AZone"}, id="t2"),
            )
        return text(json.dumps(results))

    agent = rg.Agent("timekeeper", model=FunctionModel(reply), mcp_servers=[time_server()])
    first, second = json.loads(rg.run(agent, "time?").final_output)
    assert json.loads(first)["timezone"] == "UTC"
    assert "Not/AZone" in second


def test_a_name_clash_with_an_mcp_tool_fails_at_run_start() -> None:
    @rg.tool(remote=False)
    def get_current_time() -> str:
        """A clashing tool."""
        return "now"

    agent = rg.Agent(
        "clash", tools=[get_current_time], model=ScriptedModel([]), mcp_servers=[time_server()]
    )
    with pytest.raises(rg.UserError, match=r"get_current_time.*MCP server 'clock'"):
        rg.run(agent, "x")
