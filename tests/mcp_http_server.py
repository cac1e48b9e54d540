"""A small streamable-HTTP MCP server for the MCP tests, run as a subprocess.

It serves two MCP endpoints from one uvicorn process on 127.0.0.1:

- ``/mcp``: an ``MCPServer`` (the SDK's FastMCP) with ``add``, ``fail``, ``whoami``,
  ``structured`` and ``sleep``;
- ``/paged/mcp``: a low-level server with ``PAGED_TOOLS`` tools listed ``PAGE_SIZE`` at a
  time, because ``MCPServer`` answers ``tools/list`` in one page and never sets
  ``nextCursor``.

Usage: ``python tests/mcp_http_server.py PORT``. It prints ``ready`` once it listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
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
        raise ValueError(message)

    @server.tool()
    def whoami(ctx: Context) -> str:
        """Return the request's ``x-api-key`` header."""
        headers = ctx.headers or {}
        return headers.get("x-api-key", "<none>")

    @server.tool()
    async def sleep(seconds: float, tag: str) -> str:
        """Sleep, then return ``tag``."""
        await asyncio.sleep(seconds)
        return tag

    return server


def build_paged_server() -> Server[Any]:
    """The low-level server behind ``/paged/mcp``, which paginates ``tools/list``."""
    names = [f"tool_{i:02d}" for i in range(PAGED_TOOLS)]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
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
        return types.CallToolResult(
            content=[], structured_content={"tool": params.name, "args": params.arguments}
        )

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


def main() -> None:
    """Serve on the port given as the first argument until killed."""
    port = int(sys.argv[1])
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
