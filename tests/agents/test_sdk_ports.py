"""Ports of the OpenAI Agents SDK's documented patterns (fake models): typed output read on the
driver, the schema on every call, and output guardrails that see the typed object."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pydantic import BaseModel

import raygents as rg
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@dataclasses.dataclass
class Feedback:
    score: int
    feedback: str


class Outline(BaseModel):
    title: str
    sections: list[str]


@rg.tool(remote=False)
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic}"


def test_llm_as_a_judge_reads_a_typed_verdict() -> None:
    """The judge's ``final_output`` is a ``Feedback`` made in the driver; the writer's is text."""
    writer = rg.Agent("port_writer", model=ScriptedModel([text("a story")]))
    judge = rg.Agent(
        "port_judge",
        output_type=Feedback,
        model=ScriptedModel([text(json.dumps({"score": 4, "feedback": "good"}))]),
    )
    story = rg.run(writer, "write").final_output
    verdict = rg.run(judge, story)
    assert verdict.final_output == Feedback(4, "good")
    assert verdict.final_output_as(Feedback) is verdict.final_output
    assert json.loads(verdict.final_output_as(str)) == {"score": 4, "feedback": "good"}
    assert verdict.usage.requests == 1


def test_the_schema_on_every_call_saves_the_synthesis_call() -> None:
    def answer(request: rg.ModelRequest) -> rg.ModelResponse:
        assert request.response_format is not None  # every call carries the schema
        if request.messages[-1].role == "tool":
            return text(json.dumps({"title": "T", "sections": ["a"]}))
        return calls(call("lookup", {"topic": "rays"}))

    agent = rg.Agent(
        "port_outliner",
        tools=[lookup],
        output_type=Outline,
        schema_on_every_call=True,
        model=FunctionModel(answer),
    )
    result = rg.run(agent, "outline")
    assert result.final_output == Outline(title="T", sections=["a"])
    assert result.usage.requests == 2  # the default (explore, then synthesise) makes 3
    assert [m.role for m in result.new_items] == ["assistant", "tool", "assistant"]


def test_an_output_guardrail_trips_on_the_typed_object() -> None:
    @rg.output_guardrail
    def no_empty_outline(ctx, message, output: Outline):  # type: ignore[no-untyped-def]
        return rg.GuardrailResult(not output.sections, "an outline needs sections")

    agent = rg.Agent(
        "port_guarded",
        output_type=Outline,
        output_guardrails=[no_empty_outline],
        model=ScriptedModel([text(json.dumps({"title": "T", "sections": []}))]),
    )
    with pytest.raises(rg.OutputGuardrailTripped, match="needs sections") as info:
        rg.run(agent, "outline")
    assert info.value.guardrail == "no_empty_outline"


def test_agents_as_tools_with_an_extractor_and_a_switch() -> None:
    """The orchestrator offers only the enabled translators; the extractor reads the child's
    typed result."""
    spanish = rg.Agent(
        "port_spanish",
        output_type=Outline,
        model=FunctionModel(lambda r: text(json.dumps({"title": "Hola", "sections": ["uno"]}))),
    )
    french = rg.Agent("port_french", model=FunctionModel(lambda r: text("Bonjour")))

    def title_only(result: rg.RunResult) -> str:
        return f"{result.last_agent.name}: {result.final_output_as(Outline).title}"

    def orchestrate(request: rg.ModelRequest) -> rg.ModelResponse:
        if request.messages[-1].role == "tool":  # (the model runs in the actor: it reports)
            offered = ",".join(t.name for t in request.tools)
            return text(f"{request.messages[-1].text} (offered {offered})")
        return calls(call("translate_to_spanish", {"input": "hello"}))

    orchestrator = rg.Agent(
        "port_orchestrator",
        model=FunctionModel(orchestrate),
        tools=[
            spanish.as_tool(
                tool_name="translate_to_spanish",
                tool_description="Translate to Spanish.",
                custom_output_extractor=title_only,
            ),
            french.as_tool(
                tool_name="translate_to_french",
                tool_description="Translate to French.",
                is_enabled=lambda ctx, agent: ctx.context == "fr",
            ),
        ],
    )
    result = rg.run(orchestrator, "Say hello in Spanish", context="es")
    assert result.final_output == "port_spanish: Hola (offered translate_to_spanish)"


def test_forcing_tool_use_with_a_final_output_function() -> None:
    """``tool_use_behavior`` as a function: the weather tool's answer is the run's output."""

    def from_tools(ctx: rg.RunContext, results: list) -> str | None:  # type: ignore[type-arg]
        return next((r.content for c, r in results if c.name == "lookup"), None)

    agent = rg.Agent(
        "port_forced",
        tools=[lookup],
        model_settings=rg.ModelSettings(tool_choice="required"),
        tool_use_behavior=from_tools,
        model=ScriptedModel([calls(call("lookup", {"topic": "Tokyo"}))]),
    )
    result = rg.run(agent, "weather in Tokyo?")
    assert result.final_output == "facts about Tokyo" and result.usage.requests == 1
