"""MCP servers as tool sources: one kept connection per server, its tools run in the actor.

An :class:`MCPServer` travels inside an agent to the agent's actor as configuration only; the
actor connects on first use and keeps the connection until :meth:`MCPServer.close`. Each MCP
tool becomes an :class:`MCPTool` (``remote = False``): a call is one request on that connection,
sent from the actor's event loop, so many runs can call one server concurrently.

Only this module imports the ``mcp`` SDK (version 2), and only when a server first connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from raygents.errors import RaygentsError, UserError
from raygents.tools import Tool, ToolContext, ToolResult

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult
    from mcp.types import Tool as MCPToolInfo

__all__ = ["MCPServer", "MCPServerStdio", "MCPServerStreamableHTTP", "MCPTool"]

T = TypeVar("T")
_Streams = tuple[Any, Any]
"""A transport's read and write streams."""

logger = logging.getLogger(__name__)

_CONNECT_TIMEOUT_S = 60.0
"""How long a server may take to answer the MCP handshake; ``npx``/``uvx`` may first download."""
_HTTP_TIMEOUT_S = 30.0
_HTTP_READ_TIMEOUT_S = 300.0
"""A streamable-HTTP response may be an event stream that stays quiet for a while."""
_SESSION_NOT_FOUND = -32001


def _require_mcp() -> None:
    try:
        import mcp.client.streamable_http  # noqa: F401
    except ImportError as exc:
        raise UserError(
            f"MCP servers need the MCP SDK (mcp>=2.3), which cannot be imported ({exc}): "
            "pip install 'raygents[mcp]'"
        ) from exc


class MCPServer:
    """An MCP server whose tools an agent can call.

    Public attributes are configuration and are all that pickling keeps; the connection,
    the tool cache and the locks are rebuilt lazily on the other side. Use the subclasses
    :class:`MCPServerStdio` and :class:`MCPServerStreamableHTTP`.

    Attributes:
        name: the server's name, for messages and for telling servers apart.
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise UserError(f"an MCP server needs a non-empty name, got {name!r}")
        self.name = name
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._conn: _Connection | None = None
        self._tools: list[Tool] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connect_lock = asyncio.Lock()
        self._list_lock = asyncio.Lock()
        self._closes = 0

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_runtime()

    async def list_tools(self) -> list[Tool]:
        """The server's tools, connecting first if needed.

        The list is fetched page by page on the first call and cached until
        :meth:`reset_cache`; each call returns a new list of the same :class:`MCPTool` objects.

        Raises:
            UserError: the ``mcp`` package is missing.
            RaygentsError: the server could not be reached or could not list its tools.
        """
        self._check_loop()
        _require_mcp()
        if self._tools is None:
            async with self._list_lock:
                if self._tools is None:
                    try:
                        infos = await self._request(_list_all_tools)
                    except Exception as exc:
                        raise RaygentsError(
                            f'cannot list the tools of MCP server "{self.name}": {_describe(exc)}'
                        ) from exc
                    self._tools = [MCPTool.from_info(self, info) for info in infos]
        return list(self._tools)

    def reset_cache(self) -> None:
        """Forget the cached tool list; the next :meth:`list_tools` asks the server again."""
        self._tools = None

    async def call_tool(self, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        """Call tool ``name`` on the server; every failure becomes an error result.

        A call that fails because the connection or the server process is gone connects again
        and is sent once more, so a tool may run twice if the server died while running it.
        """
        self._check_loop()
        args = dict(arguments) if arguments is not None else None

        async def call(session: ClientSession) -> CallToolResult:
            return await session.call_tool(name, args)

        try:
            result = await self._request(call)
        except Exception as exc:
            message = f'Error: cannot execute tool "{name}": {_describe(exc)}'
            return ToolResult(message, is_error=True)
        return _to_tool_result(result)

    async def close(self) -> None:
        """Close the connection (for stdio, stop the server process).

        Calls still in flight end with an error result. The object stays usable: the next
        call connects again. The tool cache is kept.
        """
        self._closes += 1
        conn, self._conn = self._conn, None
        if conn is not None and conn.loop is asyncio.get_running_loop():
            await conn.close()

    async def _request(self, op: Callable[[ClientSession], Awaitable[T]]) -> T:
        """Run ``op`` on a live session; after a lost connection, connect again and retry once."""
        closes = self._closes
        conn = await self._connection()
        try:
            return await op(conn.session)
        except Exception as exc:
            if not _is_disconnect(exc) or closes != self._closes:
                raise
            logger.info("MCP server %r: connection lost (%s); reconnecting", self.name, exc)
        await self._discard(conn)
        conn = await self._connection()
        return await op(conn.session)

    async def _connection(self) -> _Connection:
        conn = self._conn
        if conn is not None and conn.alive:
            return conn
        async with self._connect_lock:
            if self._conn is not None and self._conn.alive:
                return self._conn
            if self._conn is not None:
                await self._conn.close()
            # Published before the handshake, so that close() can stop it midway.
            self._conn = conn = _Connection(self)
            try:
                await conn.ready()
            except BaseException:
                if self._conn is conn:
                    self._conn = None
                raise
            return conn

    async def _discard(self, conn: _Connection) -> None:
        if self._conn is conn:
            self._conn = None
        await conn.close()

    def _check_loop(self) -> None:
        """Start afresh in a new event loop: the old loop's connection cannot be used here."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None:
                tools = self._tools
                self._reset_runtime()
                self._tools = tools
            self._loop = loop

    async def _open(self, stack: contextlib.AsyncExitStack) -> _Streams:
        """Enter the transport on ``stack`` and return its read and write streams."""
        raise NotImplementedError(f"{type(self).__name__} has no transport")


