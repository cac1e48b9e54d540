"""Hooks and tool use behaviours as SDK code expects them: ``AgentHooks`` with the SDK's names
and argument order (and hooks written for them refused as ``RunHooks``), run-level hooks that
see the run's usage, turns and the calls' arguments, run-level model-call hooks, typed outputs
in ``on_agent_end`` and from tools that end a run, and async ``tool_use_behavior`` functions."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import raygents as rg
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


class FinalResult(BaseModel):
    number: int


@dataclasses.dataclass
class Weather:
    city: str
    degrees: int


@rg.tool(remote=False)
def random_number(max: int) -> int:
    """A random number from 0 to max."""
    return 37


@rg.tool(remote=False)
def multiply_by_two(x: int) -> int:
    """Return x times two."""
    return x * 2


@rg.tool(remote=False)
def final_number(x: int) -> FinalResult:
    """The final result."""
    return FinalResult(number=x)


@rg.tool
def weather(city: str) -> Weather:
    """The weather in a city."""
    return Weather(city, 21)


class Logging(rg.AgentHooks):
    """The SDK's agent_lifecycle_example hooks, as written for the SDK."""

    def __init__(self, display_name: str, path: str) -> None:
        self.display_name = display_name
        self.path = path

    def _log(self, line: str) -> None:
        with open(self.path, "a") as f:
            f.write(f"({self.display_name}) {line}\n")

    async def on_start(self, context, agent):  # type: ignore[no-untyped-def]
        self._log(f"Agent {agent.name} started")

    async def on_end(self, context, agent, output):  # type: ignore[no-untyped-def]
        self._log(f"Agent {agent.name} ended with output {output!r}")

    async def on_handoff(self, context, agent, source):  # type: ignore[no-untyped-def]
        self._log(f"Agent {source.name} handed off to {agent.name}")

    async def on_tool_start(self, context, agent, tool):  # type: ignore[no-untyped-def]
        self._log(f"Agent {agent.name} started tool {tool.name}")

    async def on_tool_end(self, context, agent, tool, result):  # type: ignore[no-untyped-def]
        self._log(f"Agent {agent.name} ended tool {tool.name} with result {result.content}")

    async def on_llm_start(self, context, agent, system_prompt, input_items):  # type: ignore[no-untyped-def]
        first = system_prompt.splitlines()[0]
        self._log(f"LLM for {agent.name}: {first} / {input_items[0]['content']}")


def multiply_graph(path: Path) -> rg.Agent:
    multiply = rg.Agent(
        "Multiply Agent",
        "Multiply the number by 2 and then return the final result.",
        tools=[multiply_by_two],
        output_type=FinalResult,
        schema_on_every_call=True,
        hooks=Logging("Multiply Agent", str(path)),
        model=ScriptedModel([calls(call("multiply_by_two", {"x": 37})), text('{"number": 74}')]),
    )
    return rg.Agent(
        "Start Agent",
        "Generate a random number; hand off to the multiply agent if it is odd.",
        tools=[random_number],
        output_type=FinalResult,
        schema_on_every_call=True,
        handoffs=[multiply],
        hooks=Logging("Start Agent", str(path)),
        model=ScriptedModel(
            [calls(call("random_number", {"max": 50})), calls(call("transfer_to_multiply_agent"))]
        ),
    )


def test_agent_hooks_get_the_sdks_names_and_argument_order(tmp_path: Path) -> None:
    log = tmp_path / "hooks.log"
    result = rg.run(multiply_graph(log), "Generate a random number between 0 and 50.")
    assert result.final_output == FinalResult(number=74)
    assert log.read_text().splitlines() == [
        "(Start Agent) Agent Start Agent started",
        "(Start Agent) LLM for Start Agent: Generate a random number; hand off to the multiply "
        "agent if it is odd. / Generate a random number between 0 and 50.",
        "(Start Agent) Agent Start Agent started tool random_number",
        "(Start Agent) Agent Start Agent ended tool random_number with result 37",
        "(Start Agent) LLM for Start Agent: Generate a random number; hand off to the multiply "
        "agent if it is odd. / Generate a random number between 0 and 50.",
        "(Start Agent) Agent Start Agent handed off to Multiply Agent",
        "(Multiply Agent) Agent Multiply Agent started",
        "(Multiply Agent) LLM for Multiply Agent: Multiply the number by 2 and then return the "
        "final result. / Generate a random number between 0 and 50.",
        "(Multiply Agent) Agent Multiply Agent started tool multiply_by_two",
        "(Multiply Agent) Agent Multiply Agent ended tool multiply_by_two with result 74",
        "(Multiply Agent) LLM for Multiply Agent: Multiply the number by 2 and then return the "
        "final result. / Generate a random number between 0 and 50.",
        "(Multiply Agent) Agent Multiply Agent ended with output FinalResult(number=74)",
    ]


