"""Tool calls as Ray tasks: one remote function per tool, named ``tool:<name>``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import ray
import ray.exceptions

from raygents.agents.tools import FunctionTool, Tool, ToolContext, ToolResult, to_tool_result
from raygents.core.messages import Usage
from raygents.errors import MAX_PAYLOAD_BYTES, PayloadTooLarge
from raygents.runtime.link import wire
from raygents.runtime.worker.placement import demand, unplaceable
from raygents.runtime.worker.worker import (
    TaskReport,
    describe,
    error_text,
    function_task,
    tool_task,
)
from raygents.telemetry import tracing

__all__ = [
    "StepResult",
    "remote_tool",
    "run_tool",
    "submit_tool",
    "task_body",
    "task_options",
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
    """The child run's :class:`~raygents.core.envelope.Outcome` when it suspended or waits."""
    wrote: bool = False
    """A tool task wrote to the run context: ``context`` is its copy as the call left it."""
    context: Any = None
    writes: list[Any] | None = None
    """The call's writes to the run context as plain data (see
    :func:`~raygents.core.contextdata.diff`), applied when its batch ends."""
    lost: bool = False
    """The task of an ``on_recovery="ask"`` call was lost (its worker or node died): the call
    may or may not have had its effect, and is in doubt."""


_LOST = (
    ray.exceptions.WorkerCrashedError,
    ray.exceptions.NodeDiedError,
    ray.exceptions.ObjectLostError,
)
"""How a tool task that may have run is lost (its worker or node died, or its result)."""


def tool_error(name: str, error: object) -> ToolResult:
    """The error result a model sees when a tool call fails."""
    return ToolResult(error_text(name, error), is_error=True)


def _calls_function(tool: Tool) -> TypeGuard[FunctionTool]:
    """Whether a task of ``tool`` calls its function with arguments checked before (a
    :class:`FunctionTool` whose ``execute`` is not overridden)."""
    return isinstance(tool, FunctionTool) and type(tool).execute is FunctionTool.execute


def remote_tool(tool: Tool) -> Any:
    """A Ray remote function that runs ``tool``, with its resources and a readable name.

    It takes the call packed by :func:`submit_tool` and returns its
    :class:`~raygents.runtime.worker.worker.TaskReport` packed the same way.
    """
    return ray.remote(task_body(tool)).options(**task_options(tool))


def task_options(tool: Tool) -> dict[str, Any]:
    """The Ray options of ``tool``'s tasks: its name, resources and retries."""
    options: dict[str, Any] = {"name": f"tool:{tool.name}"}
    if tool.num_cpus is not None:
        options["num_cpus"] = tool.num_cpus
    if tool.num_gpus is not None:
        options["num_gpus"] = tool.num_gpus
    if tool.resources:
        options["resources"] = dict(tool.resources)
    if tool.max_retries is not None:
        options["max_retries"] = tool.max_retries
    elif tool.on_recovery == "ask":  # (a retry would run a call that may have had its effect)
        options["max_retries"] = 0
    return options


def task_body(tool: Tool) -> Any:
    """The function a task of ``tool`` runs in its worker (:mod:`raygents.runtime.worker.worker`).

    A result over ``MAX_PAYLOAD_BYTES["tool result"]`` is replaced, in the worker, by an
    error result naming its size and the limit: it never goes into Ray's object store."""
    if _calls_function(tool):
        body = function_task(tool.name, tool.fn, tool.takes_context, tool.positional)
    else:
        body = tool_task(tool)
    return _capped(body, tool.name, MAX_PAYLOAD_BYTES["tool result"])


def _capped(body: Callable[[bytes], bytes], name: str, limit: int) -> Callable[[bytes], bytes]:
    """``body``, with a result over ``limit`` bytes replaced by an error report.

    A closure, so that cloudpickle sends it by value: the worker imports only what it
    names (the worker, wire and errors modules), not this module and the model classes."""

    def run_tool(blob: bytes) -> bytes:
        packed = body(blob)
        if len(packed) <= limit:  # the packed report holds the text and a little more
            return packed
        report: TaskReport = wire.loads(packed)
        size = PayloadTooLarge.size_of(report.content)
        if size <= limit:
            return packed
        del packed
        error = PayloadTooLarge(kind="tool result", size=size, limit=limit)
        text = error_text(name, error)
        return wire.dumps(TaskReport(text, True, report.seconds, report.pid))

    run_tool.__name__ = body.__name__
    run_tool.__qualname__ = body.__qualname__
    return run_tool