class MCPServerStdio(MCPServer):
    """An MCP server started as a subprocess and spoken to over its stdin and stdout.

    Each connection starts the process; :meth:`close` stops it, and a call after the process
    died starts it again.

    Args:
        name: the server's name.
        command: the executable, e.g. ``"uvx"`` or ``sys.executable``.
        args: its arguments.
        env: extra environment variables, on top of the SDK's safe defaults (``PATH``,
            ``HOME``, ...); the rest of the caller's environment is not passed on.
        cwd: the working directory; the actor's by default.
    """

    def __init__(
        self,
        name: str,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(name)
        if not isinstance(command, str) or not command:
            raise UserError(f"MCP server {name!r} needs a non-empty command, got {command!r}")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise UserError(f"MCP server {name!r}: args must be a sequence of str, got {args!r}")
        self.command = command
        self.args = tuple(args)
        self.env = dict(env) if env is not None else None
        self.cwd = os.fspath(cwd) if cwd is not None else None

    def __repr__(self) -> str:
        return f"MCPServerStdio({self.name!r}, command={self.command!r}, args={self.args!r})"

    async def _open(self, stack: contextlib.AsyncExitStack) -> _Streams:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=self.command, args=list(self.args), env=self.env, cwd=self.cwd
        )
        return await stack.enter_async_context(stdio_client(params))


