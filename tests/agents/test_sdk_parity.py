"""What code written for the OpenAI Agents SDK relies on, without Ray: typed results, the
opt-in schema on every call, typed output guardrails and run-level hook delivery."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

import raygents as rg
from raygents.agents.guardrails import bind_output_type, run_output_guardrails
from raygents.agents.result import RunResult
from raygents.core import loop
from raygents.core.context import RunContext
from raygents.core.envelope import RunState
from raygents.core.events import RunEvent
from raygents.core.messages import Message, ReasoningItem, ToolCall, ToolSpec, to_messages
from raygents.core.schema import parse_output, type_schema
from raygents.errors import OutputValidationError
from raygents.runtime.actor.toolbox import Toolbox
from raygents.runtime.driver.hookrelay import HookRelay
from raygents.testing import calls, text


class Verdict(BaseModel):
    score: int
    feedback: str


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


def result(output: Any, text_: str, messages: tuple[Message, ...] = ()) -> RunResult:
    return RunResult(
        run_id="r",
        final_output=output,
        messages=messages,
        usage=rg.Usage(),
        turns=1,
        last_agent=rg.Agent("judge"),
        output_text=text_,
        input_count=1,
    )


# --- typed results ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output_type", "raw", "expected"),
    [
        (Verdict, '{"score": 3, "feedback": "ok"}', Verdict(score=3, feedback="ok")),
        (Point, '{"x": 1, "y": null}', Point(1, 0)),
        (list[int], '{"value": [1, 2]}', [1, 2]),
        (str, "plain", "plain"),
        (None, "plain", "plain"),
    ],
)
def test_parse_output_gives_the_type_or_the_text(output_type: Any, raw: str, expected: Any) -> None:
    assert parse_output(raw, output_type) == expected


def test_parse_output_names_the_failing_paths() -> None:
    with pytest.raises(OutputValidationError) as info:
        parse_output('{"score": "high", "feedback": "ok"}', Verdict, run_id="r")
    assert info.value.errors[0][0] == "/score" and info.value.run_id == "r"


def test_final_output_as_returns_the_instance_the_text_or_parses_text() -> None:
    verdict = Verdict(score=3, feedback="ok")
    typed = result(verdict, verdict.model_dump_json())
    assert typed.final_output_as(Verdict) is verdict
    assert json.loads(typed.final_output_as(str)) == {"score": 3, "feedback": "ok"}
    untyped = result('{"score": 3, "feedback": "ok"}', '{"score": 3, "feedback": "ok"}')
    assert untyped.final_output_as(Verdict) == verdict
    with pytest.raises(TypeError):
        typed.final_output_as(Point, raise_if_incorrect_type=True)


def test_new_items_and_to_input_list_continue_a_conversation() -> None:
    messages = (
        Message("user", "hi"),
        Message("assistant", None, tool_calls=(ToolCall("c1", "look"),)),
        Message("tool", "found", tool_call_id="c1"),
        Message("assistant", "bye"),
    )
    done = result("bye", "bye", messages)
    assert done.new_items == messages[1:]
    following = [*done.to_input_list(), {"role": "user", "content": "again"}]
    assert to_messages(following)[:4] == messages


def test_to_input_list_keeps_reasoning_items_for_the_next_run() -> None:
    thought = ReasoningItem(api="openai.responses", data={"type": "reasoning", "id": "r1"})
    messages = (
        Message("user", "hi"),
        Message("assistant", "hello", reasoning=(thought,)),
    )
    items = result("hello", "hello", messages).to_input_list()
    assert items[1]["reasoning"] == [{"api": "openai.responses", "data": thought.data}]
    assert "reasoning" not in items[0]
    assert to_messages(items) == messages
    assert json.loads(json.dumps(items)) == items  # plain JSON, as an input list may travel
    with pytest.raises(rg.UserError, match=r"input item #0: 'reasoning'"):
        to_messages([{"role": "assistant", "content": "x", "reasoning": "thinking aloud"}])


def test_to_input_list_keeps_a_compaction_summary_a_summary() -> None:
    """The next run gets the summary back as one (a later compaction or a session save
    treats it as a summary), not as something the user said."""
    messages = (
        Message("user", "what we said so far, in short", summary=True),
        Message("user", "and now?"),
        Message("assistant", "this"),
    )
    items = result("this", "this", messages).to_input_list()
    assert items[0]["summary"] is True and items[0]["role"] == "user"
    assert all("summary" not in item for item in items[1:])
    assert to_messages(items) == messages and to_messages(items)[0].summary
    assert json.loads(json.dumps(items)) == items
    assert not to_messages([{"role": "user", "content": "x", "summary": False}])[0].summary
    with pytest.raises(rg.UserError, match=r"input item #1: 'summary' must be true or false"):
        to_messages([{"role": "user", "content": "x"}, {"role": "user", "summary": "yes"}])


# --- the schema on every call ----------------------------------------------------------------

TOOL = ToolSpec(name="look", description="", parameters={"type": "object", "properties": {}})
SCHEMA = {"name": "verdict", "schema": type_schema(Verdict)}


def view(every_call: bool) -> loop.AgentView:
    return loop.AgentView(
        name="judge", tools=(TOOL,), output_schema=SCHEMA, schema_on_every_call=every_call
    )


def started(v: loop.AgentView) -> tuple[RunState, loop.CallModel | loop.Fail]:
    state = RunState(run_id="r", agent_name="judge", messages=(Message("user", "rate"),))
    return loop.next_turn(loop.activate(state, v), v)


def test_by_default_a_typed_agent_with_tools_explores_then_synthesises() -> None:
    v = view(False)
    state, first = started(v)
    assert isinstance(first, loop.CallModel) and first.request.response_format is None
    state, then = loop.on_response(state, v, text("I looked"))
    assert isinstance(then, loop.CallModel)
    assert then.request.response_format == SCHEMA and then.request.settings.tool_choice == "none"
    state, end = loop.on_response(state, v, text('{"score": 1, "feedback": "x"}'))
    assert isinstance(end, loop.Finish) and state.usage.requests == 2  # one call more


def test_schema_on_every_call_ends_with_the_first_valid_answer() -> None:
    v = view(True)
    state, first = started(v)
    assert isinstance(first, loop.CallModel)
    assert first.request.response_format == SCHEMA and first.request.tools == (TOOL,)
    assert first.request.settings.tool_choice is None
    state, batch = loop.on_response(state, v, calls(("look", {})))
    assert isinstance(batch, loop.RunTools)
    state, again = loop.on_results(state, v, batch, [rg.ToolResult("seen")])
    assert isinstance(again, loop.CallModel) and again.request.response_format == SCHEMA
    state, end = loop.on_response(state, v, text('{"score": 2, "feedback": "y"}'))
    assert isinstance(end, loop.Finish) and state.usage.requests == 2


def test_schema_on_every_call_still_validates_the_answer() -> None:
    v = view(True)
    state, _ = started(v)
    _, end = loop.on_response(state, v, text("not json"))
    assert isinstance(end, loop.Fail) and isinstance(end.error, OutputValidationError)


# --- typed output guardrails -----------------------------------------------------------------


def test_a_typed_agents_output_guardrail_gets_the_typed_object_and_the_message() -> None:
    seen: list[Any] = []

    @rg.output_guardrail
    def low_scores(ctx: RunContext, message: Message, output: Verdict) -> bool:
        seen.append((message.text, output))
        return output.score < 2

    @rg.output_guardrail
    def plain(ctx: RunContext, message: Message) -> None:
        seen.append(message.text)

    agent = rg.Agent("judge", output_type=Verdict, output_guardrails=[low_scores, plain])
    Toolbox(agent)  # (as in the agent's actor)
    ctx = RunContext("r", "judge")
    reply = Message("assistant", '{"score": 1, "feedback": "meh"}')
    with pytest.raises(rg.OutputGuardrailTripped, match="low_scores"):
        asyncio.run(run_output_guardrails(agent.output_guardrails, ctx, reply))
    assert seen == [(reply.text, Verdict(score=1, feedback="meh"))]
    assert low_scores.output_type is None  # the agent got a copy; the original is unbound


def test_an_untyped_agents_three_argument_guardrail_gets_the_text() -> None:
    got: list[Any] = []
    guardrail = rg.output_guardrail(lambda ctx, message, output: got.append(output))
    guardrails = bind_output_type([guardrail], str)
    asyncio.run(run_output_guardrails(guardrails, RunContext("r", "a"), Message("assistant", "x")))
    assert got == ["x"] and guardrails == [guardrail]


# --- run-level hooks from events -------------------------------------------------------------


class Counter(rg.RunHooks):
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    async def on_run_start(self, ctx, agent, messages):  # type: ignore[no-untyped-def]
        self.calls.append(("run_start", agent.name, messages[0].text))

    def on_agent_start(self, ctx, agent):  # type: ignore[no-untyped-def]
        self.calls.append(("agent_start", agent.name))

    async def on_tool_start(self, ctx, agent, call):  # type: ignore[no-untyped-def]
        self.calls.append(("tool_start", agent.name, call.name))

    async def on_tool_end(self, ctx, agent, call, result):  # type: ignore[no-untyped-def]
        self.calls.append(("tool_end", agent.name, call.name, result.content))

    async def on_handoff(self, ctx, source, target):  # type: ignore[no-untyped-def]
        self.calls.append(("handoff", source.name, target.name))

    async def on_agent_end(self, ctx, agent, output):  # type: ignore[no-untyped-def]
        self.calls.append(("agent_end", agent.name, output))

    async def on_run_end(self, ctx, agent, output, error):  # type: ignore[no-untyped-def]
        self.calls.append(("run_end", agent.name, output, ctx.context))


def test_the_relay_turns_events_into_hook_calls_in_order() -> None:
    target = rg.Agent("target")
    source = rg.Agent("source", handoffs=[target])
    graph = {"source": source, "target": target}
    hooks = Counter()
    relay = HookRelay(hooks, graph, context="ctx")
    relay.run_started("r", source, [Message("user", "hi")])

    def event(kind: str, agent: str, **fields: Any) -> RunEvent:
        return RunEvent(type=kind, run_id="r", agent_name=agent, **fields)  # type: ignore[arg-type]

    async def drive() -> None:
        for e in (
            event("agent_start", "source"),
            event("llm_delta", "source", delta="x"),
            event("tool_start", "source", tool_name="look", call_id="c1", arguments="{}"),
            event("tool_end", "source", tool_name="look", call_id="c1", result="seen"),
            event("handoff", "source", to_agent="target"),
            event("agent_start", "target"),
            event("agent_end", "target", output="bye"),
            event("complete", "target", output="bye"),
            event("agent_start", "unknown"),
        ):
            relay.event(e)
        relay.run_ended("r", "target", "bye", None)
        await relay.drain()

    asyncio.run(drive())
    assert hooks.calls == [
        ("run_start", "source", "hi"),
        ("agent_start", "source"),
        ("tool_start", "source", "look"),
        ("tool_end", "source", "look", "seen"),
        ("handoff", "source", "target"),
        ("agent_start", "target"),
        ("agent_end", "target", "bye"),
        ("run_end", "target", "bye", "ctx"),
    ]


# --- the smaller differences -----------------------------------------------------------------


def test_annotated_and_field_descriptions_reach_the_tool_schema() -> None:
    @rg.tool
    def forecast(
        city: Annotated[str, "The city to forecast"],
        days: Annotated[int, Field(description="How many days", ge=1)] = 1,
        unit: str = Field("c", description="c or f", max_length=1),
        tags: list[str] = Field(default_factory=list),  # noqa: B008
    ) -> str:
        """Forecast the weather.

        Args:
            city: overridden by the annotation
            tags: labels for the answer
        """
        return f"{city} {days} {unit} {tags}"

    props = forecast.spec().parameters["properties"]
    assert props["city"]["description"] == "The city to forecast"
    assert props["days"]["description"] == "How many days" and props["days"]["minimum"] == 1
    assert props["unit"]["description"] == "c or f" and props["unit"]["maxLength"] == 1
    assert props["tags"]["description"] == "labels for the answer"
    nulls = json.dumps({"city": "Oslo", "days": None, "unit": None, "tags": None})
    assert forecast.parse_arguments(nulls) == {"city": "Oslo", "days": 1, "unit": "c", "tags": []}
    bad = forecast.parse_arguments(json.dumps({"city": "Oslo", "days": 0, "unit": "cc"}))
    assert isinstance(bad, rg.ToolResult) and bad.is_error


def test_as_tool_takes_the_sdk_names_and_checks_its_options() -> None:
    agent = rg.Agent("translator")
    by_sdk = agent.as_tool(tool_name="translate", tool_description="Translate text.")
    assert (by_sdk.name, by_sdk.description) == ("translate", "Translate text.")
    with pytest.raises(rg.UserError, match="both name= and tool_name="):
        agent.as_tool("a", tool_name="b")
    with pytest.raises(rg.UserError, match="custom_output_extractor"):
        agent.as_tool(custom_output_extractor="first line")  # type: ignore[arg-type]
    with pytest.raises(rg.UserError, match="is_enabled"):
        agent.as_tool(is_enabled="yes")  # type: ignore[arg-type]
    with pytest.raises(rg.UserError, match="is_enabled"):
        rg.handoff(agent, is_enabled=1)  # type: ignore[arg-type]


@rg.tool(remote=False)
def weather(city: str) -> str:
    """The weather."""
    return f"sunny in {city}"


@rg.tool(remote=False, is_enabled=lambda ctx, agent: ctx.context == "admin")
def wipe() -> str:
    """Wipe everything."""
    return "wiped"


def test_is_enabled_decides_per_activation_which_tools_and_handoffs_are_offered() -> None:
    billing = rg.Agent("billing")
    support = rg.Agent("support")
    agent = rg.Agent(
        "desk",
        tools=[weather, wipe],
        handoffs=[
            rg.handoff(billing, is_enabled=False),
            rg.handoff(support, is_enabled=lambda ctx, agent: agent.name == "desk"),
        ],
    )
    box = Toolbox(agent)
    state = RunState(run_id="r", agent_name="desk", messages=(Message("user", "hi"),))

    async def offered(context: Any) -> tuple[list[str], list[str], str]:
        await box.resolve_tools()
        v = await box.view(state, RunContext("r", "desk", context))
        return [t.name for t in v.tools], list(v.handoffs), v.system

    names, handoffs, system = asyncio.run(offered("guest"))
    assert names == ["weather", "transfer_to_support"] and handoffs == ["transfer_to_support"]
    assert "billing" not in system and "support" in system
    names, _, _ = asyncio.run(offered("admin"))
    assert names == ["weather", "wipe", "transfer_to_support"]


def test_a_tool_use_behavior_function_decides_the_final_output() -> None:
    seen: list[Any] = []

    def first_sunny(ctx: RunContext, results: list[Any]) -> Any:
        seen.append((ctx.context, [(c.name, r.content) for c, r in results]))
        sunny = [r.content for _, r in results if "sunny" in r.content]
        return {"answer": sunny[0]} if sunny else None

    agent = rg.Agent("forecaster", tools=[weather], tool_use_behavior=first_sunny)
    box = Toolbox(agent)
    state = RunState(run_id="r", agent_name="forecaster", messages=(Message("user", "hi"),))

    async def view() -> loop.AgentView:
        await box.resolve_tools()
        return await box.view(state, RunContext("r", "forecaster", "ctx"))

    v = asyncio.run(view())
    state, _ = loop.next_turn(loop.activate(state, v), v)
    state, batch = loop.on_response(state, v, calls(("weather", {"city": "Oslo"})))
    assert isinstance(batch, loop.RunTools)
    results = [rg.ToolResult("sunny in Oslo")]
    decided = asyncio.run(box.decided(v, state, "ctx", batch, results))
    _, end = loop.on_results(state, decided, batch, results)
    assert isinstance(end, loop.Finish) and json.loads(end.output) == {"answer": "sunny in Oslo"}
    assert seen == [("ctx", [("weather", "sunny in Oslo")])]
    with pytest.raises(rg.UserError, match="tool_use_behavior"):
        rg.Agent("bad", tool_use_behavior="stop")  # type: ignore[arg-type]


def test_usage_counts_requests_and_the_token_details_a_provider_reports() -> None:
    from openai.types.completion_usage import (
        CompletionTokensDetails,
        CompletionUsage,
        PromptTokensDetails,
    )

    from raygents.models.openai import _usage

    reported = CompletionUsage(
        prompt_tokens=100,
        completion_tokens=40,
        total_tokens=140,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=64),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=30),
    )
    usage = _usage(reported)
    assert (usage.cached_input_tokens, usage.reasoning_tokens) == (64, 30)
    plain = _usage(CompletionUsage(prompt_tokens=1, completion_tokens=2, total_tokens=3))
    total = usage + plain + rg.Usage(requests=2)
    assert (total.input_tokens, total.cached_input_tokens, total.requests) == (101, 64, 2)
