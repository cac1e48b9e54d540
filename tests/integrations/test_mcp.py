"""MCP servers as tool sources, against real servers: ``mcp-server-time`` over stdio and a
small streamable-HTTP server (``tests/mcp_http_server.py``) in a subprocess. No Ray needed.

Starting a server process costs about a second of CPU (importing the SDK), so the tests share
one event loop per module and one stdio server (``time_mcp``) wherever a test leaves it intact;
tests that kill, close or copy a server start their own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from ray import cloudpickle

from raygents.agents.tools import ToolContext, ToolResult
from raygents.errors import RaygentsError, UserError
from raygents.integrations.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHTTP, MCPTool

pytest.importorskip("mcp", reason="needs the mcp extra")
pytest.importorskip("mcp_server_time", reason="needs the mcp-server-time test dependency")
from mcp_http_server import PAGE_SIZE, PAGED_TOOLS, ServerProcess, free_port

pytestmark = pytest.mark.asyncio(loop_scope="module")

CTX = ToolContext(run_id="run-1", call_id="call-1", tool_name="t", agent_name="a")
TIME_ARGS = ("-m", "mcp_server_time", "--local-timezone", "UTC")


def time_server() -> MCPServerStdio:
    return MCPServerStdio("time", sys.executable, TIME_ARGS)


def time_server_pids() -> set[int]:
    """This process's live ``mcp_server_time`` children (the stdio servers it started)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"mcp_server_time" in cmdline:
            pids.add(int(entry))
    return pids


async def tools_by_name(server: MCPServer) -> dict[str, MCPTool]:
    tools = await server.list_tools()
    assert all(isinstance(t, MCPTool) for t in tools)
    return {t.name: t for t in tools if isinstance(t, MCPTool)}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def time_mcp() -> AsyncIterator[MCPServerStdio]:
    """One stdio server for the tests that leave it running and connected."""
    server = time_server()
    yield server
    await server.close()


@pytest.fixture(scope="module")
def http_process() -> Iterator[ServerProcess]:
    with ServerProcess() as proc:
        yield proc


@pytest_asyncio.fixture(loop_scope="module")
async def http_mcp(http_process: ServerProcess) -> AsyncIterator[MCPServerStreamableHTTP]:
    server = MCPServerStreamableHTTP("http", http_process.url, headers={"x-api-key": "secret"})
    yield server
    await server.close()


@pytest_asyncio.fixture(loop_scope="module")
async def paged_mcp(http_process: ServerProcess) -> AsyncIterator[MCPServerStreamableHTTP]:
    server = MCPServerStreamableHTTP("paged", http_process.paged_url)
    yield server
    await server.close()


# --- stdio: mcp-server-time --------------------------------------------------------------


async def test_stdio_lists_tools(time_mcp: MCPServerStdio) -> None:
    tools = await tools_by_name(time_mcp)
    assert {"get_current_time", "convert_time"} <= set(tools)
    get_time = tools["get_current_time"]
    assert get_time.remote is False
    assert get_time.options().remote is False
    assert get_time.server is time_mcp
    assert get_time.description
    assert get_time.parameters["type"] == "object"
    assert "timezone" in get_time.parameters["properties"]
    assert get_time.spec().name == "get_current_time"


async def test_stdio_call(time_mcp: MCPServerStdio) -> None:
    tools = await tools_by_name(time_mcp)
    result = await tools["get_current_time"].execute(CTX, '{"timezone": "UTC"}')
    assert not result.is_error
    assert json.loads(result.content)["timezone"] == "UTC"


async def test_stdio_tool_error_is_an_error_result(time_mcp: MCPServerStdio) -> None:
    tools = await tools_by_name(time_mcp)
    result = await tools["get_current_time"].execute(CTX, '{"timezone": "Nowhere/Atlantis"}')
    assert result.is_error
    assert "Nowhere/Atlantis" in result.content


