"""Tools against hostile input: hand-written parameters that cannot be used, names a model
API refuses, oversized or deep arguments, and calls of names that are no registered tool
(``os.system``, ``__import__``): never a dynamic lookup or import. No Ray needed."""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import http.server
import importlib
import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from ray import cloudpickle

import raygents as rg
from raygents.agents.checks import parameters_problem
from raygents.agents.tools import Tool, ToolContext, ToolResult
from raygents.core import corrections, loop
from raygents.core.envelope import RunState
from raygents.core.messages import Message, ToolSpec
from raygents.errors import ToolNotFound, UserError
from raygents.testing import call

PACKAGE = Path(rg.__file__).parent


def _deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


RECURSIVE = {
    "type": "object",
    "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
    "properties": {"child": {"$ref": "#/$defs/node"}},
}

BAD_PARAMETERS = [
    ({"type": "object", "properties": {"x": {"type": "strng"}}}, "'strng' is not valid"),
    ({"type": "object", "properties": {"x": {"pattern": "(["}}}, r"'\(\[' is not a 'regex'"),
    ({"type": "object", "patternProperties": {"([": {}}}, r"'\(\[' is not a 'regex'"),
    ({"type": "object", "properties": {"x": {"minLength": -1}}}, "less than the minimum"),
    ({"type": "object", "properties": {"x": {"$ref": "#/$defs/no"}}}, "does not resolve"),
    ({"type": "object", "properties": {"x": {"$ref": "other.json"}}}, "outside the schema"),
    ({"type": "string"}, "type is 'string', not 'object'"),
    ({"properties": {}}, "type is None, not 'object'"),
    ([{"type": "object"}], "they are a list"),
    (_deep_schema(5000), "nested too deeply"),
]


class HandWritten(Tool):
    name = "hand_written"
    description = "A tool with hand-written parameters."

    def __init__(self, parameters: Any, name: str = "hand_written") -> None:
        self.parameters = parameters
        self.name = name

    async def execute(self, ctx: ToolContext, arguments: str) -> ToolResult:
        return ToolResult(arguments)


# --- hand-written parameters ---------------------------------------------------------------


@pytest.mark.parametrize(("schema", "reason"), BAD_PARAMETERS)
def test_hand_written_parameters_that_cannot_be_used_are_refused(schema: Any, reason: str) -> None:
    with pytest.raises(UserError, match=r"tool 'hand_written' has parameters that cannot") as e:
        HandWritten(schema).spec()
    assert e.match(reason)
    assert len(str(e.value)) < 1000


@pytest.mark.parametrize(
    "schema",
    [
        RECURSIVE,
        {"type": "object", "properties": {"x": {"type": "string", "pattern": "^[a-z]+$"}}},
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "definitions": {"x": {"type": "integer"}},
            "properties": {"x": {"$ref": "#/definitions/x"}},
        },
        _deep_schema(50),
    ],
)
def test_usable_parameters_pass(schema: dict[str, Any]) -> None:
    assert parameters_problem(schema) is None
    assert HandWritten(schema).spec().parameters == schema


class Point(BaseModel):
    x: int
    y: int


def test_function_and_agent_tools_have_usable_parameters() -> None:
    @rg.tool
    def plot(points: list[Point], label: str | None = None) -> str:
        """Plot points."""
        return label or ""

    agent = rg.Agent("helper", model=rg.testing.ScriptedModel([]))
    for t in (plot, agent.as_tool()):
        assert parameters_problem(t.parameters) is None
        assert t.spec().name == t.name
    # Schemas raygents makes are not checked again (about 20 ms each), also after pickling.
    copy = cloudpickle.loads(cloudpickle.dumps(plot))
    assert copy._checked_parameters is copy.parameters


def test_parameters_are_checked_again_when_they_change() -> None:
    t = HandWritten(RECURSIVE)
    t.spec()
    t.parameters = {"type": "object", "properties": {"x": {"type": "strng"}}}
    with pytest.raises(UserError, match="strng"):
        t.spec()


