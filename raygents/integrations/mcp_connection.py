"""One kept MCP session (its owner task, requests with time limits, tool listing) and what its
answers and errors mean to raygents; :mod:`raygents.integrations.mcp` builds servers and tools on
it.

Only this module and :mod:`raygents.integrations.mcp` import the ``mcp`` SDK (version 2), and only
when a
server first connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from raygents.agents.tools import ToolResult
from raygents.errors import UserError, excerpt

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult
    from mcp.types import Tool as MCPToolInfo

__all__ = [
    "CONNECT_TIMEOUT_S",
    "MAX_LIST_PAGES",
    "Connection",
    "Late",
    "Streams",
    "describe",
    "is_disconnect",
    "list_all_tools",
    "require_mcp",
    "to_tool_result",
    "within",
]

T = TypeVar("T")
Streams = tuple[Any, Any]
"""A transport's read and write streams."""

logger = logging.getLogger("raygents.mcp")

CONNECT_TIMEOUT_S = 60.0
"""How long a server may take to answer the MCP handshake; ``npx``/``uvx`` may first download."""
MAX_LIST_PAGES = 100
"""A server that sends more ``tools/list`` pages than this is taken to page forever."""
_SESSION_NOT_FOUND = -32001


class Server(Protocol):
    """What a connection needs of its server: a name for messages, and its transport."""

    name: str

    async def _open(self, stack: contextlib.AsyncExitStack) -> Streams: ...


def require_mcp() -> None:
    try:
        import mcp.client.streamable_http  # noqa: F401
    except ImportError as exc:
        raise UserError(
            f"MCP servers need the MCP SDK (mcp>=2.3), which cannot be imported ({exc}): "
            "pip install 'raygents[mcp]'"
        ) from exc


class Late(Exception):
    """An awaitable had no outcome within its time limit (the limit is the message)."""


async def within(aw: Awaitable[T], limit: float) -> T:
    """``await aw``, or raise :class:`Late` after ``limit`` seconds and cancel it.

    Unlike :func:`asyncio.wait_for`, a ``TimeoutError`` that ``aw`` raises itself stays what
    it is, and a late awaitable is not waited for once cancelled: telling a hung server to
    cancel must not hang too. Cancelling the caller cancels ``aw``.
    """
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=limit)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_forget)
        raise Late(f"{limit:g}")
    return task.result()


def _forget(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug("a late MCP request ended with %r", task.exception())


class Connection:
    """One MCP session, entered and exited by its own asyncio task.

    The SDK's transports and session are anyio task groups, whose cancel scopes must be
    entered and left by one task. So a dedicated owner task enters them, publishes the
    session, and waits to be told to stop. Requests go straight onto the session from any task
    of the same loop: the session matches responses to requests by id and wakes every waiter
    with "Connection closed" when the transport ends, whether by :meth:`close`, a crashed
    transport, or a dead server process.
    """

    def __init__(self, server: Server) -> None:
        require_mcp()
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
                    with anyio.fail_after(CONNECT_TIMEOUT_S):
                        await session.initialize()
                except TimeoutError:
                    limit = f"{CONNECT_TIMEOUT_S:g}s"
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


async def list_all_tools(session: ClientSession) -> list[MCPToolInfo]:
    """Page through ``tools/list`` until the server stops returning a cursor; at most
    :data:`MAX_LIST_PAGES` pages, each cursor once."""
    from mcp.types import PaginatedRequestParams

    tools: list[MCPToolInfo] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_LIST_PAGES):
        params = PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
        if cursor in seen:
            raise RuntimeError(f"the server repeated the tools/list cursor {excerpt(cursor, 80)!r}")
        seen.add(cursor)
    raise RuntimeError(
        f"the server sent more than {MAX_LIST_PAGES} pages of tools/list, and a cursor for "
        "one more; it seems to page forever"
    )


def to_tool_result(result: CallToolResult) -> ToolResult:
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


def is_disconnect(exc: BaseException) -> bool:
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
        return any(is_disconnect(e) for e in exc.exceptions)
    closed = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)
    return isinstance(exc, closed)


def describe(exc: BaseException) -> str:
    """A one-line message, looking inside the exception groups that anyio task groups raise."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    return str(exc) or type(exc).__name__