async def test_unknown_tool_is_an_error_result(time_mcp: MCPServerStdio) -> None:
    result = await time_mcp.call_tool("no_such_tool", {})
    assert result == ToolResult(
        'Error: cannot execute tool "no_such_tool": Unknown tool: no_such_tool', is_error=True
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("{", "Invalid arguments: Expecting property name"),
        ("[1, 2]", "Invalid arguments: expected a JSON object, got list"),
        ('"UTC"', "Invalid arguments: expected a JSON object, got str"),
        ("null", "Invalid arguments: expected a JSON object, got NoneType"),
    ],
)
async def test_invalid_arguments_never_reach_the_server(arguments: str, message: str) -> None:
    # The command does not exist: any attempt to connect would give another error.
    server = MCPServerStdio("nowhere", "/nonexistent/mcp-server")
    result = await MCPTool(server, "anything").execute(CTX, arguments)
    assert result.is_error
    assert result.content.startswith(message)
    assert server._conn is None


async def test_cache_until_reset(time_mcp: MCPServerStdio) -> None:
    first = await time_mcp.list_tools()
    second = await time_mcp.list_tools()
    assert first is not second  # a copy each time ...
    assert all(a is b for a, b in zip(first, second, strict=True))  # ... of the cached tools
    time_mcp.reset_cache()
    third = await time_mcp.list_tools()
    assert [t.name for t in third] == [t.name for t in first]
    assert not any(a is b for a, b in zip(first, third, strict=True))


async def test_concurrent_first_use_connects_once() -> None:
    before = time_server_pids()
    server = time_server()
    try:
        results = await asyncio.gather(*(server.list_tools() for _ in range(5)))
        assert all(r[0] is results[0][0] for r in results)
        assert len(time_server_pids() - before) == 1
    finally:
        await server.close()
    assert time_server_pids() == before


async def test_stdio_concurrent_calls(time_mcp: MCPServerStdio) -> None:
    tools = await tools_by_name(time_mcp)
    zones = ["UTC", "Europe/Paris", "Asia/Tokyo", "America/New_York", "Bad/Zone"] * 4
    results = await asyncio.gather(
        *(tools["get_current_time"].execute(CTX, json.dumps({"timezone": z})) for z in zones)
    )
    for zone, result in zip(zones, results, strict=True):
        if zone == "Bad/Zone":
            assert result.is_error
        else:
            assert json.loads(result.content)["timezone"] == zone


async def test_stdio_reconnects_after_the_process_died() -> None:
    before = time_server_pids()
    server = time_server()
    try:
        tools = await tools_by_name(server)
        (pid,) = time_server_pids() - before
        os.kill(pid, signal.SIGKILL)
        result = await tools["get_current_time"].execute(CTX, '{"timezone": "UTC"}')
        assert not result.is_error, result.content
        (new_pid,) = time_server_pids() - before
        assert new_pid != pid
        # The cached tools keep working on the new connection; concurrent calls that all
        # find the process gone start one new process between them.
        os.kill(new_pid, signal.SIGKILL)
        results = await asyncio.gather(
            *(tools["get_current_time"].execute(CTX, '{"timezone": "UTC"}') for _ in range(5))
        )
        assert not any(r.is_error for r in results), results
        assert len(time_server_pids() - before) == 1
    finally:
        await server.close()


async def test_close_stops_the_process_and_the_server_stays_usable() -> None:
    before = time_server_pids()
    server = time_server()
    await server.close()  # never connected: nothing to do
    await server.list_tools()
    assert len(time_server_pids() - before) == 1
    await server.close()
    assert time_server_pids() == before
    await server.close()
    result = await server.call_tool("get_current_time", {"timezone": "UTC"})
    assert not result.is_error
    assert len(time_server_pids() - before) == 1
    await server.close()
    assert time_server_pids() == before


async def test_close_ends_calls_in_flight_without_reconnecting(
    http_mcp: MCPServerStreamableHTTP,
) -> None:
    call = asyncio.create_task(
        http_mcp.call_tool("meet", {"group": "alone", "size": 2, "tag": "x"})
    )
    while http_mcp._conn is None or not http_mcp._conn.alive:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # the request is likely out; the outcome is the same if not
    await http_mcp.close()
    result = await call
    assert result.is_error
    assert result.content.startswith('Error: cannot execute tool "meet": Connection closed')
    assert http_mcp._conn is None


async def test_close_while_connecting() -> None:
    before = time_server_pids()
    server = time_server()
    listing = asyncio.create_task(server.list_tools())
    while server._conn is None:
        await asyncio.sleep(0)
    await server.close()  # long before the process has started and answered the handshake
    with pytest.raises(RaygentsError, match="closed while connecting"):
        await listing
    assert server._conn is None
    assert time_server_pids() == before