def test_a_reference_to_a_url_is_never_fetched() -> None:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = b'{"type": "integer"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/schema.json"
        schema = {"type": "object", "properties": {"x": {"$ref": url}}}
        with pytest.raises(UserError, match="points outside the schema"):
            HandWritten(schema).spec()
    finally:
        server.shutdown()
        server.server_close()
    assert hits == []


@pytest.mark.parametrize("name", ["os.system", "", "a b", "../x", "n" * 65, "ü"])
def test_custom_tool_names_a_model_refuses_are_refused(name: str) -> None:
    with pytest.raises(UserError, match="is invalid: use 1-64 letters"):
        HandWritten({"type": "object"}, name=name).spec()


# --- arguments ------------------------------------------------------------------------------


def test_an_argument_error_quotes_an_excerpt_of_the_arguments() -> None:
    @rg.tool
    def total(xs: list[int]) -> int:
        """Add numbers."""
        return sum(xs)

    arguments = json.dumps({"xs": ["not a number " * 10] * 10_000})
    assert len(arguments) > 1_000_000
    result = total.parse_arguments(arguments)
    assert isinstance(result, ToolResult) and result.is_error
    assert len(result.content) < 1000
    assert result.content.startswith('Invalid parameters for tool "total": 10000 validation')
    assert result.content.endswith("more characters)")


def test_deeply_nested_arguments_are_an_error_result_not_an_exception() -> None:
    @rg.tool
    def take(x: Any) -> str:
        """Take anything."""
        return "ok"

    result = take.parse_arguments("[" * 100_000 + "]" * 100_000)
    assert isinstance(result, ToolResult) and result.is_error
    assert result.content == 'Invalid parameters for tool "take": nested too deeply'


BACKTRACKS = "^(a|aa)+$"
"""A pattern Python's ``re`` takes 20 s to fail on 41 characters (and doubling with each)."""

HOSTILE = "a" * 60 + "!"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("schema", "arguments", "refusal"),
    [
        (
            {"type": "object", "properties": {"x": {"type": "string", "pattern": BACKTRACKS}}},
            {"x": HOSTILE},
            r"/x: the value took more than 0.25 s to match the pattern '\^\(a\|aa\)\+\$'",
        ),
        (
            {"type": "object", "patternProperties": {BACKTRACKS: {"type": "integer"}}},
            {HOSTILE: 1},
            r"/: the property name 'a+\.\.\. \(21 more characters\)' took more than 0.25 s",
        ),
        (
            {  # (checked in this order: additionalProperties matches the patterns first)
                "type": "object",
                "additionalProperties": False,
                "patternProperties": {BACKTRACKS: {}},
            },
            {"x": 1, HOSTILE: 1},
            r"/: the property name 'a+\.\.\. \(21 more characters\)' took more than 0.25 s "
            "to match the patterns of patternProperties",
        ),
        (  # every string of an array: the budget is the whole check's, not each match's
            {
                "type": "object",
                "properties": {
                    "xs": {"type": "array", "items": {"type": "string", "pattern": BACKTRACKS}}
                },
            },
            {"xs": [HOSTILE] * 200},
            r"/xs/0: the value took more than 0.25 s",
        ),
    ],
)
def test_a_pattern_that_backtracks_refuses_the_argument_in_bounded_time(
    schema: dict[str, Any], arguments: dict[str, Any], refusal: str
) -> None:
    assert parameters_problem(schema) is None
    spec = HandWritten(schema).spec()
    error = corrections.argument_error(spec, json.dumps(arguments))
    assert error is not None and re.search(refusal, error), error
    assert error.count("took more than") == 1, error


