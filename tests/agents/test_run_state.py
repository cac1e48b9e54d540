"""The SDK's human-in-the-loop shape: ``interruptions``, a ``RunState`` to approve or reject
on, passed back to ``run`` with the run's context; and ``as_tool(needs_approval=)``."""

from __future__ import annotations

import json

import pytest

import raygents as rg
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@rg.tool(num_cpus=0)
def get_weather(ctx: rg.ToolContext, city: str) -> str:
    """The weather in a city."""
    ctx.context["asked"].append(city)
    return f"sunny in {city}"


@rg.tool(num_cpus=0, needs_approval=True)
def get_temperature(ctx: rg.ToolContext, city: str) -> str:
    """The temperature in a city (a person approves each call)."""
    ctx.context["asked"].append(f"temperature {city}")
    return f"20C in {city}"


def weather_model() -> FunctionModel:
    def reply(request: rg.ModelRequest) -> rg.ModelResponse:
        done = [m.text for m in request.messages if m.role == "tool"]
        if not done:
            return calls(call("get_weather", {"city": "Oakland"}, id="w"))
        if len(done) == 1:
            return calls(call("get_temperature", {"city": "Oakland"}, id="t"))
        return text(" / ".join(done))

    return FunctionModel(reply)


def test_the_sdk_loop_approves_on_the_state_and_keeps_the_context() -> None:
    agent = rg.Agent("hitl_weather", tools=[get_weather, get_temperature], model=weather_model())
    context = {"asked": []}
    try:
        result = rg.run(agent, "Weather and temperature in Oakland?", context=context)
    except rg.RunInterrupted as interrupted:
        assert [(i.tool_name, i.arguments) for i in interrupted.interruptions] == [
            ("get_temperature", '{"city": "Oakland"}')
        ]
        state = interrupted.to_state()
        assert state.context == {"asked": ["Oakland"]}, "the context as the run left it"
        for interruption in state.get_interruptions():
            state.approve(interruption)
        result = rg.run(agent, state)
    assert not result.interruptions
    assert result.final_output == "sunny in Oakland / 20C in Oakland"
    assert result.context == {"asked": ["Oakland", "temperature Oakland"]}


def test_a_rejected_call_gets_the_rejection_message() -> None:
    agent = rg.Agent("hitl_reject", tools=[get_weather, get_temperature], model=weather_model())
    with pytest.raises(rg.RunInterrupted) as info:
        rg.run(agent, "go", context={"asked": []})
    state = info.value.to_state()
    state.reject(state.get_interruptions()[0], rejection_message="not allowed today")
    handle = rg.run_streamed(agent, state)
    deltas = "".join(e.delta or "" for e in handle.events() if e.type == "llm_delta")
    result = handle.result(timeout_s=60)
    assert result.final_output == "sunny in Oakland / not allowed today"
    assert deltas == result.final_output, "run_streamed resumes streaming"
    assert result.context == {"asked": ["Oakland"]}, "the rejected call did not run"


def test_a_state_travels_as_json_and_refuses_what_it_cannot_do() -> None:
    agent = rg.Agent("hitl_json", tools=[get_weather, get_temperature], model=weather_model())
    with pytest.raises(rg.RunInterrupted) as info:
        rg.run(agent, "go", context={"asked": []})
    state = info.value.to_state()
    with pytest.raises(rg.UserError, match="without a decision"):
        rg.run(agent, state)
    with pytest.raises(rg.UserError, match="not a pending call"):
        state.approve("no-such-call")
    with pytest.raises(rg.UserError, match="always_approve"):
        state.approve(state.get_interruptions()[0], always_approve=True)
    state.approve("t")
    with pytest.raises(rg.UserError, match="not max_turns"):
        rg.run(agent, state, max_turns=3)
    copy = rg.RunState.from_json(json.loads(json.dumps(state.to_json())))
    assert copy == state
    assert rg.run(agent, copy).final_output == "sunny in Oakland / 20C in Oakland"
    with pytest.raises(rg.UserError, match="not a RunState"):
        rg.RunState.from_json({"interruptions": []})


def test_an_interrupted_error_without_a_state_says_what_to_use() -> None:
    with pytest.raises(rg.UserError, match="resume"):
        rg.RunInterrupted("made by hand").to_state()


def test_an_agent_tool_can_need_approval() -> None:
    helper = rg.Agent("hitl_helper", model=ScriptedModel([text("helped")]))
    agent = rg.Agent(
        "hitl_boss",
        tools=[helper.as_tool(needs_approval=True)],
        model=ScriptedModel([calls(("hitl_helper", {"input": "help"})), text("thanks")]),
    )
    with pytest.raises(rg.RunInterrupted) as info:
        rg.run(agent, "go")
    state = info.value.to_state()
    assert [i.tool_name for i in state.get_interruptions()] == ["hitl_helper"]
    state.approve(state.get_interruptions()[0])
    result = rg.run(agent, state)
    assert result.final_output == "thanks"
    assert next(m.text for m in result.messages if m.role == "tool") == "helped"
    with pytest.raises(rg.UserError, match="needs_approval"):
        helper.as_tool(needs_approval="yes")  # type: ignore[arg-type]