def test_run_hooks_written_as_the_sdks_agent_hooks_are_refused() -> None:
    class Ends(rg.RunHooks):
        async def on_end(self, context, agent, output):  # type: ignore[no-untyped-def]
            pass

    class Handoffs(rg.RunHooks):
        async def on_handoff(self, context, agent, source):  # type: ignore[no-untyped-def]
            pass

    with pytest.raises(rg.UserError, match=r"Ends has on_end.*subclass rg\.AgentHooks"):
        rg.Agent("sdk_hooks_ends", hooks=Ends(), model="m")
    with pytest.raises(rg.UserError, match=r"takes on_handoff\(ctx, agent, source\)"):
        rg.Agent("sdk_hooks_handoffs", hooks=Handoffs(), model="m")
    with pytest.raises(rg.UserError, match="Handoffs takes on_handoff"):
        rg.run(rg.Agent("sdk_hooks_plain", model="m"), "hi", hooks=Handoffs())


class Seen(rg.RunHooks):
    """Run-level hooks that note what the SDK's lifecycle example prints."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _add(self, ctx: rg.RunContext, line: str) -> None:
        self.lines.append(f"{line} | {ctx.usage.requests} req {ctx.usage.total_tokens} tok")

    async def on_agent_start(self, ctx, agent):  # type: ignore[no-untyped-def]
        self._add(ctx, f"start {agent.name}")

    async def on_llm_start(self, ctx, agent, system_prompt, input_items):  # type: ignore[no-untyped-def]
        self._add(ctx, f"llm start {agent.name} ({len(input_items)} items)")

    async def on_llm_end(self, ctx, agent, response):  # type: ignore[no-untyped-def]
        self._add(ctx, f"llm end {agent.name} ({response.finish_reason})")

    async def on_tool_start(self, ctx, agent, call):  # type: ignore[no-untyped-def]
        self._add(ctx, f"tool {call.name}{call.arguments}")

    async def on_tool_end(self, ctx, agent, call, result):  # type: ignore[no-untyped-def]
        self._add(ctx, f"tool {call.name}{call.arguments} -> {result.content}")

    async def on_handoff(self, ctx, source, target):  # type: ignore[no-untyped-def]
        self._add(ctx, f"handoff {source.name} -> {target.name}")

    async def on_agent_end(self, ctx, agent, output):  # type: ignore[no-untyped-def]
        self._add(ctx, f"end {agent.name} {output!r} turns={ctx.turns}")


def test_run_hooks_see_the_runs_usage_turns_and_the_calls_arguments(tmp_path: Path) -> None:
    seen = Seen()
    tokens = {"input_tokens": 10, "output_tokens": 5}
    multiply = rg.Agent(
        "Multiply Agent",
        tools=[multiply_by_two],
        output_type=FinalResult,
        schema_on_every_call=True,
        model=ScriptedModel(
            [calls(call("multiply_by_two", {"x": 37}), **tokens), text('{"number": 74}', **tokens)]
        ),
    )
    start = rg.Agent(
        "Start Agent",
        tools=[random_number],
        handoffs=[multiply],
        model=ScriptedModel(
            [
                calls(call("random_number", {"max": 50}), **tokens),
                calls(call("transfer_to_multiply_agent"), **tokens),
            ]
        ),
    )
    assert rg.run(start, "go", hooks=seen).final_output == FinalResult(number=74)
    assert seen.lines == [
        "start Start Agent | 0 req 0 tok",
        "llm start Start Agent (1 items) | 0 req 0 tok",
        "llm end Start Agent (tool_calls) | 1 req 15 tok",
        'tool random_number{"max": 50} | 1 req 15 tok',
        'tool random_number{"max": 50} -> 37 | 1 req 15 tok',
        "llm start Start Agent (3 items) | 1 req 15 tok",
        "llm end Start Agent (tool_calls) | 2 req 30 tok",
        "handoff Start Agent -> Multiply Agent | 2 req 30 tok",
        "start Multiply Agent | 2 req 30 tok",
        "llm start Multiply Agent (5 items) | 2 req 30 tok",
        "llm end Multiply Agent (tool_calls) | 3 req 45 tok",
        'tool multiply_by_two{"x": 37} | 3 req 45 tok',
        'tool multiply_by_two{"x": 37} -> 74 | 3 req 45 tok',
        "llm start Multiply Agent (7 items) | 3 req 45 tok",
        "llm end Multiply Agent (stop) | 4 req 60 tok",
        "end Multiply Agent FinalResult(number=74) turns=4 | 4 req 60 tok",
    ]


def test_model_call_events_go_only_to_runs_whose_hooks_have_model_call_hooks() -> None:
    class Requests(rg.RunHooks):
        def __init__(self) -> None:
            self.systems: list[str] = []

        def on_llm_start(self, ctx, agent, request):  # type: ignore[no-untyped-def]
            self.systems.append(request.system)

    agent = rg.Agent("sdk_llm_events", "Be brief.", model=FunctionModel(lambda r: text("ok")))
    hooks = Requests()
    handle = rg.start(agent, "hi", hooks=hooks)
    handle.result(timeout_s=60)
    assert hooks.systems == ["Be brief."]
    llm_events = [e for e in handle.events() if e.type in ("llm_start", "llm_end")]
    assert [e.type for e in llm_events] == ["llm_start", "llm_end"]
    assert llm_events[1].response is not None and llm_events[1].response.message.text == "ok"
    plain = rg.start(agent, "hi", hooks=rg.RunHooks())  # (no model-call hooks of its own)
    plain.result(timeout_s=60)
    assert not [e for e in plain.events() if e.type in ("llm_start", "llm_end")]


def test_a_tool_that_ends_the_run_gives_its_return_value_typed_as_declared() -> None:
    seen = Seen()
    first = rg.Agent(
        "sdk_stop_first",
        tools=[final_number],
        tool_use_behavior="stop_on_first_tool",
        model=ScriptedModel([calls(call("final_number", {"x": 3}))]),
    )
    result = rg.run(first, "go", hooks=seen)
    assert result.final_output == FinalResult(number=3)
    assert result.final_output_as(FinalResult).number == 3
    assert seen.lines[-1].startswith("end sdk_stop_first FinalResult(number=3)")
    at = rg.Agent(
        "sdk_stop_at",
        tools=[weather, multiply_by_two],
        tool_use_behavior=rg.StopAtTools(["weather"]),
        model=ScriptedModel(
            [calls(call("multiply_by_two", {"x": 1}), call("weather", {"city": "Oslo"}))]
        ),
    )
    assert rg.run(at, "go").final_output == Weather("Oslo", 21)
    counted = rg.Agent(
        "sdk_stop_plain",
        tools=[multiply_by_two],
        tool_use_behavior="stop_on_first_tool",
        model=ScriptedModel([calls(call("multiply_by_two", {"x": 4}))]),
    )
    assert rg.run(counted, "go").final_output == 8


def test_a_tool_use_behavior_function_may_be_async() -> None:
    async def first_warm(ctx: rg.RunContext, results: list[Any]) -> Any:
        warm = [json.loads(r.content) for _, r in results if "degrees" in r.content]
        return f"{warm[0]['city']} is warm" if warm else None

    agent = rg.Agent(
        "sdk_async_behavior",
        tools=[weather],
        tool_use_behavior=first_warm,
        model=ScriptedModel([calls(call("weather", {"city": "Rome"}))]),
    )
    result = rg.run(agent, "warm?")
    assert result.final_output == "Rome is warm" and result.usage.requests == 1


@dataclasses.dataclass
class Airline:
    flight: str | None = None


def test_context_types_are_subscriptable() -> None:
    agent = rg.Agent[Airline]("sdk_generic", model="m")
    assert isinstance(agent, rg.Agent)
    assert rg.RunContext[Airline]("r", "a", Airline()).context == Airline()
    assert issubclass(type(rg.RunHooks[Airline]()), rg.RunHooks)
    assert rg.ToolContext[Airline] is not None

    @rg.tool(remote=False)
    def book(ctx: rg.ToolContext[Airline], seat: str) -> str:
        """Book a seat."""
        return seat

    assert book.takes_context and list(book.parameters["properties"]) == ["seat"]


def test_a_streamed_handle_and_the_new_items_know_their_agents() -> None:
    target = rg.Agent("sdk_items_target", model=ScriptedModel([text("done")]))
    source = rg.Agent(
        "sdk_items_source",
        tools=[multiply_by_two],
        handoffs=[target],
        model=ScriptedModel(
            [
                calls(call("multiply_by_two", {"x": 2})),
                calls(call("transfer_to_sdk_items_target")),
            ]
        ),
    )
    handle = rg.run_streamed(source, "go")
    assert handle.final_output is None
    with pytest.raises(rg.UserError, match="has not ended yet"):
        handle.to_input_list()
    seen = {handle.current_agent.name for _ in handle.events()}  # type: ignore[union-attr]
    assert seen <= {"sdk_items_source", "sdk_items_target"}
    result = handle.result(timeout_s=60)
    assert handle.current_agent is target and handle.final_output == "done"
    assert handle.final_output_as(str) == "done"
    assert handle.to_input_list() == result.to_input_list()
    items = result.new_items
    assert [(i.type, i.agent.name) for i in items] == [
        ("tool_call_item", "sdk_items_source"),
        ("tool_call_output_item", "sdk_items_source"),
        ("tool_call_item", "sdk_items_source"),
        ("handoff_output_item", "sdk_items_source"),
        ("message_output_item", "sdk_items_target"),
    ]
    assert (items[3].source_agent, items[3].target_agent) == (source, target)
    assert items == result.messages[result.input_count :]  # (each item is its message)