class MCPServerStreamableHTTP(MCPServer):
    """An MCP server reached over streamable HTTP.

    Args:
        name: the server's name.
        url: the MCP endpoint, e.g. ``"http://127.0.0.1:8000/mcp"``.
        headers: HTTP headers sent with every request (e.g. ``Authorization``).
    """

    def __init__(self, name: str, url: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(name)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise UserError(f"MCP server {name!r} needs an http(s) URL, got {url!r}")
        self.url = url
        self.headers = dict(headers) if headers is not None else None

    def __repr__(self) -> str:
        return f"MCPServerStreamableHTTP({self.name!r}, url={self.url!r})"

    async def _open(self, stack: contextlib.AsyncExitStack) -> _Streams:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        timeout = httpx2.Timeout(_HTTP_TIMEOUT_S, read=_HTTP_READ_TIMEOUT_S)
        client = httpx2.AsyncClient(headers=self.headers, timeout=timeout)
        await stack.enter_async_context(client)
        return await stack.enter_async_context(streamable_http_client(self.url, http_client=client))


class MCPTool(Tool):
    """One tool of an MCP server; calls run in the agent actor over the server's connection.

    Attributes:
        server: the server that owns the tool.
    """

    remote = False

    def __init__(
        self,
        server: MCPServer,
        name: str,
        description: str = "",
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self.server = server
        self.name = name
        self.description = description
        self.parameters = parameters or {"type": "object", "properties": {}}

    @classmethod
    def from_info(cls, server: MCPServer, info: MCPToolInfo) -> MCPTool:
        """Build the tool from the server's ``tools/list`` entry."""
        schema = dict(info.input_schema) if info.input_schema else None
        return cls(server, info.name, info.description or "", schema)

    async def execute(self, ctx: ToolContext, arguments: str) -> ToolResult:
        """Parse the model's JSON ``arguments`` and call the tool on the server."""
        args: dict[str, Any] | None = None
        if arguments.strip():
            try:
                parsed = json.loads(arguments)
            except json.JSONDecodeError as exc:
                return ToolResult(f"Invalid arguments: {exc}", is_error=True)
            if not isinstance(parsed, dict):
                kind = type(parsed).__name__
                message = f"Invalid arguments: expected a JSON object, got {kind}"
                return ToolResult(message, is_error=True)
            args = parsed
        return await self.server.call_tool(self.name, args)


class _Connection:
    """One MCP session, entered and exited by its own asyncio task.

    The SDK's transports and session are anyio task groups, whose cancel scopes must be
    entered and left by one task. So a dedicated owner task enters them, publishes the
    session, and waits to be told to stop. Requests go straight onto the session from any task
    of the same loop: the session matches responses to requests by id and wakes every waiter
    with "Connection closed" when the transport ends, whether by :meth:`close`, a crashed
    transport, or a dead server process.
    """

    def __init__(self, server: MCPServer) -> None:
        _require_mcp()
        self.loop = asyncio.get_running_loop()
        self._server = server
        self._session: ClientSession | None = None
        self._ready: asyncio.Future[None] = self.loop.create_future()
        self._stop = asyncio.Event()
        self._task = self.loop.create_task(self._run(), name=f"raygents-mcp-{server.name}")
        self._task.add_done_callback(self._on_done)

    @property
    def session(self) -> ClientSession:
        assert self._session is not None, "the connection is not ready"
        return self._session

    @property
    def alive(self) -> bool:
        """Ready, and neither closing nor ended (a dead server is found out by a request)."""
        ready = self._ready.done() and not self._ready.cancelled() and not self._ready.exception()
        return ready and not self._task.done() and not self._stop.is_set()

    async def ready(self) -> None:
        """Wait for the handshake; raise what made it fail, after the owner task ended."""
        try:
            await asyncio.shield(self._ready)
        except asyncio.CancelledError:
            await self.close()
            raise

    async def close(self) -> None:
        """Leave the session and the transport, and wait until they are gone."""
        self._stop.set()
        if not self._ready.done():
            self._task.cancel()  # still starting: do not wait for the handshake
        await asyncio.wait({self._task})  # neither raises the task's outcome nor cancels it

    async def _run(self) -> None:
        import anyio
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._server._open(stack)
                session = await stack.enter_async_context(ClientSession(read, write))
                try:
                    with anyio.fail_after(_CONNECT_TIMEOUT_S):
                        await session.initialize()
                except TimeoutError:
                    limit = f"{_CONNECT_TIMEOUT_S:g}s"
                    raise TimeoutError(f"no answer to the MCP handshake within {limit}") from None
                self._session = session
                self._ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            else:
                logger.info("MCP server %r: connection ended: %s", self._server.name, exc)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        # Also runs for a task cancelled before it started, which never entered _run's body.
        if not self._ready.done():
            self._ready.set_exception(ConnectionError("closed while connecting"))


async def _list_all_tools(session: ClientSession) -> list[MCPToolInfo]:
    """Page through ``tools/list`` until the server stops returning a cursor."""
    from mcp.types import PaginatedRequestParams

    tools: list[MCPToolInfo] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        params = PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
        if cursor in seen:
            raise RuntimeError(f"the server repeated the tools/list cursor {cursor!r}")
        seen.add(cursor)


def _to_tool_result(result: CallToolResult) -> ToolResult:
    """Text parts joined with newlines; without text, the structured content as JSON."""
    from mcp.types import TextContent

    texts = [part.text for part in result.content if isinstance(part, TextContent)]
    if texts:
        content = "\n".join(texts)
    elif result.structured_content is not None:
        content = json.dumps(result.structured_content, ensure_ascii=False)
    else:
        content = ""
    return ToolResult(content, is_error=bool(result.is_error))


def _is_disconnect(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection or the server process is gone."""
    import anyio
    from mcp import MCPError
    from mcp.types import CONNECTION_CLOSED, INVALID_REQUEST

    if isinstance(exc, MCPError):
        if exc.code == CONNECTION_CLOSED:
            return True
        # A restarted streamable-HTTP server answers 404 to the old session id, which the SDK
        # reports as "Session terminated" or passes on as the server's own error ("Session
        # not found" from the Python SDK with -32600, the TypeScript SDK's with -32001).
        return exc.code in (INVALID_REQUEST, _SESSION_NOT_FOUND) and "session" in str(exc).lower()
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_disconnect(e) for e in exc.exceptions)
    closed = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)
    return isinstance(exc, closed)


def _describe(exc: BaseException) -> str:
    """A one-line message, looking inside the exception groups that anyio task groups raise."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return str(exc) or type(exc).__name__