def test_patterns_still_check_arguments() -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"type": "string", "pattern": "^[a-z]+$"}},
        "patternProperties": {"^n_": {"type": "integer"}},
        "additionalProperties": False,
    }
    spec = HandWritten(schema).spec()
    assert corrections.argument_error(spec, json.dumps({"x": "abc", "n_1": 2})) is None
    assert corrections.argument_error(spec, json.dumps({"x": "ABC"})) == (
        "Invalid parameters for tool \"hand_written\": /x: 'ABC' does not match '^[a-z]+$'"
    )
    assert corrections.argument_error(spec, json.dumps({"n_1": "two"})) == (
        "Invalid parameters for tool \"hand_written\": /n_1: 'two' is not of type 'integer'"
    )
    assert corrections.argument_error(spec, json.dumps({"y": 1, "z": 2})) == (
        'Invalid parameters for tool "hand_written": /: additional properties are not allowed '
        "('y', 'z' unexpected)"
    )


def test_parameters_whose_patterns_cannot_be_matched_in_bounded_time_are_refused() -> None:
    schema = {
        "type": "object",
        "patternProperties": {"^n_": {"type": "integer"}},
        "unevaluatedProperties": False,
    }
    with pytest.raises(UserError, match="unevaluatedProperties next to patternProperties"):
        HandWritten(schema).spec()


def _state() -> RunState:
    return RunState(run_id="r", agent_name="a", messages=(Message("user", "x"),), input_len=1)


def test_planning_calls_of_checked_tools_never_raises() -> None:
    """Whatever the arguments, a tool whose spec was accepted gives a plan, never an exception
    (a recursive schema with arguments nested past the recursion limit included)."""
    tools = [HandWritten(RECURSIVE), HandWritten(BAD_PARAMETERS[0][0])]
    specs = []
    for t in tools:
        with contextlib.suppress(UserError):
            specs.append(t.spec())
    assert [s.parameters for s in specs] == [RECURSIVE]
    view = loop.AgentView(name="a", tools=tuple(specs))
    deep = "{}"
    for _ in range(3000):
        deep = '{"child": ' + deep + "}"
    for arguments in (deep, '{"child": ' * 100_000, json.dumps({"child": "x" * 1_500_000})):
        plan = loop.plan_tools(_state(), view, [call("hand_written", arguments)])
        assert isinstance(plan, loop.RunTools)
        (step,) = plan.steps
        assert isinstance(step, loop.Reject)
        assert len(step.message) < 2000


@pytest.mark.parametrize("schema", [BAD_PARAMETERS[i][0] for i in (0, 1, 2, 4, 5)])
def test_planning_with_an_unchecked_spec_never_raises(schema: Any) -> None:
    view = loop.AgentView(name="a", tools=(ToolSpec(name="t", parameters=schema),))
    plan = loop.plan_tools(_state(), view, [call("t", {"x": "1"})])
    assert isinstance(plan, loop.RunTools)


# --- unknown tool names (plan B3) ---------------------------------------------------------

HOSTILE_NAMES = [
    "os.system",
    "__import__",
    "eval",
    "exec",
    "builtins.exec",
    "subprocess.run",
    "raygents.agents.tools.tool",
    "importlib.import_module",
    "__builtins__",
    "getattr",
    "../x",
    "",
]


