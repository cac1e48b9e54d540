"""Recursion bombs: handoff cycles, self-handoff, deep agent-as-tool chains and fan-outs that
spawn sub-agents every turn stop at a limit, and the total work (model calls, counted by the
scripted model) stays within the run's budget."""

from __future__ import annotations

import os
from typing import Any

import pytest

import raygents as rg
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.testing import ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


def unique(name: str) -> str:
    return f"{name}_{os.urandom(3).hex()}"


def handoff_to(tool: str) -> Any:
    def step(request: ModelRequest) -> ModelResponse:
        return calls(call(tool, {}))

    return step


def spawn(tool: str, width: int) -> Any:
    """A step that calls ``tool`` ``width`` times, whatever it was told."""

    def step(request: ModelRequest) -> ModelResponse:
        return calls(*[call(tool, {"input": f"part {i}"}) for i in range(width)])

    return step


def test_a_handoff_cycle_stops_at_max_turns() -> None:
    a_name, b_name = unique("ping"), unique("pong")
    model = ScriptedModel(
        [handoff_to(f"transfer_to_{b_name}"), handoff_to(f"transfer_to_{a_name}")] * 20
    )
    a = rg.Agent(a_name, model=model, max_turns=5)
    b = rg.Agent(b_name, model=model, max_turns=5)
    a.handoffs, b.handoffs = [b], [a]
    with pytest.raises(rg.MaxTurnsExceeded):
        rg.run(a, "go")
    assert len(model.calls) == 5


def test_an_agent_handing_off_to_itself_stops_at_max_turns() -> None:
    name = unique("selfie")
    model = ScriptedModel([handoff_to(f"transfer_to_{name}")] * 40)
    agent = rg.Agent(name, model=model, max_turns=4)
    agent.handoffs = [agent]
    with pytest.raises(rg.MaxTurnsExceeded):
        rg.run(agent, "go", max_turns=3)
    assert len(model.calls) == 3


def test_an_agent_calling_itself_as_a_tool_50_deep_stops_at_its_depth() -> None:
    """Each level calls the agent that called it; the child run ids stay short at depth 50
    (they passed the store's 128-character segment limit at depth 4 before)."""
    name = unique("deep")

    def step(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role == "tool":
            return text(f"up from {last.text[:40]}")
        return calls(call(name, {"input": "deeper"}, id="call_" + "Ab3dE" * 5))

    model = ScriptedModel([step] * 200)
    agent = rg.Agent(name, model=model, max_tool_depth=50)
    agent.tools = [agent.as_tool()]
    result = rg.run(agent, "go")
    assert result.final_output.startswith("up from")
    assert len(model.calls) == 2 * 51  # levels 0..50: a call each way; level 50 is refused
    assert result.usage.requests == 2 * 51


def test_a_fan_out_that_spawns_ten_sub_agents_every_turn_stays_within_the_budget() -> None:
    name = unique("fan")
    model = ScriptedModel([spawn(name, 10)] * 400)
    agent = rg.Agent(name, model=model, max_turns=10, max_model_calls=40)
    agent.tools = [agent.as_tool()]
    with pytest.raises(rg.MaxTurnsExceeded, match="budget of 40 model calls"):
        rg.run(agent, "go")
    assert 10 < len(model.calls) <= 40  # unbounded (10 per turn, per level) without the budget
