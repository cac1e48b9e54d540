"""MCP servers that misbehave: broken schemas, names a model API refuses, endless
``tools/list`` cursors, requests never answered. Against ``tests/mcp_hostile_server.py``, a
real stdio server process. No Ray needed."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
from pathlib import Path

import pytest
from ray import cloudpickle

import raygents.integrations.mcp as rmcp
from raygents.agents.tools import ToolContext
from raygents.errors import RaygentsError, UserError
from raygents.integrations.mcp import MCPServerStdio, MCPServerStreamableHTTP, MCPTool

pytest.importorskip("mcp", reason="needs the mcp extra")
from mcp_hostile_server import BAD_SCHEMAS, LONG_NAME

SERVER = str(Path(__file__).parents[1] / "mcp_hostile_server.py")
CTX = ToolContext(run_id="run-1", call_id="call-1", tool_name="t", agent_name="a")
NAME_RULE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def hostile(mode: str, **kwargs: float) -> MCPServerStdio:
    return MCPServerStdio(f"hostile-{mode}", sys.executable, [SERVER, mode], **kwargs)


async def listed(server: MCPServerStdio) -> dict[str, MCPTool]:
    try:
        tools = await server.list_tools()
    finally:
        await server.close()
    assert all(isinstance(t, MCPTool) for t in tools)
    return {t.name: t for t in tools if isinstance(t, MCPTool)}


# --- schemas -------------------------------------------------------------------------------


async def test_tools_with_broken_schemas_are_left_out_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="raygents.mcp")
    tools = await listed(hostile("schemas"))
    assert set(tools) == {"good"}  # a valid recursive schema is kept
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for name in BAD_SCHEMAS:
        (line,) = [w for w in warned if f"tool {name!r}" in w]
        assert "MCP server 'hostile-schemas'" in line
        assert "left out" in line
    assert any("strng" in w for w in warned)
    assert any("outside the schema" in w for w in warned)  # never fetched


# --- names ---------------------------------------------------------------------------------


async def test_names_a_model_refuses_are_mapped_and_called_by_their_own_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="raygents.mcp")
    server = hostile("names")
    try:
        tools = {t.name: t for t in await server.list_tools() if isinstance(t, MCPTool)}
        assert all(NAME_RULE.fullmatch(name) for name in tools), list(tools)
        assert {"echo", "a_b"} <= set(tools)  # valid names stay as they are
        by_origin = {t.mcp_name: t for t in tools.values()}
        assert set(by_origin) == {"../x", "a b", LONG_NAME, "fs.read", "a.b", "a_b", "echo"}
        assert by_origin["a.b"].name != "a_b"  # a mapped name never takes a valid one's place
        for origin, t in by_origin.items():
            result = await t.execute(CTX, '{"x": "hi"}')
            assert json.loads(result.content) == {"name": origin, "arguments": {"x": "hi"}}
        # The same name maps to the same tool name in every listing, process and copy.
        server.reset_cache()
        again = {t.mcp_name: t.name for t in await server.list_tools() if isinstance(t, MCPTool)}
        assert again == {origin: t.name for origin, t in by_origin.items()}
    finally:
        await server.close()
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "MCP server 'hostile-names': tool '' left out: it has no name" in warned
    assert f"tool '../x' is offered to the model as {by_origin['../x'].name!r}" in warned


# --- tools/list ------------------------------------------------------------------------------


async def test_endless_cursors_end_with_an_error(tmp_path: Path) -> None:
    count = tmp_path / "pages"
    server = MCPServerStdio(
        "endless", sys.executable, [SERVER, "cursors"], env={"HOSTILE_MCP_COUNT": str(count)}
    )
    started = time.monotonic()
    with pytest.raises(RaygentsError, match=r'MCP server "endless": .*more than \d+ pages'):
        await listed(server)
    assert time.monotonic() - started < 30
    assert int(count.read_text()) <= 100


async def test_a_repeated_cursor_ends_with_an_error() -> None:
    with pytest.raises(RaygentsError, match="repeated the tools/list cursor 'same'"):
        await listed(hostile("repeat"))


async def test_a_listing_that_never_comes_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("raygents.integrations.mcp._LIST_TIMEOUT_S", 0.5)
    server = hostile("mute-list")
    with pytest.raises(RaygentsError, match=r"no answer to tools/list within 0\.5s"):
        await listed(server)


# --- calls that never end -----------------------------------------------------------------


async def test_a_call_the_server_never_answers_times_out_and_the_server_stays_usable() -> None:
    server = hostile("hang", tool_timeout_s=0.5)
    try:
        tools = {t.name: t for t in await server.list_tools()}
        assert tools["hang"].timeout_s == 0.5
        started = time.monotonic()
        result = await tools["hang"].execute(CTX, '{"x": "1"}')
        assert time.monotonic() - started < 5
        # The text a remote tool's timeout gives (raygents.runtime.worker.tasks.run_tool).
        assert result.is_error
        assert result.content == 'Error: cannot execute tool "hang": timed out after 0.5 s'
        echo = await tools["echo"].execute(CTX, '{"x": "2"}')
        assert json.loads(echo.content)["arguments"] == {"x": "2"}
        hung = asyncio.create_task(tools["hang"].execute(CTX, "{}"))
        await asyncio.sleep(0.1)
    finally:
        started = time.monotonic()
        await server.close()
        assert time.monotonic() - started < 10
    assert (await hung).is_error


def test_mcp_tools_have_a_default_timeout_that_a_server_sets() -> None:
    assert rmcp.MCP_TOOL_TIMEOUT_S > 0
    assert MCPTool(hostile("x"), "t").timeout_s == rmcp.MCP_TOOL_TIMEOUT_S
    assert MCPTool(hostile("x", tool_timeout_s=2), "t").timeout_s == 2
    http = MCPServerStreamableHTTP("h", "http://127.0.0.1:1/mcp", tool_timeout_s=3)
    assert MCPTool(http, "t").timeout_s == 3
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(UserError, match="tool_timeout_s"):
            hostile("x", tool_timeout_s=bad)
    copy = cloudpickle.loads(cloudpickle.dumps(hostile("x", tool_timeout_s=7)))
    assert copy.tool_timeout_s == 7
    old = hostile("x")
    state = old.__getstate__()
    del state["tool_timeout_s"]  # pickled before the option existed
    old.__setstate__(state)
    assert old.tool_timeout_s == rmcp.MCP_TOOL_TIMEOUT_S
