"""What a tool task runs in its Ray worker process.

A fresh worker loads this module, named by the task's function, to run its first call. A
function tool's call arrives with its arguments already checked by the agent actor, as keyword
arguments, so the worker loads no more than this module, :mod:`raygents.core.toolcall`,
:mod:`raygents.runtime.link.wire`, :mod:`raygents.telemetry.tracing` and the tool's function: none
of
raygents' model classes, and no argument model to build (nor OpenTelemetry, unless tracing is
on). A custom :class:`~raygents.agents.tools.Tool` runs its ``execute`` here, loaded with its class
and
what that imports. A traced call's task runs in a span under the call's ``execute_tool`` span.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from raygents.core.toolcall import result_parts, result_text, split_arguments
from raygents.runtime.link import wire
from raygents.telemetry import tracing

__all__ = ["TaskReport", "describe", "error_text", "function_task", "tool_task"]

Call = Callable[[Any, Any], tuple[str, bool, tuple[Any, ...]]]
"""One call of a tool: (context, payload) to the result's text, whether it is an error, and
its content parts (images, files; ``()`` for text only)."""


@dataclass(frozen=True)
class TaskReport:
    """What a tool task sends back: its result, and where and how long it ran."""

    content: str
    is_error: bool
    seconds: float
    pid: int
    context: Any = None
    """The run context as the call left it, when the call wrote to it (``wrote``)."""
    wrote: bool = False
    parts: tuple[Any, ...] = ()
    """The result's content parts, where it has others than text (an image, say)."""


def error_text(name: str, error: object) -> str:
    """What a model sees when a call of tool ``name`` failed."""
    return f'Error: cannot execute tool "{name}": {error}'


def describe(exc: BaseException) -> str:
    """An exception as one line of an error result."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def function_task(
    name: str, fn: Callable[..., Any], takes_context: bool, positional: tuple[str, ...] = ()
) -> Callable[..., bytes]:
    """A task that calls ``fn`` with the call's context (when it takes one) and its checked
    arguments (those named in ``positional``, its positional-only parameters, by position;
    the others by keyword), sync or async."""

    def call(ctx: Any, kwargs: dict[str, Any]) -> tuple[str, bool, tuple[Any, ...]]:
        args, keywords = split_arguments(kwargs, positional)
        out = fn(ctx, *args, **keywords) if takes_context else fn(*args, **keywords)
        if inspect.isawaitable(out):
            out = asyncio.run(_awaited(out))
        return (*result_text(out), result_parts(out))

    return _task(name, call)


def tool_task(tool: Any) -> Callable[..., bytes]:
    """A task that runs a custom tool's ``execute`` with the model's JSON arguments."""

    def call(ctx: Any, arguments: str) -> tuple[str, bool, tuple[Any, ...]]:
        from raygents.agents.tools import ToolResult  # loaded with the tool's class

        result = asyncio.run(tool.execute(ctx, arguments))
        if not isinstance(result, ToolResult):
            kind = type(result).__name__
            return error_text(tool.name, f"execute() returned {kind}, not ToolResult"), True, ()
        return result.content, result.is_error, tuple(result.parts)

    return _task(tool.name, call)


def _task(name: str, call: Call) -> Callable[..., bytes]:
    """The remote function's body: it takes the call packed by :mod:`raygents.runtime.link.wire`
    (the context, the payload and, when the call is traced, its span's ``traceparent``) and
    returns its :class:`TaskReport` packed the same way."""

    def run_tool(blob: bytes) -> bytes:
        started = time.perf_counter()
        ctx, payload, *parent = wire.loads(blob)
        before = None if ctx.context is None else wire.dumps(ctx.context)
        with tracing.worker_span(parent[0] if parent else None, name, ctx.call_id) as span:
            try:
                content, is_error, parts = call(ctx, payload)
            except Exception as exc:  # a tool's failure is the model's business, not the run's
                content, is_error, parts = error_text(name, describe(exc)), True, ()
            tracing.tool_done(span, is_error, content)
        seconds = time.perf_counter() - started
        report = TaskReport(content, is_error, seconds, os.getpid(), parts=parts)
        if before is not None and _changed(ctx.context, before):  # the agent actor applies it
            wrote = TaskReport(content, is_error, seconds, report.pid, ctx.context, True, parts)
            try:
                return wire.dumps(wrote)
            except Exception as exc:
                text = f"it left the run context unpicklable: {describe(exc)}"
                report = TaskReport(error_text(name, text), True, seconds, report.pid)
        return wire.dumps(report)

    run_tool.__name__ = run_tool.__qualname__ = f"tool:{name}"
    return run_tool


def _changed(context: Any, before: bytes) -> bool:
    """Whether the call wrote to the run context: its pickle differs from the one taken
    before the call (one that no longer pickles counts as written)."""
    try:
        return wire.dumps(context) != before
    except Exception:
        return True


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value