async def test_pickle_round_trip(time_mcp: MCPServerStdio) -> None:
    pids = time_server_pids()
    before = cloudpickle.loads(cloudpickle.dumps(time_server()))  # never connected
    assert type(before) is MCPServerStdio
    assert (before.name, before.command, before.args) == ("time", sys.executable, TIME_ARGS)
    assert before.__getstate__() == {
        "name": "time",
        "command": sys.executable,
        "args": TIME_ARGS,
        "env": None,
        "cwd": None,
        "tool_timeout_s": 300.0,
    }

    tools = await tools_by_name(time_mcp)
    after = cloudpickle.loads(cloudpickle.dumps(time_mcp))
    assert after.__getstate__() == before.__getstate__()
    assert after._conn is None and after._tools is None
    tool = cloudpickle.loads(cloudpickle.dumps(tools["get_current_time"]))
    assert (tool.name, tool.parameters, tool.remote) == (
        "get_current_time",
        tools["get_current_time"].parameters,
        False,
    )
    try:
        # Each copy connects on its own; the original keeps its connection.
        result = await tool.execute(CTX, '{"timezone": "UTC"}')
        assert not result.is_error
        assert [t.name for t in await after.list_tools()] == list(tools)
        assert len(time_server_pids() - pids) == 2
        result = await tools["get_current_time"].execute(CTX, '{"timezone": "UTC"}')
        assert not result.is_error
    finally:
        await tool.server.close()
        await after.close()


async def test_stdio_env_and_cwd(tmp_path: Path) -> None:
    script = tmp_path / "srv.py"
    script.write_text(
        "import os\n"
        "from mcp.server.mcpserver import MCPServer\n"
        "server = MCPServer('env')\n"
        "@server.tool()\n"
        "def where() -> str:\n"
        "    return os.getcwd() + '|' + os.environ.get('RAYGENTS_MCP_TEST', '')\n"
        "server.run()\n"
    )
    server = MCPServerStdio(
        "env", sys.executable, ["srv.py"], env={"RAYGENTS_MCP_TEST": "yes"}, cwd=tmp_path
    )
    try:
        result = await server.call_tool("where", None)
    finally:
        await server.close()
    assert result == ToolResult(f"{tmp_path}|yes")


async def test_stdio_that_cannot_start() -> None:
    server = MCPServerStdio("nowhere", "/nonexistent/mcp-server")
    with pytest.raises(RaygentsError, match='cannot list the tools of MCP server "nowhere"'):
        await server.list_tools()
    result = await server.call_tool("x", {})
    assert result.is_error
    assert result.content.startswith('Error: cannot execute tool "x": ')
    assert "/nonexistent/mcp-server" in result.content


async def test_server_that_never_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("raygents.integrations.mcp_connection.CONNECT_TIMEOUT_S", 0.5)
    server = MCPServerStdio("mute", sys.executable, ["-c", "import sys; sys.stdin.read()"])
    with pytest.raises(RaygentsError, match=r"no answer to the MCP handshake within 0\.5s"):
        await server.list_tools()
    assert server._conn is None


async def test_arguments_are_checked_in_the_caller() -> None:
    with pytest.raises(UserError, match="non-empty name"):
        MCPServerStdio("", "x")
    with pytest.raises(UserError, match="non-empty command"):
        MCPServerStdio("a", "")
    with pytest.raises(UserError, match="sequence of str"):
        MCPServerStdio("a", "x", "--flag")
    with pytest.raises(UserError, match="http"):
        MCPServerStreamableHTTP("a", "127.0.0.1:8000/mcp")


async def test_import_needs_no_mcp_package() -> None:
    code = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"
        "import asyncio, raygents, raygents.integrations.mcp as m\n"
        "server = m.MCPServerStdio('x', 'y')\n"
        "try:\n"
        "    asyncio.run(server.list_tools())\n"
        "except raygents.errors.UserError as exc:\n"
        "    print(exc)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert "pip install 'raygents[mcp]'" in out.decode()


# --- streamable HTTP ---------------------------------------------------------------------


