"""Tool calls as Ray tasks: one remote function per tool, named ``tool:<name>``."""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from dataclasses import dataclass
from typing import Any

import ray

from raygents.tools import FunctionTool, Tool, ToolContext, ToolResult

__all__ = ["TaskReport", "execute_tool", "remote_tool", "tool_error"]


@dataclass(frozen=True)
class TaskReport:
    """What a tool task sends back: the result and where and how long it ran."""

    result: ToolResult
    seconds: float
    pid: int


def tool_error(name: str, error: object) -> ToolResult:
    """The error result a model sees when a tool call fails."""
    return ToolResult(f'Error: cannot execute tool "{name}": {error}', is_error=True)


def execute_tool(tool: Tool, ctx: ToolContext, arguments: str) -> ToolResult:
    """Run a tool to completion in this process (a Ray worker); exceptions become results."""
    try:
        if isinstance(tool, FunctionTool) and not inspect.iscoroutinefunction(tool.fn):
            result = _run_sync(tool.execute(ctx, arguments))
        else:
            result = asyncio.run(tool.execute(ctx, arguments))
    except Exception as exc:  # a tool's failure is the model's business, not the run's
        return tool_error(tool.name, _describe(exc))
    if not isinstance(result, ToolResult):
        return tool_error(tool.name, f"execute() returned {type(result).__name__}, not ToolResult")
    return result


def _run_sync(coro: Any) -> Any:
    """Finish a coroutine that never suspends (a sync function tool) without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a synchronous tool awaited something")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def remote_tool(tool: Tool) -> Any:
    """A Ray remote function that runs ``tool``, with its resources and a readable name."""

    def run_tool(ctx: ToolContext, arguments: str) -> TaskReport:
        started = time.perf_counter()
        result = execute_tool(tool, ctx, arguments)
        return TaskReport(result, time.perf_counter() - started, os.getpid())

    options: dict[str, Any] = {"name": f"tool:{tool.name}"}
    if tool.num_cpus is not None:
        options["num_cpus"] = tool.num_cpus
    if tool.num_gpus is not None:
        options["num_gpus"] = tool.num_gpus
    if tool.resources:
        options["resources"] = dict(tool.resources)
    if tool.max_retries is not None:
        options["max_retries"] = tool.max_retries
    run_tool.__name__ = run_tool.__qualname__ = f"tool:{tool.name}"
    return ray.remote(run_tool).options(**options)