def _checked(name: str, result: ToolResult) -> ToolResult:
    """``result``, or an error result if it is over the tool result cap."""
    try:
        PayloadTooLarge.check("tool result", result.content)
    except PayloadTooLarge as error:
        return tool_error(name, error)
    return result


async def run_tool(
    tool: Tool, ctx: ToolContext, arguments: str, cache: dict[str, Any]
) -> StepResult:
    """Run one tool call: as a Ray task (``cache`` keeps one remote function per tool), or in
    this process for ``remote=False`` tools. Failures become error results.

    A function tool's arguments are checked here, before any task: the task gets them as
    keyword arguments, and invalid ones never leave this process."""
    if not tool.remote:
        try:
            result = await tool.execute(ctx, arguments)
        except Exception as exc:
            return StepResult(tool_error(tool.name, describe(exc)))
        return StepResult(_checked(tool.name, to_tool_result(result)))
    payload: Any = arguments
    if _calls_function(tool):
        payload = tool.parse_arguments(arguments)
        if isinstance(payload, ToolResult):
            return StepResult(payload)
    task = cache.get(tool.name)
    if task is None:
        task = cache[tool.name] = remote_tool(tool)
    return await _run_task(tool, submit_tool(task, ctx, payload))


async def _run_task(tool: Tool, ref: Any) -> StepResult:
    """Wait for the task of a call (``ref``), which never outlives the wait: a call no node
    can hold, one past its timeout and one of a cancelled run cancel it. Failures become
    error results."""
    wanted = demand(tool)
    try:
        if wanted and tool.timeout_s is None:  # (with one, it waits that long for a node)
            why = await unplaceable(wanted)
            if why is not None:
                ray.cancel(ref)
                return StepResult(tool_error(tool.name, f"it cannot run: {why}"))
        blob = await asyncio.wait_for(_await(ref), tool.timeout_s)
    except asyncio.CancelledError:  # (the run was cancelled: so is its task)
        cancel = asyncio.ensure_future(_cancel_task(ref))
        _cancelling.add(cancel)
        cancel.add_done_callback(_cancelling.discard)
        raise
    except asyncio.TimeoutError:
        ray.cancel(ref)
        why = await unplaceable(wanted) if wanted else None
        waited = f"timed out after {tool.timeout_s} s"
        return StepResult(tool_error(tool.name, waited if why is None else f"{waited}: {why}"))
    except _LOST as exc:
        error = "the worker process running it crashed (no retries left)"
        if not isinstance(exc, ray.exceptions.WorkerCrashedError):
            error = f"its task was lost: {type(exc).__name__}"
        return StepResult(tool_error(tool.name, error), lost=tool.on_recovery == "ask")
    except ray.exceptions.RayError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        return StepResult(tool_error(tool.name, f"{type(exc).__name__}: {first_line}"))
    report: TaskReport = wire.loads(blob)
    result = ToolResult(report.content, is_error=report.is_error, parts=report.parts)
    data = {"worker_pid": report.pid, "run_s": report.seconds}
    return StepResult(result, data=data, wrote=report.wrote, context=report.context)


def submit_tool(task: Any, ctx: ToolContext, payload: Any) -> Any:
    """Submit one call to a :func:`remote_tool` function; its ``ObjectRef`` (of the packed
    :class:`~raygents.runtime.worker.worker.TaskReport`). ``payload`` is a function tool's checked
    keyword arguments (:meth:`~raygents.agents.tools.FunctionTool.parse_arguments`), or the model's
    JSON arguments for a custom tool's ``execute``. The current span (the call's
    ``execute_tool`` span, when tracing is on) goes with it, for the task's span to join."""
    parent = tracing.traceparent()
    return task.remote(wire.dumps((ctx, payload) if parent is None else (ctx, payload, parent)))


async def _await(ref: Any) -> Any:
    return await ref


_CANCEL_GRACE_S = 5.0
_cancelling: set[asyncio.Future[None]] = set()
"""Cancels of tool tasks under way (the event loop keeps only weak references to tasks)."""


async def _cancel_task(ref: Any) -> None:
    """Cancel a tool's task: a ``KeyboardInterrupt`` in the tool first, and its worker killed
    if it still runs ``_CANCEL_GRACE_S`` later (the interrupt does not always arrive, and a
    tool may catch it)."""
    ray.cancel(ref)
    try:
        await asyncio.wait_for(_await(ref), _CANCEL_GRACE_S)
    except asyncio.TimeoutError:
        ray.cancel(ref, force=True)
    except Exception:  # (it stopped: TaskCancelledError, or it failed)
        return
