"""MCP servers as tool sources: one kept connection per server, its tools run in the actor.

An :class:`MCPServer` travels inside an agent to the agent's actor as configuration only; the
actor connects on first use and keeps the connection until :meth:`MCPServer.close`. Each MCP
tool becomes an :class:`MCPTool` (``remote = False``): a call is one request on that connection,
sent from the actor's event loop, so many runs can call one server concurrently.

A server is not trusted: a call it leaves unanswered ends after the server's
``tool_timeout_s`` (:data:`MCP_TOOL_TIMEOUT_S` by default) as an error result; its tool list
must come within :data:`_LIST_TIMEOUT_S` and in at most
:data:`~raygents.integrations.mcp_connection.MAX_LIST_PAGES` pages; a tool whose input schema
cannot be used
is left out with a warning; and a tool name that model APIs refuse is offered to the model under
a name derived from it (see :func:`tool_name`).

The connection itself (its owner task, time limits, tool listing) is in
:mod:`raygents.integrations.mcp_connection`. Only these two modules import the ``mcp`` SDK (version
2), and
only when a server first connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from raygents.agents.checks import parameters_problem, valid_tool_name
from raygents.agents.tools import Tool, ToolContext, ToolResult
from raygents.errors import RaygentsError, UserError, excerpt
from raygents.integrations.mcp_connection import (
    Connection,
    Late,
    Streams,
    describe,
    is_disconnect,
    list_all_tools,
    require_mcp,
    to_tool_result,
    within,
)

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult
    from mcp.types import Tool as MCPToolInfo

__all__ = [
    "MCP_TOOL_TIMEOUT_S",
    "MCPServer",
    "MCPServerStdio",
    "MCPServerStreamableHTTP",
    "MCPTool",
    "tool_name",
]

T = TypeVar("T")
logger = logging.getLogger(__name__)

_HTTP_TIMEOUT_S = 30.0
_HTTP_READ_TIMEOUT_S = 300.0
"""A streamable-HTTP response may be an event stream that stays quiet for a while."""
MCP_TOOL_TIMEOUT_S = 300.0
"""How long an MCP tool call may take when its server sets no ``tool_timeout_s``."""
_LIST_TIMEOUT_S = 60.0
"""How long listing a server's tools may take, all pages together."""


