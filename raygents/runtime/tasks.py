"""Tool calls as Ray tasks: one remote function per tool, named ``tool:<name>``."""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from dataclasses import dataclass
from typing import Any

import ray
import ray.exceptions

from raygents.messages import Usage
from raygents.runtime import wire
from raygents.tools import FunctionTool, Tool, ToolContext, ToolResult, to_tool_result

__all__ = [
    "StepResult",
    "TaskReport",
    "execute_tool",
    "remote_tool",
    "run_tool",
    "submit_tool",
    "tool_error",
]


@dataclass
class StepResult:
    """The outcome of one call of a batch, as the agent actor sees it."""

    result: ToolResult
    usage: Usage | None = None
    """Usage of an agent-as-tool child run, added to the parent's."""
    data: dict[str, Any] | None = None
    """Where and how long a tool task ran (for events)."""
    halt: Any = None
    """The child run's :class:`~raygents.envelope.Outcome` when it suspended or waits."""


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
    """A Ray remote function that runs ``tool``, with its resources and a readable name.

    It takes the call packed by :func:`submit_tool` and returns its :class:`TaskReport`
    packed the same way (:mod:`raygents.runtime.wire`).
    """

    def run_tool(call: bytes) -> bytes:
        started = time.perf_counter()
        ctx, arguments = wire.loads(call)
        result = execute_tool(tool, ctx, arguments)
        return wire.dumps(TaskReport(result, time.perf_counter() - started, os.getpid()))

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


async def run_tool(
    tool: Tool, ctx: ToolContext, arguments: str, cache: dict[str, Any]
) -> StepResult:
    """Run one tool call: as a Ray task (``cache`` keeps one remote function per tool), or in
    this process for ``remote=False`` tools. Failures become error results."""
    if not tool.remote:
        try:
            result = await tool.execute(ctx, arguments)
        except Exception as exc:
            return StepResult(tool_error(tool.name, _describe(exc)))
        return StepResult(result if isinstance(result, ToolResult) else to_tool_result(result))
    task = cache.get(tool.name)
    if task is None:
        task = cache[tool.name] = remote_tool(tool)
    ref = submit_tool(task, ctx, arguments)
    try:
        blob = await asyncio.wait_for(_await(ref), tool.timeout_s)
    except asyncio.TimeoutError:
        ray.cancel(ref)
        return StepResult(tool_error(tool.name, f"timed out after {tool.timeout_s} s"))
    except ray.exceptions.WorkerCrashedError:
        return StepResult(
            tool_error(tool.name, "the worker process running it crashed (no retries left)")
        )
    except ray.exceptions.RayError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        return StepResult(tool_error(tool.name, f"{type(exc).__name__}: {first_line}"))
    try:
        report: TaskReport = wire.loads(blob)
    except Exception as exc:  # e.g. data of a class this process cannot import
        return StepResult(tool_error(tool.name, f"cannot load its result: {_describe(exc)}"))
    return StepResult(report.result, data={"worker_pid": report.pid, "run_s": report.seconds})


def submit_tool(task: Any, ctx: ToolContext, arguments: str) -> Any:
    """Submit one call to a :func:`remote_tool` function; its ``ObjectRef`` (of the packed
    :class:`TaskReport`)."""
    return task.remote(wire.dumps((ctx, arguments)))


async def _await(ref: Any) -> Any:
    return await ref
