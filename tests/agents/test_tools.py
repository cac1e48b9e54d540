"""Tools, schemas, agents and graphs: no Ray needed."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field
from ray import cloudpickle

import raygents as rg
from raygents.agents.agent import agent_graph
from raygents.agents.agent_tool import AgentTool
from raygents.agents.params import parse_docstring
from raygents.agents.tools import to_tool_result
from raygents.core.schema import strict_schema, type_schema
from raygents.integrations.mcp import MCPServerStdio

CTX = rg.ToolContext(run_id="r", call_id="c", tool_name="t", agent_name="a")


class Point(BaseModel):
    x: int
    y: int = 0


@rg.tool
def place(
    ctx: rg.ToolContext, name: str, at: Point, tags: list[str] | None = None, note: str = "hi"
) -> dict:
    """Place a named point.

    Args:
        name: what to call it.
        at: where it goes.
        tags: optional labels.
    """
    return {"name": name, "at": at.model_dump(), "tags": tags, "note": note, "run": ctx.run_id}


def test_schema_is_strict_with_optional_fields_nullable() -> None:
    schema = place.parameters
    assert schema["required"] == ["name", "at", "tags", "note"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["note"]["type"] == ["string", "null"]
    assert {"type": "null"} in schema["properties"]["tags"]["anyOf"]
    assert schema["properties"]["at"]["required"] == ["x", "y"]
    assert schema["properties"]["name"]["description"] == "what to call it."
    assert place.description == "Place a named point."
    assert place.takes_context and place.name == "place"


def test_execute_parses_arguments_and_applies_defaults_for_nulls() -> None:
    args = json.dumps({"name": "p", "at": {"x": 1, "y": None}, "tags": None, "note": None})
    result = asyncio.run(place.execute(CTX, args))
    value = json.loads(result.content)
    assert value == {"name": "p", "at": {"x": 1, "y": 0}, "tags": None, "note": "hi", "run": "r"}


def test_execute_reports_invalid_arguments_as_error_results() -> None:
    result = asyncio.run(place.execute(CTX, json.dumps({"name": "p", "at": {"x": "far"}})))
    assert result.is_error and result.content.startswith('Invalid parameters for tool "place"')


def test_a_pickled_tool_builds_its_arguments_model_again() -> None:
    @rg.tool
    def bounded(n: Annotated[int, Field(ge=1)], at: Point, label: str = "x") -> str:
        return f"{n} {at.x} {label}"

    place.args_model  # noqa: B018 (built)
    for t in (place, bounded):
        blob = cloudpickle.dumps(t)
        assert b"ModelMetaclass" not in blob  # its model, a class made at run time, is not copied
        assert cloudpickle.dumps(t) == blob  # (graph fingerprints hash these bytes)
    loaded = cloudpickle.loads(cloudpickle.dumps(bounded))
    assert loaded.args_model.model_json_schema() == bounded.args_model.model_json_schema()
    ok = asyncio.run(loaded.execute(CTX, json.dumps({"n": 2, "at": {"x": 3}, "label": None})))
    assert ok.content == "2 3 x" and not ok.is_error
    bad = asyncio.run(loaded.execute(CTX, json.dumps({"n": 0, "at": {"x": 3}, "label": "y"})))
    assert bad.is_error and "greater than or equal to 1" in bad.content
    again = cloudpickle.loads(cloudpickle.dumps(place))
    out = asyncio.run(
        again.execute(
            CTX, json.dumps({"name": "p", "at": {"x": 1, "y": None}, "tags": None, "note": None})
        )
    )
    assert json.loads(out.content)["at"] == {"x": 1, "y": 0}


def test_async_tools_and_custom_names() -> None:
    @rg.tool(name="shout", description="Loud.")
    async def loud(word: str) -> str:
        return word.upper()

    assert loud.name == "shout" and loud.description == "Loud."
    assert asyncio.run(loud.execute(CTX, '{"word": "hi"}')).content == "HI"


@pytest.mark.parametrize(
    ("value", "content"),
    [("text", "text"), (3, "3"), ({"a": [1]}, '{"a": [1]}'), (Point(x=1), '{"x":1,"y":0}')],
)
def test_return_values_become_results(value: object, content: str) -> None:
    assert to_tool_result(value).content == content


def test_unserialisable_return_values_become_error_results() -> None:
    assert to_tool_result(object()).is_error


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": "5"}, "timeout_s must be a positive number of seconds, got '5'"),
        ({"timeout_s": float("nan")}, "timeout_s"),
        ({"timeout_s": True}, "timeout_s"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": 1.5}, "max_retries must be an int >= 0, got 1.5"),
        ({"max_retries": "3"}, "max_retries"),
        ({"num_cpus": -1}, "num_cpus must be a number >= 0, got -1"),
        ({"num_cpus": "2"}, "num_cpus"),
        ({"num_gpus": -0.5}, "num_gpus"),
        ({"num_gpus": float("inf")}, "num_gpus"),
        ({"resources": ["accelerator"]}, "resources must be a mapping"),
        ({"resources": {"accelerator": -1}}, "resources"),
        ({"resources": {"accelerator": "1"}}, "resources"),
        ({"resources": {"CPU": 1}}, "num_cpus and num_gpus"),
        ({"remote": "no"}, "remote must be True or False, got 'no'"),
        ({"description": 3}, "description must be a str"),
        ({"name": "bad name"}, "invalid"),
    ],
)
def test_bad_tool_options_fail_fast(kwargs: dict, match: str) -> None:
    def echo(x: int) -> int:
        return x

    with pytest.raises(rg.UserError, match=match):
        rg.tool(**kwargs)(echo)


class Heavy(rg.Tool):
    name = "heavy"
    num_gpus = -1


def test_bad_options_of_a_custom_tool_are_refused_by_its_agent() -> None:
    with pytest.raises(rg.UserError, match="tool 'heavy': num_gpus must be a number >= 0"):
        rg.Agent("a", tools=[Heavy()])

    def light(x: int) -> int:
        return x

    good = rg.tool(num_cpus=0.5, num_gpus=0, resources={"accelerator": 1}, timeout_s=2)(light)
    assert rg.Agent("a", tools=[good]).tools == [good]


def test_var_args_are_refused() -> None:
    def f(*args: int) -> int:
        return 0

    with pytest.raises(rg.UserError, match="args"):
        rg.tool(f)


def test_docstring_parsing() -> None:
    summary, args = parse_docstring(
        """Do it.

        Longer text.

        Args:
            a (int): first
                continued.
            b: second.

        Returns:
            nothing.
        """
    )
    assert summary == "Do it.\n\nLonger text."
    assert args == {"a": "first continued.", "b": "second."}


def test_type_schema_wraps_non_objects_and_inlines_refs() -> None:
    class Outer(BaseModel):
        points: list[Point]

    schema = type_schema(Outer)
    assert "$defs" not in json.dumps(schema)
    assert schema["properties"]["points"]["items"]["required"] == ["x", "y"]
    assert type_schema(int)["properties"]["value"]["type"] == "integer"


def test_strict_schema_keeps_properties_named_like_keywords() -> None:
    schema = strict_schema(
        {
            "type": "object",
            "properties": {"title": {"type": "string"}, "default": {"type": "integer"}},
        }
    )
    assert set(schema["properties"]) == {"title", "default"}


class Outline:
    """Not a type pydantic can describe."""


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_turns": 0}, "max_turns"),
        ({"max_tool_depth": 0}, "max_tool_depth"),
        ({"replicas": 0}, "replicas"),
        ({"tool_use_behavior": "sometimes"}, "tool_use_behavior"),
        ({"tools": ["not a tool"]}, "tools must be Tool"),
        ({"max_empty_output_retries": -1}, "max_empty_output_retries"),
        ({"tools": place}, "tools must be a list, got <FunctionTool 'place'>"),
        ({"handoffs": rg.Agent("b")}, "handoffs must be a list"),
        ({"tools": "place"}, "tools must be a list"),
        ({"input_guardrails": [lambda ctx, messages: None]}, "decorate it with @input_guardrail"),
        ({"input_guardrails": [rg.output_guardrail(lambda c, m: None)]}, "is an output guardrail"),
        ({"output_guardrails": [rg.input_guardrail(lambda c, m: None)]}, "is an input guardrail"),
        ({"output_guardrails": ["no secrets"]}, "output_guardrails must be OutputGuardrail"),
        ({"model": 3}, "model must be a model name"),
        ({"model_settings": {"temperature": 0}}, "model_settings must be a ModelSettings"),
        ({"output_type": Outline}, "output_type .* cannot be made into a JSON schema"),
        ({"output_type": 3}, "output_type"),
        ({"max_empty_output_retries": True}, "max_empty_output_retries must be an int >= 0"),
        ({"max_turns": 2.0}, "max_turns must be an int >= 1, got 2.0"),
        ({"schema_on_every_call": "yes"}, "schema_on_every_call must be True or False"),
        ({"reset_tool_choice": None}, "reset_tool_choice must be True or False, got None"),
        ({"handoff_description": 3}, "handoff_description must be a str or None, got 3"),
        ({"mcp_servers": ["time"]}, "mcp_servers must be MCP servers .* got 'time'"),
        ({"approval": ["wipe"]}, r"approval must be an Approval\(...\) or None, got \['wipe'\]"),
        ({"session": "s1"}, "session must be a Session .* got 's1'"),
        ({"hooks": "log"}, "hooks must be a RunHooks .* got 'log'"),
        ({"hooks": 0}, "hooks must be a RunHooks .* got 0"),
        ({"hooks": [rg.RunHooks(), print]}, "hooks must be a RunHooks .* got <built-in"),
    ],
)
def test_bad_agent_options_fail_fast(kwargs: dict, match: str) -> None:
    with pytest.raises(rg.UserError, match=match):
        rg.Agent("a", **kwargs)


def test_good_agent_options_of_every_kind_are_accepted() -> None:
    class Quiet(rg.RunHooks):
        pass

    agent = rg.Agent(
        "a",
        mcp_servers=[MCPServerStdio("time", "/nonexistent/mcp-server")],  # (never started)
        approval=rg.Approval(tools=["wipe"]),
        session=rg.MemorySession(),
        hooks=[Quiet()],
        handoff_description="Knows things.",
        schema_on_every_call=True,
        reset_tool_choice=False,
        max_empty_output_retries=0,
    )
    assert agent.clone(hooks=Quiet(), handoff_description=None).handoff_description is None
    with pytest.raises(rg.UserError, match="reset_tool_choice must be True or False, got 1"):
        agent.clone(reset_tool_choice=1)


def test_stop_at_tools_needs_tool_names() -> None:
    for bad in (3, None, [3], ["place", None], {"place": 1}, b"place"):
        with pytest.raises(rg.UserError, match="StopAtTools needs tool names"):
            rg.StopAtTools(bad)  # type: ignore[arg-type]
    with pytest.raises(rg.UserError, match="StopAtTools needs at least one tool name"):
        rg.StopAtTools([])
    assert rg.StopAtTools("place").tool_names == ("place",)
    assert rg.StopAtTools(iter(["place", "helper"])).tool_names == ("place", "helper")


def test_stop_at_tools_names_must_be_the_agents_tools() -> None:
    helper = rg.Agent("helper").as_tool()
    stop = rg.StopAtTools(["place", "helper"])
    agent = rg.Agent("a", tools=[place, helper], tool_use_behavior=stop)
    with pytest.raises(rg.UserError, match="agent 'a': StopAtTools names 'plcae', which is none"):
        rg.Agent("a", tools=[place], tool_use_behavior=rg.StopAtTools(["place", "plcae"]))
    with pytest.raises(rg.UserError, match="StopAtTools names 'helper', which is none of"):
        rg.Agent("a", tool_use_behavior=stop, tools=[place])
    to_b = rg.StopAtTools(["transfer_to_b"])
    with pytest.raises(rg.UserError, match="'transfer_to_b', which is the handoff to 'b'"):
        rg.Agent("a", tools=[place], handoffs=[rg.Agent("b")], tool_use_behavior=to_b)
    # An MCP server's tools are known only when the run lists them: any other name is taken.
    server = MCPServerStdio("time", "/nonexistent/mcp-server")  # (never started)
    mcp = rg.Agent("m", mcp_servers=[server], tool_use_behavior=rg.StopAtTools(["get_time"]))
    assert isinstance(mcp.tool_use_behavior, rg.StopAtTools)
    with pytest.raises(rg.UserError, match="'transfer_to_b', which is the handoff to 'b'"):
        mcp.clone(handoffs=[rg.Agent("b")], tool_use_behavior=to_b)
    agent.tools.remove(helper)  # (changed after it was built: checked when a run starts)
    with pytest.raises(rg.UserError, match="StopAtTools names 'helper'"):
        agent_graph(agent)


def test_agent_names_must_be_unique_in_a_graph() -> None:
    a = rg.Agent("same")
    b = rg.Agent("same")
    with pytest.raises(rg.UserError, match="two different agents are named 'same'"):
        agent_graph(rg.Agent("root", handoffs=[a], tools=[b.as_tool(name="other")]))


def test_graph_follows_handoffs_and_agent_tools_with_cycles() -> None:
    triage = rg.Agent("triage")
    billing = rg.Agent("billing", handoffs=[triage])
    helper = rg.Agent("helper")
    triage.handoffs = [billing]
    triage.tools = [helper.as_tool()]
    assert set(agent_graph(triage)) == {"triage", "billing", "helper"}


def test_a_tool_name_used_twice_is_refused_when_the_agent_is_built() -> None:
    def lookup(key: str) -> str:
        return key

    first, second = rg.tool(lookup), rg.tool(name="lookup")(_area)
    with pytest.raises(rg.UserError, match="agent 'a': tool name 'lookup' is used twice"):
        rg.Agent("a", tools=[first, second])
    with pytest.raises(rg.UserError, match="tool name 'lookup' is used twice"):
        rg.Agent("a", tools=[first, first])
    b = rg.Agent("b")
    clash = rg.tool(name="transfer_to_b")(lookup)
    with pytest.raises(rg.UserError, match="tool name 'transfer_to_b' is used by the handoff"):
        rg.Agent("a", tools=[clash], handoffs=[b])
    with pytest.raises(rg.UserError, match="'transfer_to_b' is used twice"):
        rg.Agent("a", handoffs=[b, rg.handoff(b, tool_description="Again.")])
    agent = rg.Agent("a", tools=[first])
    agent.tools.append(second)  # (changed after it was built: checked when a run starts)
    with pytest.raises(rg.UserError, match="used twice"):
        agent_graph(agent)


def test_dynamic_instructions_and_clone() -> None:
    agent = rg.Agent("dyn", lambda ctx, agent: f"hello {ctx.context}", handoffs=[rg.Agent("h")])
    ctx = rg.RunContext(run_id="r", agent_name="dyn", context="ada")
    assert asyncio.run(agent.system_prompt(ctx)).startswith("hello ada\n\n## Handoffs")
    copy = agent.clone(max_turns=3)
    copy.tools.append(place)
    assert agent.tools == [] and copy.max_turns == 3 and agent.max_turns == 10
    with pytest.raises(rg.UserError, match="unknown option"):
        agent.clone(colour="red")


def test_agent_tool_schema() -> None:
    tool = rg.Agent("Research Bot", handoff_description="Finds things.").as_tool()
    assert isinstance(tool, AgentTool)
    assert tool.name == "research_bot" and tool.description == "Finds things."
    assert tool.parameters["required"] == ["input"]


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"name": ""}, "name is empty"),
        ({"tool_name": ""}, "name is empty"),
        ({"description": 3}, "description must be a str"),
        ({"tool_description": ["a"]}, "description must be a str"),
    ],
)
def test_as_tool_refuses_an_empty_name_and_a_description_that_is_not_text(
    options: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(rg.UserError, match=fragment):
        rg.Agent("helper").as_tool(**options)


@rg.tool
def scale(ctx: rg.ToolContext, value: int, /, factor: int = 2, *, unit: str = "") -> str:
    """Scale a value.

    Args:
        value: what to scale.
    """
    return f"{value * factor}{unit} {ctx.run_id}"


def test_positional_only_parameters_are_passed_by_position() -> None:
    assert scale.parameters["required"] == ["value", "factor", "unit"]
    assert scale.parameters["properties"]["value"]["description"] == "what to scale."
    args = json.dumps({"value": 3, "factor": None, "unit": "m"})
    result = asyncio.run(scale.execute(CTX, args))
    assert (result.content, result.is_error) == ("6m r", False)


def _area(unit: str, at: Point, scale: int = 1) -> str:
    """Area of a point's box.

    Args:
        at: the corner.
    """
    return f"{at.x * at.y * scale} {unit}"


class Meter:
    """Measures things."""

    def __call__(self, at: Point) -> int:
        return at.x


def test_partials_and_callable_objects_get_their_parameters_types() -> None:
    partial = rg.tool(functools.partial(_area, "m2"))
    assert partial.name == "_area" and partial.description == "Area of a point's box."
    assert partial.parameters["required"] == ["at", "scale"]
    assert partial.parameters["properties"]["at"]["required"] == ["x", "y"]
    out = asyncio.run(partial.execute(CTX, '{"at": {"x": 2, "y": 3}, "scale": null}'))
    assert (out.content, out.is_error) == ("6 m2", False)
    meter = rg.tool(name="meter")(Meter())
    assert meter.parameters["properties"]["at"]["required"] == ["x", "y"]
    assert meter.description == "Measures things."
    assert asyncio.run(meter.execute(CTX, '{"at": {"x": 4, "y": null}}')).content == "4"
    with pytest.raises(rg.UserError, match="has no __name__: pass name="):
        rg.tool(Meter())


def test_parameters_named_like_pydantic_model_attributes_work() -> None:
    @rg.tool
    def query(
        sql: str, schema: str = "public", model_config: int = 0, model_dump: bool = False
    ) -> str:
        return f"{sql} {schema} {model_config} {model_dump}"

    assert query.parameters["required"] == ["sql", "schema", "model_config", "model_dump"]
    args = '{"sql": "q", "schema": "s", "model_config": 2, "model_dump": true}'
    assert asyncio.run(query.execute(CTX, args)).content == "q s 2 True"
    defaults = '{"sql": "q", "schema": null, "model_config": null, "model_dump": null}'
    assert asyncio.run(query.execute(CTX, defaults)).content == "q public 0 False"
    again = cloudpickle.loads(cloudpickle.dumps(query))
    bad = asyncio.run(again.execute(CTX, '{"sql": "q", "schema": 3}'))
    assert bad.is_error and "schema" in bad.content


def test_an_annotation_that_cannot_be_resolved_is_named() -> None:
    class Local(BaseModel):  # (this module's annotations are strings: 'Local' is not global)
        x: int

    def uses_local(ctx: rg.ToolContext, n: int, p: Local) -> str:
        return repr(p)

    with pytest.raises(rg.UserError, match="cannot resolve the annotation 'Local' of param"):
        rg.tool(uses_local)
