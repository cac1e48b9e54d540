"""A run's history: its durable checkpoints, oldest first, through the coordinator and from
the store alone, for runs awaiting approval, failed and completed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from spaces import Namespaces

import raygents as rg
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


@rg.tool(num_cpus=0, needs_approval=True)
def book(city: str) -> str:
    """Book a trip."""
    return f"booked {city}"


def _look_then_book(req: ModelRequest) -> ModelResponse:
    results = [m for m in req.messages if m.role == "tool"]
    if not results:
        return calls(call("look", {"city": "Paris"}))
    if len(results) == 1:
        return calls(call("book", {"city": "Paris"}))
    return text("booked")


def test_history_of_a_run_awaiting_approval_lists_each_checkpoint(store: str) -> None:
    agent = rg.Agent("hist_trip", tools=[look, book], model=FunctionModel(_look_then_book))
    handle = rg.start(agent, "trip to Paris")
    with pytest.raises(rg.RunInterrupted):
        handle.result(timeout_s=60)
    found = rg.history(handle.run_id)
    assert [c.seq for c in found] == list(range(1, len(found) + 1))
    reasons = [c.reason for c in found]
    assert reasons == ["intent", "results", "interrupt"]
    last = found[-1]
    assert last.agent_name == "hist_trip" and last.turn == 2
    assert last.messages == 4 and last.last == "assistant: calls book"
    assert all(isinstance(c.at, datetime) and c.at.tzinfo is UTC for c in found)
    assert [c.at for c in found] == sorted(c.at for c in found)
    assert rg.history(handle.run_id, store=store) == found  # the store alone reads the same


def _fail(req: ModelRequest) -> ModelResponse:
    if any(m.role == "tool" for m in req.messages):
        raise rg.ModelError("the provider refused", retryable=False)
    return calls(call("look", {"city": "Rome"}))


def test_history_of_a_failed_run_ends_with_its_failure(store: str) -> None:
    agent = rg.Agent("hist_fail", tools=[look], model=FunctionModel(_fail))
    handle = rg.start(agent, "Rome?")
    with pytest.raises(rg.ModelError):
        handle.result(timeout_s=60)
    found = rg.history(handle.run_id)
    assert found[-1].reason == "failed"
    assert found[-2].reason == "results" and found[-2].last == "tool: Rome: sunny"


def test_a_completed_run_keeps_its_final_state_only(store: str) -> None:
    agent = rg.Agent("hist_done", tools=[look], model=FunctionModel(_fail_free))
    result = rg.run(agent, "Oslo?")
    found = rg.history(result.run_id)
    assert [c.reason for c in found] == ["final"]
    final = found[0]
    assert final.messages == len(result.messages) and final.last == "assistant: Oslo is sunny"
    assert final.turn == result.turns and final.agent_name == "hist_done"
    assert rg.history(result.run_id, store=store) == found


def _fail_free(req: ModelRequest) -> ModelResponse:
    if any(m.role == "tool" for m in req.messages):
        return text("Oslo is sunny")
    return calls(call("look", {"city": "Oslo"}))


@pytest.fixture
def kept(module_raygents: Namespaces) -> str:
    """raygents on the module's namespace that keeps completed runs' records."""
    return module_raygents.file_store("kept", keep_history=True)


def test_keep_history_keeps_a_completed_runs_steps(kept: str, tmp_path: Path) -> None:
    agent = rg.Agent("hist_kept", tools=[look], model=FunctionModel(_fail_free))
    result = rg.run(agent, "Oslo?")
    found = rg.history(result.run_id)
    assert [c.reason for c in found] == ["intent", "results", "final"]
    assert found[-1].seq > found[-2].seq and found[-1].last == "assistant: Oslo is sunny"
    assert rg.history(result.run_id, store=kept) == found
    again = rg.fork(result.run_id, agent=agent, at=found[1].seq)  # (a step a completed run kept)
    assert again.result(timeout_s=60).final_output == "Oslo is sunny"
    folder = Path(kept.removeprefix("file://"), "runs", result.run_id)
    names = sorted(p.name for p in folder.iterdir())
    assert [n.endswith(".ckpt") for n in names] == [True, True, False] and names[-1] == "done.1"