@contextlib.contextmanager
def watching() -> Iterator[list[str]]:
    """What imports and dangerous calls happen inside the block (those calls do nothing)."""
    seen: list[str] = []
    real_import = builtins.__import__

    def record_import(name: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(f"import {name}")
        return real_import(name, *args, **kwargs)

    def refuse(what: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen.append(what)
            raise AssertionError(f"{what} was called")

        return call

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(builtins, "__import__", record_import)
        patch.setattr(importlib, "import_module", refuse("importlib.import_module"))
        for name in ("eval", "exec", "compile"):
            patch.setattr(builtins, name, refuse(name))
        patch.setattr(os, "system", refuse("os.system"))
        seen.clear()  # (the patching itself imports)
        yield seen


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_call_of_an_unknown_name_fails_the_run_and_runs_nothing(name: str) -> None:
    modules = set(sys.modules)
    view = loop.AgentView(
        name="a",
        tools=(ToolSpec(name="echo", parameters={"type": "object"}),),
        handoffs={"transfer_to_b": "b"},
    )
    calls = [call("echo", {}), call(name, {"command": "id"})]
    with watching() as seen:
        plan = loop.plan_tools(_state(), view, calls)
    assert seen == []
    assert set(sys.modules) == modules
    assert isinstance(plan, loop.Fail)
    assert isinstance(plan.error, ToolNotFound)
    assert plan.error.tool_name == name
    assert f"unknown tool {name!r} for agent 'a'" in str(plan.error)


def _functions(path: Path) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        node.name: node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


DYNAMIC = {
    "__import__",
    "import_module",
    "eval",
    "exec",
    "compile",
    "globals",
    "locals",
    "vars",
    "getattr",
    "setattr",
    "hasattr",
    "locate",
    "attrgetter",
    "methodcaller",
}
"""Callables that look names up or run code at run time."""

DISPATCH = {
    "core/loop.py": ("plan_tools", "_check_call", "step_result", "pending_batch", "gate"),
    "core/corrections.py": ("parse_arguments", "argument_error", "schema_error"),
    "runtime/actor/toolcalls.py": ("run_step", "needs_approval", "run_batch"),
    "runtime/actor/toolbox.py": ("tools", "resolve_tools"),
    "runtime/worker/tasks.py": ("run_tool", "remote_tool", "task_body", "submit_tool"),
    "runtime/worker/worker.py": ("function_task", "tool_task", "_task"),
    "integrations/mcp.py": ("execute", "call_tool"),
}
"""The functions a tool call goes through, from the model's reply to the tool's code."""


def test_dispatch_does_no_dynamic_lookup_or_import() -> None:
    for module, names in DISPATCH.items():
        functions = _functions(PACKAGE / module)
        for name in names:
            fn = functions[name]
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    imported = [a.name for a in node.names]
                    # Only fixed names of raygents or the mcp SDK, never one made at run time.
                    assert node.module is None or node.module.startswith(("raygents", "mcp")), (
                        f"{module}:{name} imports {node.module}"
                    )
                    assert all(n.isidentifier() for n in imported)
                if isinstance(node, ast.Call):
                    func = node.func
                    called = func.attr if isinstance(func, ast.Attribute) else None
                    called = func.id if isinstance(func, ast.Name) else called
                    assert called not in DYNAMIC, f"{module}:{name} calls {called}()"


def test_calls_are_dispatched_through_dicts_of_registered_tools() -> None:
    """Every lookup keyed by a call's tool name is in one of the tables built from the agent's
    tools: the loop's ``specs`` (from the view's tool specs) and ``view.handoffs``, and the
    toolbox's ``tools()`` (the dict ``resolve_tools`` builds from the agent's tools and its
    MCP servers' tools)."""
    tables = {"specs", "view.handoffs", "tools"}
    found: dict[str, set[str]] = {}
    modules = (
        "core/loop.py",
        "runtime/actor/actor.py",
        "runtime/actor/toolcalls.py",
        "runtime/actor/toolbox.py",
    )
    for module in (*modules, "runtime/worker/tasks.py", "runtime/actor/children.py"):
        tree = ast.parse((PACKAGE / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and ast.unparse(node.slice).endswith("call.name"):
                found.setdefault(module, set()).add(ast.unparse(node.value))
    assert found.get("core/loop.py", set()) <= tables and "specs" in found["core/loop.py"]
    assert (
        found.get("runtime/actor/toolcalls.py", set()) <= tables
        and found["runtime/actor/toolcalls.py"]
    )
    assert set(found) <= {"core/loop.py", "runtime/actor/toolcalls.py"}

    loop_fns = _functions(PACKAGE / "core/loop.py")
    specs = [
        n
        for n in ast.walk(loop_fns["plan_tools"])
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "specs"
    ]
    assert [ast.unparse(n.value) for n in specs] == ["{t.name: t for t in view.tools}"]

    toolbox = _functions(PACKAGE / "runtime/actor/toolbox.py")
    assert "return self._tools" in ast.unparse(toolbox["tools"])
    resolve = ast.unparse(toolbox["resolve_tools"])
    assert "tools = {t.name: t for _, t in sources}" in resolve
    assert "self._tools = tools" in resolve
    calls = _functions(PACKAGE / "runtime/actor/toolcalls.py")
    for name in ("needs_approval", "run_step"):
        assert "tools = self.toolbox.tools()" in ast.unparse(calls[name])


# --- in-actor tools' timeout ------------------------------------------------------------


@rg.tool(remote=False, timeout_s=0.2)
async def stall() -> str:
    """Never finish."""
    await asyncio.sleep(3600)
    return "never"


class Stalled(Tool):
    name = "stalled"
    remote = False
    timeout_s = 0.2

    async def execute(self, ctx: ToolContext, arguments: str) -> ToolResult:
        await asyncio.sleep(3600)
        return ToolResult("never")


@pytest.mark.parametrize("t", [stall, Stalled()], ids=["function", "custom"])
async def test_a_tool_that_runs_in_the_actor_honours_its_timeout(t: Tool) -> None:
    """As a remote tool's ``timeout_s`` does (raygents.runtime.worker.tasks.run_tool), with its
    text."""
    from raygents.core.envelope import Envelope
    from raygents.runtime.actor.actor import AgentActor

    agent = rg.Agent("host", model=rg.testing.ScriptedModel([]), tools=[t])
    actor = AgentActor({"host": agent}, "host", "fp", "ns")
    await actor.resolve_tools()
    events: list[Any] = []
    step = loop.Execute(call(t.name, {}, id="c1"))
    started = asyncio.get_running_loop().time()
    out = await actor.bound.calls.run_step(_state(), Envelope(_state(), "fp"), step, events.append)
    assert asyncio.get_running_loop().time() - started < 5
    assert out.result == ToolResult(
        f'Error: cannot execute tool "{t.name}": timed out after 0.2 s', is_error=True
    )
    assert [e.type for e in events] == ["tool_start", "tool_end"]


async def test_an_agent_with_unusable_parameters_fails_when_its_view_is_built() -> None:
    """The actor builds the tool specs the model sees; a tool it cannot offer fails the run
    there with the UserError (the actor stores it as the run's error)."""
    from raygents.runtime.actor.actor import AgentActor

    bad = HandWritten({"type": "object", "properties": {"x": {"pattern": "(["}}})
    agent = rg.Agent("host", model=rg.testing.ScriptedModel([]), tools=[bad])
    actor = AgentActor({"host": agent}, "host", "fp", "ns")
    await actor.resolve_tools()
    with pytest.raises(UserError, match=r"tool 'hand_written' has parameters that cannot be used"):
        actor.bound.toolbox.base_view()


# --- on_recovery ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["maybe", "ASK", None, True, ("ask",)])
def test_on_recovery_is_rerun_or_ask(bad: object) -> None:
    with pytest.raises(rg.UserError, match='on_recovery must be "rerun" or "ask"'):
        rg.tool(on_recovery=bad)  # type: ignore[arg-type]


def test_an_ask_tool_is_never_retried_by_ray() -> None:
    with pytest.raises(rg.UserError, match="at most once, so max_retries must be 0"):
        rg.tool(on_recovery="ask", max_retries=2)

    @rg.tool(on_recovery="ask")
    def charge(amount: int) -> str:
        """Charge."""
        return str(amount)

    from raygents.runtime.worker.tasks import task_options

    assert charge.on_recovery == "ask" and charge.options().on_recovery == "ask"
    assert task_options(charge)["max_retries"] == 0
    assert "max_retries" not in task_options(rg.tool(lambda: "x", name="x"))
