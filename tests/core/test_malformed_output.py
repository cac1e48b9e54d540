"""Malformed model output through real agent actors: bounded corrections, ``ModelOutputError``
across the process boundary, the count kept over a suspend and resume, and ``LimitExceeded``."""

from __future__ import annotations

import os
import time

import pytest

import raygents as rg
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


def unique(name: str) -> str:
    return f"{name}_{os.urandom(3).hex()}"


@rg.tool(num_cpus=0)
def slow(x: int) -> int:
    """Return x after a second."""
    time.sleep(1.0)
    return x


def test_malformed_arguments_past_the_default_limit_fail_the_run() -> None:
    bad = [calls(call("slow", "{oops", id=f"c{i}")) for i in range(4)]
    model = ScriptedModel(bad)
    agent = rg.Agent(unique("sloppy"), tools=[slow], model=model)
    handle = rg.start(agent, "go")
    with pytest.raises(rg.ModelOutputError) as info:
        handle.result(timeout_s=60)
    error = info.value
    assert (error.agent_name, error.tool_name, error.max_output_retries) == (agent.name, "slow", 3)
    assert error.excerpt == "'{oops'" and error.run_id == handle.run_id
    assert "arguments are not valid JSON" in str(error)
    assert len(model.calls) == 4
    corrections = [m for m in model.calls[-1].messages if m.role == "tool"]
    assert len(corrections) == 3 and all("Invalid parameters" in m.text for m in corrections)


@pytest.mark.parametrize("retries", [0, 1])
def test_an_agents_own_max_output_retries_is_the_one_its_runs_get(retries: int) -> None:
    bad = [calls(call("slow", "{oops", id=f"c{i}")) for i in range(retries + 1)]
    model = ScriptedModel(bad)
    agent = rg.Agent(unique("strict"), tools=[slow], model=model, max_output_retries=retries)
    with pytest.raises(rg.ModelOutputError) as info:
        rg.start(agent, "go").result(timeout_s=60)
    assert info.value.max_output_retries == retries
    assert len(model.calls) == retries + 1


def script(request: ModelRequest) -> ModelResponse:
    """A malformed call, a good one (the run is suspended while it runs), then malformed
    calls: the fourth malformed reply is past the limit only if the count survived."""
    replies = sum(1 for m in request.messages if m.role == "assistant")
    if replies == 1:
        return calls(call("slow", {"x": 1}, id="good"))
    if replies <= 4:
        return calls(call("slow", "[1]", id=f"bad{replies}"))
    return text("the count was lost")


def test_the_count_of_corrections_survives_a_suspend_and_resume() -> None:
    agent = rg.Agent(unique("resumed_sloppy"), tools=[slow], model=FunctionModel(script))
    handle = rg.start(agent, "go")
    next(e for e in handle.events() if e.type == "tool_start")
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    with pytest.raises(rg.ModelOutputError, match="must be a JSON object"):
        rg.resume(handle.run_id, agent=agent).result(timeout_s=60)


def test_every_limit_is_a_limit_exceeded_with_its_name_and_value() -> None:
    model = FunctionModel(lambda request: calls(call("slow", {"x": 1})))
    agent = rg.Agent(unique("looping"), tools=[slow], model=model, max_turns=2)
    handle = rg.start(agent, "go")
    with pytest.raises(rg.LimitExceeded) as info:
        handle.result(timeout_s=60)
    error = info.value
    assert isinstance(error, rg.MaxTurnsExceeded)
    assert (error.limit, error.value, error.run_id) == ("max_turns", 2, handle.run_id)
