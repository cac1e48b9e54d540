"""What a tool task runs in its worker (``raygents.runtime.worker.worker``), called in this
process."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

import raygents as rg
from raygents.runtime.link import wire
from raygents.runtime.worker.tasks import task_body
from raygents.runtime.worker.worker import TaskReport

CTX = rg.ToolContext("run-1", "call-1", "t", "agent")


def _run(tool: rg.Tool, payload: Any) -> TaskReport:
    report: TaskReport = wire.loads(task_body(tool)(wire.dumps((CTX, payload))))
    assert report.pid == os.getpid() and report.seconds >= 0
    return report


@rg.tool
def double(i: int) -> dict[str, int]:
    return {"i": i * 2}


@rg.tool
async def later(ctx: rg.ToolContext, word: str) -> str:
    await asyncio.sleep(0)
    return f"{word} for {ctx.idempotency_key}"


@rg.tool
def fails(i: int) -> str:
    raise KeyError(i)


@rg.tool
def opaque() -> object:
    return object()


class Upper(rg.Tool):
    name = "upper"

    async def execute(self, ctx: rg.ToolContext, arguments: str) -> rg.ToolResult:
        return rg.ToolResult(arguments.upper(), is_error="!" in arguments)


class Wrong(rg.Tool):
    name = "wrong"

    async def execute(self, ctx: rg.ToolContext, arguments: str) -> rg.ToolResult:
        return "text"  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("tool", "payload", "content", "is_error"),
    [
        (double, {"i": 4}, '{"i": 8}', False),
        (later, {"word": "hi"}, "hi for run-1:call-1", False),
        (fails, {"i": 3}, 'Error: cannot execute tool "fails": KeyError: 3', True),
        (opaque, {}, "Error: tool returned a value that is not JSON: object is not", True),
        (Upper(), '{"a": 1}', '{"A": 1}', False),
        (Upper(), "!", "!", True),
        (Wrong(), "{}", 'Error: cannot execute tool "wrong": execute() returned str, not', True),
    ],
)
def test_a_task_body_reports_the_result_text(
    tool: rg.Tool, payload: Any, content: str, is_error: bool
) -> None:
    report = _run(tool, payload)
    assert report.content.startswith(content) and report.is_error is is_error


def test_a_function_tool_task_gets_checked_keyword_arguments() -> None:
    """The agent actor parses the arguments (:meth:`FunctionTool.parse_arguments`); the task
    calls the function with them as they are."""
    kwargs = double.parse_arguments('{"i": "5"}')
    assert kwargs == {"i": 5}
    assert _run(double, kwargs).content == '{"i": 10}'
    invalid = double.parse_arguments('{"i": "five"}')
    assert isinstance(invalid, rg.ToolResult) and invalid.is_error
    assert invalid.content.startswith('Invalid parameters for tool "double"')


@rg.tool
def power(base: int, exponent: int = 2, /) -> int:
    return int(base**exponent)


def test_a_function_tool_task_passes_positional_only_arguments_by_position() -> None:
    kwargs = power.parse_arguments('{"base": 3, "exponent": null}')
    assert kwargs == {"base": 3, "exponent": 2}
    report = _run(power, kwargs)
    assert (report.content, report.is_error) == ("9", False)