class MCPServer:
    """An MCP server whose tools an agent can call.

    Public attributes are configuration and are all that pickling keeps; the connection,
    the tool cache and the locks are rebuilt lazily on the other side. Use the subclasses
    :class:`MCPServerStdio` and :class:`MCPServerStreamableHTTP`.

    Attributes:
        name: the server's name, for messages and for telling servers apart.
        tool_timeout_s: after this many seconds a call of one of its tools ends as an error
            result (the message a remote tool's ``timeout_s`` gives).
    """

    def __init__(self, name: str, *, tool_timeout_s: float = MCP_TOOL_TIMEOUT_S) -> None:
        if not isinstance(name, str) or not name:
            raise UserError(f"an MCP server needs a non-empty name, got {name!r}")
        if (
            isinstance(tool_timeout_s, bool)
            or not isinstance(tool_timeout_s, (int, float))
            or not math.isfinite(tool_timeout_s)
            or tool_timeout_s <= 0
        ):
            raise UserError(
                f"MCP server {name!r}: tool_timeout_s must be a positive number of seconds, "
                f"got {tool_timeout_s!r}"
            )
        self.name = name
        self.tool_timeout_s = tool_timeout_s
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._conn: Connection | None = None
        self._tools: list[Tool] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connect_lock = asyncio.Lock()
        self._list_lock = asyncio.Lock()
        self._closes = 0

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.tool_timeout_s = MCP_TOOL_TIMEOUT_S  # (pickled before the option existed)
        self.__dict__.update(state)
        self._reset_runtime()

    async def list_tools(self) -> list[Tool]:
        """The server's tools, connecting first if needed.

        The list is fetched page by page on the first call and cached until
        :meth:`reset_cache`; each call returns a new list of the same :class:`MCPTool` objects.
        Tools whose input schema cannot be used (see
        :func:`~raygents.agents.checks.parameters_problem`) or that have no name are left out, with
        a
        warning in this module's log; a name that model APIs refuse is mapped
        (:func:`tool_name`).

        Raises:
            UserError: the ``mcp`` package is missing.
            RaygentsError: the server could not be reached or could not list its tools: no
                answer within a minute, a cursor sent twice, more than 100 pages.
        """
        self._check_loop()
        require_mcp()
        if self._tools is None:
            async with self._list_lock:
                if self._tools is None:
                    try:
                        infos = await within(self._request(list_all_tools), _LIST_TIMEOUT_S)
                    except Exception as exc:
                        if isinstance(exc, Late):
                            exc = TimeoutError(f"no answer to tools/list within {exc}s")
                        raise RaygentsError(
                            f'cannot list the tools of MCP server "{self.name}": '
                            f"{excerpt(describe(exc), 1000)}"
                        ) from exc
                    self._tools = _usable_tools(self, infos)
        return list(self._tools)

    def reset_cache(self) -> None:
        """Forget the cached tool list; the next :meth:`list_tools` asks the server again."""
        self._tools = None

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        timeout_s: float | None = None,
        shown_as: str | None = None,
    ) -> ToolResult:
        """Call tool ``name`` (the server's name for it) on the server; every failure becomes
        an error result.

        A call that fails because the connection or the server process is gone connects again
        and is sent once more, so a tool may run twice if the server died while running it.
        A call that has no answer after ``timeout_s`` seconds (the server's ``tool_timeout_s``
        by default) ends with ``timed out after <timeout_s> s``; the server is told to cancel
        it.

        Args:
            name: the tool's name on the server.
            arguments: the call's arguments.
            timeout_s: how long to wait for the answer.
            shown_as: the tool's name in error results (the name the model knows it by).
        """
        self._check_loop()
        args = dict(arguments) if arguments is not None else None
        limit = timeout_s if timeout_s is not None else self.tool_timeout_s
        shown = name if shown_as is None else shown_as

        async def call(session: ClientSession) -> CallToolResult:
            return await session.call_tool(name, args)

        try:
            result = await within(self._request(call), limit)
        except Late:
            message = f'Error: cannot execute tool "{shown}": timed out after {limit} s'
            return ToolResult(message, is_error=True)
        except Exception as exc:
            reason = excerpt(describe(exc), 1000)
            return ToolResult(f'Error: cannot execute tool "{shown}": {reason}', is_error=True)
        return to_tool_result(result)

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
            if not is_disconnect(exc) or closes != self._closes:
                raise
            logger.info("MCP server %r: connection lost (%s); reconnecting", self.name, exc)
        await self._discard(conn)
        conn = await self._connection()
        return await op(conn.session)

    async def _connection(self) -> Connection:
        conn = self._conn
        if conn is not None and conn.alive:
            return conn
        async with self._connect_lock:
            if self._conn is not None and self._conn.alive:
                return self._conn
            if self._conn is not None:
                await self._conn.close()
            # Published before the handshake, so that close() can stop it midway.
            self._conn = conn = Connection(self)
            try:
                await conn.ready()
            except BaseException:
                if self._conn is conn:
                    self._conn = None
                raise
            return conn

    async def _discard(self, conn: Connection) -> None:
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

    async def _open(self, stack: contextlib.AsyncExitStack) -> Streams:
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
        tool_timeout_s: how long a call of one of its tools may take (default
            :data:`MCP_TOOL_TIMEOUT_S`, 300 s); past it the call is an error result.
    """

    def __init__(
        self,
        name: str,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        *,
        tool_timeout_s: float = MCP_TOOL_TIMEOUT_S,
    ) -> None:
        super().__init__(name, tool_timeout_s=tool_timeout_s)
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

    async def _open(self, stack: contextlib.AsyncExitStack) -> Streams:
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
        tool_timeout_s: how long a call of one of its tools may take (default
            :data:`MCP_TOOL_TIMEOUT_S`, 300 s); past it the call is an error result.
    """

    def __init__(
        self,
        name: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        tool_timeout_s: float = MCP_TOOL_TIMEOUT_S,
    ) -> None:
        super().__init__(name, tool_timeout_s=tool_timeout_s)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise UserError(f"MCP server {name!r} needs an http(s) URL, got {url!r}")
        self.url = url
        self.headers = dict(headers) if headers is not None else None

    def __repr__(self) -> str:
        return f"MCPServerStreamableHTTP({self.name!r}, url={self.url!r})"

    async def _open(self, stack: contextlib.AsyncExitStack) -> Streams:
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
        mcp_name: the tool's name on the server; ``name`` is what the model sees
            (:func:`tool_name`).
    """

    remote = False

    def __init__(
        self,
        server: MCPServer,
        name: str,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        *,
        mcp_name: str | None = None,
    ) -> None:
        self.server = server
        self.name = name
        self.mcp_name = name if mcp_name is None else mcp_name
        self.description = description
        self.parameters = parameters or {"type": "object", "properties": {}}
        self.timeout_s = server.tool_timeout_s

    @classmethod
    def from_info(cls, server: MCPServer, info: MCPToolInfo) -> MCPTool:
        """Build the tool from the server's ``tools/list`` entry, named by :func:`tool_name`
        (its own name when that is empty)."""
        schema = dict(info.input_schema) if info.input_schema else None
        name = tool_name(info.name) or info.name
        return cls(server, name, info.description or "", schema, mcp_name=info.name)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("mcp_name", self.name)  # (pickled before the mapping)

    async def execute(self, ctx: ToolContext, arguments: str) -> ToolResult:
        """Parse the model's JSON ``arguments`` and call the tool on the server, waiting at
        most ``timeout_s`` (the server's ``tool_timeout_s``)."""
        args: dict[str, Any] | None = None
        if arguments.strip():
            try:
                parsed = json.loads(arguments)
            except (json.JSONDecodeError, RecursionError) as exc:
                reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
                return ToolResult(f"Invalid arguments: {excerpt(reason)}", is_error=True)
            if not isinstance(parsed, dict):
                kind = type(parsed).__name__
                message = f"Invalid arguments: expected a JSON object, got {kind}"
                return ToolResult(message, is_error=True)
            args = parsed
        timeout = self.timeout_s if self.timeout_s is not None else self.server.tool_timeout_s
        return await self.server.call_tool(
            self.mcp_name, args, timeout_s=timeout, shown_as=self.name
        )


def tool_name(mcp_name: str) -> str | None:
    """The name the model sees for the MCP tool named ``mcp_name``; None for an empty name.

    A name that model APIs accept (1-64 letters, digits, ``_`` or ``-``) stays as it is. Any
    other (MCP allows dots, slashes, spaces, 128 characters) becomes its allowed characters,
    the others as ``_``, cut to 55, then ``_`` and 8 hex digits of its SHA-256: a function of
    the name alone, so a tool keeps its name in every listing, process and resumed run, and
    two names that differ only in refused characters stay apart. A server's name is mapped
    rather than refused so that its tool stays usable; a call goes out under ``mcp_name``.
    """
    if valid_tool_name(mcp_name):
        return mcp_name
    if not mcp_name:
        return None
    digest = hashlib.sha256(mcp_name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', mcp_name)[:55]}_{digest}"


def _usable_tools(server: MCPServer, infos: Sequence[MCPToolInfo]) -> list[Tool]:
    """The server's tools that can be offered to a model, in its order, with a warning for
    each one left out or renamed. Names that need no mapping are taken first, so that a mapped
    name never takes the place of a name the server gave."""
    built: dict[int, Tool] = {}
    taken: set[str] = set()
    for i in sorted(range(len(infos)), key=lambda i: not valid_tool_name(infos[i].name)):
        info = infos[i]
        shown = excerpt(info.name, 80)
        name = tool_name(info.name)
        schema = dict(info.input_schema) if info.input_schema else None
        problem = parameters_problem(schema) if schema is not None else None
        if name is None:
            problem = "it has no name"
        elif problem is not None:
            problem = f"its input schema cannot be used: {problem}"
        elif name in taken:
            problem = f"another of its tools has the name {name!r}"
        if problem is not None:
            logger.warning("MCP server %r: tool %r left out: %s", server.name, shown, problem)
            continue
        assert name is not None
        if name != info.name:
            logger.warning(
                "MCP server %r: tool %r is offered to the model as %r (model APIs accept "
                "1-64 letters, digits, '_' and '-')",
                server.name,
                shown,
                name,
            )
        taken.add(name)
        tool = MCPTool(server, name, info.description or "", schema, mcp_name=info.name)
        tool._checked_parameters = tool.parameters  # (just checked)
        built[i] = tool
    return [built[i] for i in sorted(built)]
