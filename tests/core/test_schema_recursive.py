"""Recursive types (a tree node) as output types and tool arguments: their strict schemas keep
``$defs`` and ``$ref``, as OpenAI's strict mode allows; other types' schemas are unchanged."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

import raygents as rg
from raygents.agents.result import RunResult
from raygents.core import corrections, loop
from raygents.core.envelope import RunState
from raygents.core.messages import Message
from raygents.core.schema import schema_errors, strict_schema, type_schema
from raygents.core.toolcall import ToolContext
from raygents.errors import OutputValidationError
from raygents.runtime.driver.runs import parse_typed
from raygents.testing import text


class Node(BaseModel):
    name: str
    children: list[Node] = []


class Expr(BaseModel):
    """Mutual recursion through a union: an expression is a number or an operation."""

    op: str
    args: list[Expr | Leaf]


class Leaf(BaseModel):
    value: float


class Point(BaseModel):
    x: int
    y: int = 0


class Shape(BaseModel):
    corners: list[Point]
    label: str | None = None


def strict_problems(schema: dict[str, Any]) -> list[str]:
    """Where ``schema`` breaks OpenAI's strict-mode rules: an object root; every object lists
    all its properties as required and forbids others; every ``$ref`` names a definition."""
    problems = []
    defs = schema.get("$defs", {})
    if schema.get("type") != "object":
        problems.append("root is not an object")
    todo: list[tuple[str, Any]] = [("#", schema)]
    while todo:
        where, node = todo.pop()
        if isinstance(node, list):
            todo.extend((f"{where}/{i}", n) for i, n in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        ref = node.get("$ref")
        if ref is not None and not (
            isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs
        ):
            problems.append(f"{where}: $ref {ref!r} names no definition")
        if node.get("type") == "object" or "properties" in node:
            if node.get("additionalProperties") is not False:
                problems.append(f"{where}: additionalProperties is not false")
            if sorted(node.get("required", [])) != sorted(node.get("properties", {})):
                problems.append(f"{where}: not every property is required")
        todo.extend((f"{where}/{k}", v) for k, v in node.items() if k != "$ref")
    return problems


TREE = {"name": "root", "children": [{"name": "a", "children": [{"name": "b", "children": []}]}]}


def deep_tree(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"name": f"n{depth}", "children": None}
    for i in range(depth):
        node = {"name": f"n{i}", "children": [node]}
    return node


@pytest.mark.parametrize("tp", [Node, Expr, list[Node], Node | None])
def test_recursive_types_get_strict_schemas_with_defs(tp: Any) -> None:
    schema = type_schema(tp)  # raised ValueError("schema nests too deeply ...")
    assert strict_problems(schema) == []
    assert "$defs" in schema and "$ref" in json.dumps(schema)


def test_a_recursive_schema_validates_any_depth_and_finds_deep_errors() -> None:
    schema = type_schema(Node)
    assert schema_errors(schema, TREE) == []
    assert schema_errors(schema, deep_tree(60)) == []
    bad = deep_tree(5)
    bad["children"][0]["children"][0]["extra"] = 1
    paths = [p for p, _ in schema_errors(schema, bad)]
    assert paths == ["/children/0/children/0"]


def test_non_recursive_types_are_still_inlined_without_defs() -> None:
    schema = type_schema(Shape)
    assert "$defs" not in schema and "$ref" not in json.dumps(schema)
    assert schema["properties"]["corners"]["items"]["required"] == ["x", "y"]
    assert strict_problems(schema) == []


def test_a_dangling_ref_is_a_clear_error() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/Gone"}}, "$defs": {}}
    with pytest.raises(ValueError, match="names no definition"):
        strict_schema(schema)


def test_recursive_output_type_end_to_end_through_the_loop() -> None:
    output_schema = {"name": "node", "schema": type_schema(Node)}
    v = loop.AgentView(name="a", output_schema=output_schema)
    state = loop.activate(RunState(run_id="r", agent_name="a", messages=(Message("user", "t"),)), v)
    state, _ = loop.next_turn(state, v)
    reply = json.dumps(deep_tree(30))
    state, action = loop.on_response(state, v, text(reply))
    assert action == loop.Finish(reply)
    result = RunResult(
        run_id="r",
        final_output=reply,
        messages=state.messages,
        usage=state.usage,
        turns=state.turns,
        last_agent=rg.Agent("a"),
    )
    node = parse_typed(result, Node).output
    depth = 0
    while node.children:
        node, depth = node.children[0], depth + 1
    assert depth == 30 and node.children == []  # null became the default

    _, action = loop.on_response(state, v, text(json.dumps({"name": "x", "children": [{}]})))
    assert isinstance(action, loop.Fail) and isinstance(action.error, OutputValidationError)
    assert [p for p, _ in action.error.errors] == ["/children/0", "/children/0"]


def test_recursive_tool_argument_end_to_end() -> None:
    @rg.tool
    def count(tree: Node) -> int:
        """Count the nodes of a tree."""

        def size(n: Node) -> int:
            return 1 + sum(size(c) for c in n.children)

        return size(tree)

    spec = count.spec()
    assert strict_problems(spec.parameters) == []
    assert corrections.argument_error(spec, json.dumps({"tree": TREE})) is None
    problem = corrections.argument_error(
        spec, json.dumps({"tree": {"name": "r", "children": [{}]}})
    )
    assert problem is not None and "/tree/children/0" in problem
    ctx = ToolContext(run_id="r", call_id="c", tool_name="count", agent_name="a")
    result = asyncio.run(count.execute(ctx, json.dumps({"tree": deep_tree(40)})))
    assert not result.is_error and result.content == "41"
