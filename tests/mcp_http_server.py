"""A small streamable-HTTP MCP server for the MCP tests, run as a subprocess.

It serves two MCP endpoints from one uvicorn process on 127.0.0.1:

- ``/mcp``: an ``MCPServer`` (the SDK's FastMCP) with ``add``, ``fail``, ``whoami``,
  and ``meet``;
- ``/paged/mcp``: a low-level server with ``PAGED_TOOLS`` tools listed ``PAGE_SIZE`` at a
  time, because ``MCPServer`` answers ``tools/list`` in one page and never sets
  ``nextCursor``. Its tools answer with structured content only, including how many
  ``tools/list`` requests the server has answered.

Usage: ``python tests/mcp_http_server.py PORT``. It prints ``ready`` once it listens and exits
when its stdin closes. Tests
use :class:`ServerProcess`, which starts it, kills it and starts it again on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.applications import Starlette

PAGED_TOOLS = 12
PAGE_SIZE = 5


def build_tools_server() -> MCPServer:
    """The FastMCP-style server behind ``/mcp``."""
    server: MCPServer = MCPServer("raygents-test-http")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def fail(message: str) -> str:
        """Always fail with ``message``."""
        raise ToolError(message)

    @server.tool()
    def whoami(ctx: Context) -> str:
        """Return the request's ``x-api-key`` header."""
        headers = ctx.headers or {}
        return headers.get("x-api-key", "<none>")

    arrived: dict[str, int] = {}
    everyone_here: dict[str, asyncio.Event] = {}

    @server.tool()
    async def meet(group: str, size: int, tag: str) -> str:
        """Return ``tag`` once ``size`` calls of ``group`` are in flight at the same time."""
        arrived[group] = arrived.get(group, 0) + 1
        event = everyone_here.setdefault(group, asyncio.Event())
        if arrived[group] >= size:
            event.set()
        try:
            await asyncio.wait_for(event.wait(), 5.0)
        except asyncio.TimeoutError:
            raise ToolError(f"only {arrived[group]} of {size} calls arrived") from None
        return tag

    return server


def build_paged_server() -> Server[Any]:
    """The low-level server behind ``/paged/mcp``, which paginates ``tools/list``."""
    names = [f"tool_{i:02d}" for i in range(PAGED_TOOLS)]
    list_requests = 0

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        nonlocal list_requests
        list_requests += 1
        start = int(params.cursor) if params is not None and params.cursor else 0
        page = names[start : start + PAGE_SIZE]
        end = start + len(page)
        tools = [
            types.Tool(
                name=name,
                description=f"Paged tool {name}.",
                input_schema={"type": "object", "properties": {"x": {"type": "integer"}}},
            )
            for name in page
        ]
        return types.ListToolsResult(
            tools=tools, next_cursor=str(end) if end < len(names) else None
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        structured = {
            "tool": params.name,
            "args": params.arguments,
            "list_requests": list_requests,
        }
        return types.CallToolResult(content=[], structured_content=structured)

    return Server("raygents-test-paged", on_list_tools=list_tools, on_call_tool=call_tool)


def build_app() -> Starlette:
    """Both endpoints in one Starlette app, with both session managers running."""
    tools = build_tools_server()
    paged = build_paged_server()
    tools_app = tools.streamable_http_app(streamable_http_path="/mcp")
    paged_app = paged.streamable_http_app(streamable_http_path="/paged/mcp")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with tools.session_manager.run(), paged.session_manager.run():
            yield

    return Starlette(routes=[*tools_app.routes, *paged_app.routes], lifespan=lifespan)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """This module run as a subprocess on one port, which survives :meth:`kill`."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.paged_url = f"http://127.0.0.1:{self.port}/paged/mcp"
        self._proc: subprocess.Popen[str] | None = None

    def start(self, timeout_s: float = 20.0) -> None:
        """Start the server and wait until it listens."""
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if sel.select(timeout=deadline - time.monotonic()):
                    line = self._proc.stdout.readline()
                    if line.strip() == "ready":
                        return
                    if not line:
                        break
        self.kill()
        raise RuntimeError(f"the MCP test server on port {self.port} did not start")

    def kill(self) -> None:
        """Kill the server at once, as a crash would."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()
            self._proc = None

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def main() -> None:
    """Serve on the port given as the first argument until killed or stdin closes."""
    port = int(sys.argv[1])
    # Stdin closes when the test process dies, however it dies: never outlive it.
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    config = uvicorn.Config(build_app(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        print("ready", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
