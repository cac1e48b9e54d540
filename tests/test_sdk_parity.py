"""What code written for the OpenAI Agents SDK relies on, without Ray: typed results, the
opt-in schema on every call, typed output guardrails and run-level hook delivery."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from pydantic import BaseModel

import raygents as rg
from raygents import loop
from raygents.envelope import RunState
from raygents.errors import OutputValidationError
from raygents.events import RunEvent
from raygents.guardrails import bind_output_type, run_output_guardrails
from raygents.hooks import HookRelay
from raygents.messages import Message, ToolCall, ToolSpec
from raygents.result import RunResult, parse_output
from raygents.runtime.toolbox import Toolbox
from raygents.schema import type_schema
from raygents.testing import calls, text
from raygents.tools import RunContext


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
    assert rg.messages.to_messages(following)[:4] == messages


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