async def test_http_list_and_call(http_mcp: MCPServerStreamableHTTP) -> None:
    tools = await tools_by_name(http_mcp)
    assert set(tools) == {"add", "fail", "whoami", "meet"}
    assert tools["add"].description == "Add two integers."
    assert set(tools["add"].parameters["properties"]) == {"a", "b"}
    assert await tools["add"].execute(CTX, '{"a": 2, "b": 3}') == ToolResult("5")


async def test_http_error_result(http_mcp: MCPServerStreamableHTTP) -> None:
    result = await http_mcp.call_tool("fail", {"message": "boom"})
    assert result == ToolResult("Error executing tool fail: boom", is_error=True)
    result = await http_mcp.call_tool("add", {"a": "not a number", "b": 1})
    assert result.is_error


async def test_http_headers(http_mcp: MCPServerStreamableHTTP, http_process: ServerProcess) -> None:
    assert await http_mcp.call_tool("whoami", None) == ToolResult("secret")
    plain = MCPServerStreamableHTTP("plain", http_process.url)
    try:
        assert await plain.call_tool("whoami", None) == ToolResult("<none>")
    finally:
        await plain.close()


async def test_http_concurrent_calls(http_mcp: MCPServerStreamableHTTP) -> None:
    # Each call returns only once all of them are in flight on the server at the same time.
    size = 6
    tools = await tools_by_name(http_mcp)
    calls = [
        tools["meet"].execute(CTX, json.dumps({"group": "g1", "size": size, "tag": str(i)}))
        for i in range(size)
    ]
    results = await asyncio.wait_for(asyncio.gather(*calls), 20)
    assert [r.content for r in results] == [str(i) for i in range(size)]


async def test_http_pagination_and_cache(paged_mcp: MCPServerStreamableHTTP) -> None:
    pages = -(-PAGED_TOOLS // PAGE_SIZE)
    tools = await paged_mcp.list_tools()
    assert [t.name for t in tools] == [f"tool_{i:02d}" for i in range(PAGED_TOOLS)]

    async def list_requests() -> int:
        result = await paged_mcp.call_tool("tool_00", None)
        count: int = json.loads(result.content)["list_requests"]
        return count

    start = await list_requests()
    await paged_mcp.list_tools()
    await paged_mcp.list_tools()
    assert await list_requests() == start
    paged_mcp.reset_cache()
    await paged_mcp.list_tools()
    assert await list_requests() == start + pages


async def test_structured_content_and_empty_arguments(paged_mcp: MCPServerStreamableHTTP) -> None:
    tool = (await tools_by_name(paged_mcp))["tool_03"]
    assert tool.parameters == {"type": "object", "properties": {"x": {"type": "integer"}}}
    result = await tool.execute(CTX, '{"x": 1}')
    assert not result.is_error
    assert json.loads(result.content)["tool"] == "tool_03"
    assert json.loads(result.content)["args"] == {"x": 1}
    for empty in ("", "  "):
        result = await tool.execute(CTX, empty)
        assert json.loads(result.content)["args"] is None


async def test_http_server_that_is_down() -> None:
    server = MCPServerStreamableHTTP("down", f"http://127.0.0.1:{free_port()}/mcp")
    with pytest.raises(RaygentsError, match='cannot list the tools of MCP server "down"'):
        await server.list_tools()
    result = await server.call_tool("add", {"a": 1, "b": 2})
    assert result.is_error
    assert result.content.startswith('Error: cannot execute tool "add": ')
    await server.close()


async def test_http_reconnects_after_a_restart(http_process: ServerProcess) -> None:
    # Last in the module: it kills and restarts the shared server process.
    server = MCPServerStreamableHTTP("restart", http_process.url)
    try:
        tools = await tools_by_name(server)
        assert await tools["add"].execute(CTX, '{"a": 1, "b": 1}') == ToolResult("2")

        # Restarted before the client noticed: the old session id is unknown now.
        http_process.kill()
        http_process.start()
        assert await tools["add"].execute(CTX, '{"a": 1, "b": 2}') == ToolResult("3")

        # Down while calling: an error result, then the next call reconnects.
        http_process.kill()
        result = await tools["add"].execute(CTX, '{"a": 1, "b": 3}')
        assert result.is_error
        assert result.content.startswith('Error: cannot execute tool "add": ')
        http_process.start()
        assert await tools["add"].execute(CTX, '{"a": 1, "b": 4}') == ToolResult("5")
    finally:
        await server.close()
