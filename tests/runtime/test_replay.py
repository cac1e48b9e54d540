"""Replay of recorded runs against new agent code, through the coordinator and from the
store alone: the same graph agrees, a renamed tool, a changed handoff and a new output type
are found, and no model and no tool is called."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel
from spaces import Namespaces

import raygents as rg
from raygents.core.compaction import SUMMARY_INSTRUCTIONS
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.testing import FunctionModel, call, calls, text

pytestmark = [pytest.mark.usefixtures("rt"), pytest.mark.timeout(120)]


@pytest.fixture
def store(module_raygents: Namespaces) -> str:
    """raygents on the module's namespace over a file store (its tests share both)."""
    return module_raygents.file_store()


@rg.tool(num_cpus=0)
def look(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


@rg.tool(num_cpus=0, name="lookup")
def look_renamed(city: str) -> str:
    """Look a city up (the new name)."""
    raise AssertionError("a replay runs no tool")


@rg.tool(num_cpus=0, needs_approval=True)
def book(city: str) -> str:
    """Book a trip."""
    return f"booked {city}"


class Forecast(BaseModel):
    city: str
    sky: str


def _forecast(req: ModelRequest) -> ModelResponse:
    if any(m.role == "tool" and "sunny" in (m.content or "") for m in req.messages):
        return text('{"city": "Paris", "sky": "sunny"}')
    return calls(call("look", {"city": "Paris"}))


def _never(req: ModelRequest) -> ModelResponse:
    raise AssertionError("a replay calls no model")


def _expert(output_type: object = Forecast, tools: list[rg.Tool] | None = None) -> rg.Agent:
    return rg.Agent(
        "rp_expert", tools=tools or [look], model=FunctionModel(_never), output_type=output_type
    )


def _triage(expert: rg.Agent) -> rg.Agent:
    return rg.Agent("rp_triage", handoffs=[expert], model=FunctionModel(_never))


def _handoff_then_forecast(req: ModelRequest) -> ModelResponse:
    if not any(m.role == "tool" for m in req.messages):
        return calls(call("transfer_to_rp_expert", {}))
    return _forecast(req)


def _recorded(tmp_path: Path) -> rg.RunResult:
    """A completed run: triage hands off to the expert, which looks up and answers typed."""
    expert = rg.Agent(
        "rp_expert", tools=[look], model=FunctionModel(_forecast), output_type=Forecast
    )
    triage = rg.Agent("rp_triage", handoffs=[expert], model=FunctionModel(_handoff_then_forecast))
    return rg.run(triage, "weather in Paris?")


def test_the_same_graph_agrees_through_the_coordinator_and_the_store(
    store: str, tmp_path: Path
) -> None:
    recorded = _recorded(tmp_path)
    run_id = recorded.run_id
    graph = _triage(_expert())
    report = rg.replay(run_id, agent=graph)
    assert report.ok and report.checked == len(recorded.messages), report
    assert rg.replay(run_id, agent=graph, store=store) == report


def test_new_code_that_decides_otherwise_is_found(store: str, tmp_path: Path) -> None:
    run_id = _recorded(tmp_path).run_id
    renamed = rg.replay(run_id, agent=_triage(_expert(tools=[look_renamed])))
    assert not renamed.ok and renamed.turn == 2
    assert renamed.got is not None and "unknown tool 'look'" in renamed.got
    retyped = rg.replay(run_id, agent=_triage(_expert(output_type=int)))
    assert not retyped.ok and retyped.got is not None
    assert retyped.got.startswith("OutputValidationError")
    other = rg.Agent("rp_other", model=FunctionModel(_never))
    rewired = rg.Agent("rp_triage", handoffs=[other, _expert()], model=FunctionModel(_never))
    assert rg.replay(run_id, agent=rewired).ok  # (a handoff added beside it changes nothing)


def _look_then_book(req: ModelRequest) -> ModelResponse:
    if not any(m.role == "tool" for m in req.messages):
        return calls(call("look", {"city": "Paris"}))
    return calls(call("book", {"city": "Paris"}))


def test_a_run_awaiting_approval_is_checked_before_new_code_resumes_it(store: str) -> None:
    agent = rg.Agent("rp_trip", tools=[look, book], model=FunctionModel(_look_then_book))
    handle = rg.start(agent, "trip")
    with pytest.raises(rg.RunInterrupted):
        handle.result(timeout_s=60)
    same = rg.Agent("rp_trip", tools=[look, book], model=FunctionModel(_never))
    assert rg.replay(handle.run_id, agent=same, store=store).ok
    fewer = rg.Agent("rp_trip", tools=[look], model=FunctionModel(_never))
    report = rg.replay(handle.run_id, agent=fewer, store=store)
    assert not report.ok and report.got is not None and "unknown tool 'book'" in report.got


def test_a_completed_run_replays_from_the_agent_it_started_on(store: str, tmp_path: Path) -> None:
    run_id = _recorded(tmp_path).run_id
    # a graph that starts elsewhere but holds the run's agents: the replay starts on the run's
    # start agent (its kept result names it), not on the graph's
    hub = rg.Agent("rp_hub", handoffs=[_triage(_expert())], model=FunctionModel(_never))
    report = rg.replay(run_id, agent=hub)
    assert report.ok, report
    assert rg.replay(run_id, agent=hub, store=store) == report


def _input_only(data: rg.HandoffInputData) -> list[rg.Message]:
    return list(data.input_history)


def test_a_completed_run_whose_handoff_rewrote_its_history_is_refused(store: str) -> None:
    expert = rg.Agent("rp_expert", tools=[look], model=FunctionModel(_forecast))
    triage = rg.Agent(
        "rp_triage",
        handoffs=[rg.handoff(expert, input_filter=_input_only)],
        model=FunctionModel(_handoff_then_forecast),
    )
    run_id = rg.run(triage, "weather in Paris?").run_id
    with pytest.raises(rg.UserError, match="input filter rewrote its history"):
        rg.replay(run_id, agent=triage)


def _look_thrice_then_answer(req: ModelRequest) -> ModelResponse:
    if req.system == SUMMARY_INSTRUCTIONS:
        return text("looked Paris up before")
    done = sum(m.role == "tool" for m in req.messages)
    if done >= 3 or any(m.summary for m in req.messages):
        return text("sunny")
    return calls(call("look", {"city": "Paris"}))


def test_a_completed_run_whose_history_was_compacted_is_refused_as_compacted(store: str) -> None:
    """The error names the compaction, not an input filter the run never went through: from
    the run's summary when the new graph has no policy, from the graph's policy otherwise."""
    summarized = rg.Agent(
        "rp_summarized",
        tools=[look],
        model=FunctionModel(_look_thrice_then_answer),
        compaction=rg.Compaction(trigger_tokens=1, keep_last_turns=1),
    )
    done = rg.run(summarized, "weather in Paris?")
    assert any(m.summary for m in done.messages)
    plain = rg.Agent("rp_summarized", tools=[look], model=FunctionModel(_never))
    with pytest.raises(rg.UserError, match="had its history compacted") as refused:
        rg.replay(done.run_id, agent=plain)
    assert "input filter" not in str(refused.value)
    trimmed = rg.Agent(
        "rp_trimmed",
        tools=[look],
        model=FunctionModel(_look_thrice_then_answer),
        compaction=rg.TrimToolOutputs(0, keep_last_turns=1),
    )
    run_id = rg.run(trimmed, "weather in Paris?").run_id
    with pytest.raises(rg.UserError, match="had its history compacted"):
        rg.replay(run_id, agent=trimmed)
