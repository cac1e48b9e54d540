"""Calls in doubt: which calls of a recovered batch are, resolutions, and the start marks."""

from __future__ import annotations

import pytest

from raygents.core import loop, recovered
from raygents.core.doubt import InDoubt, Resolution, normalise
from raygents.core.envelope import RunState
from raygents.core.messages import ToolCall, ToolResult
from raygents.errors import UserError

CHARGE = ToolCall(id="c1", name="charge", arguments='{"amount": 5}')
LOOKUP = ToolCall(id="l1", name="lookup", arguments="{}")
BATCH = loop.RunTools((loop.Execute(CHARGE), loop.Execute(LOOKUP)), sequential=False)
ASK = frozenset({"c1"})


def state(**fields: object) -> RunState:
    return RunState(run_id="run-1", agent_name="a", **fields)  # type: ignore[arg-type]


def test_a_started_ask_call_without_a_result_is_in_doubt() -> None:
    new, stop = recovered.settle(state(started={"c1": 12.5, "l1": 12.5}), BATCH, ASK, "a")
    assert stop
    assert new.in_doubt == (
        InDoubt(
            call_id="c1",
            agent_name="a",
            tool_name="charge",
            arguments='{"amount": 5}',
            idempotency_key="run-1:c1",
            started_at=12.5,
            run_id="run-1",
        ),
    )


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({}, "it never started (a suspend before the batch, a first dispatch)"),
        ({"started": {"c1": 1.0}, "journal": {"c1": ToolResult("ok")}}, "its result is kept"),
    ],
)
def test_not_in_doubt(fields: dict[str, object], why: str) -> None:
    old = state(**fields)
    new, stop = recovered.settle(old, BATCH, ASK, "a")
    assert not stop and new is old, why


def test_a_rerun_call_is_never_in_doubt() -> None:
    old = state(started={"l1": 1.0})
    assert recovered.settle(old, BATCH, frozenset(), "a") == (old, False)


def test_a_result_resolution_goes_to_the_journal_and_is_used_up() -> None:
    given = ToolResult("declined", is_error=True)
    old = state(
        started={"c1": 1.0},
        resolutions={"c1": Resolution(result=given)},
        in_doubt=(),
    )
    new, stop = recovered.settle(old, BATCH, ASK, "a")
    assert not stop
    assert new.journal == {"c1": given}
    assert new.resolutions == {} and new.in_doubt == ()


def test_a_rerun_resolution_lets_the_call_run_and_marks_its_new_start() -> None:
    old = state(started={"c1": 1.0}, resolutions={"c1": Resolution(rerun=True)})
    new, stop = recovered.settle(old, BATCH, ASK, "a")
    assert not stop and "c1" not in new.journal and new.resolutions == {}
    assert recovered.mark_started(new, BATCH, ASK, 9.0).started == {"c1": 9.0}


def test_mark_started_marks_only_ask_calls_that_will_run() -> None:
    done = state(journal={"c1": ToolResult("ok")})
    assert recovered.mark_started(done, BATCH, ASK, 2.0) is done
    assert recovered.mark_started(state(), BATCH, ASK, 2.0).started == {"c1": 2.0}


def test_on_results_forgets_the_batch_s_marks() -> None:
    view = loop.AgentView(name="a")
    old = state(
        messages=(),
        started={"c1": 1.0},
        resolutions={"c1": Resolution(rerun=True)},
    )
    new, _ = loop.on_results(old, view, BATCH, [ToolResult("a"), ToolResult("b")])
    assert new.started == {} and new.resolutions == {} and new.in_doubt == ()


def test_normalise_takes_rerun_and_tool_results() -> None:
    result = ToolResult("done")
    assert normalise({"a": "rerun", "b": result}) == {
        "a": Resolution(rerun=True),
        "b": Resolution(result=result),
    }
    assert normalise(None) == {}


@pytest.mark.parametrize(
    "bad",
    [
        "again",
        True,
        None,
        "done",
        {"content": "x"},
        Resolution(),
        Resolution(rerun=True, result=ToolResult("x")),
    ],
)
def test_normalise_refuses_anything_else(bad: object) -> None:
    with pytest.raises(UserError, match=r"'c1'.*must be \"rerun\" or a ToolResult"):
        normalise({"c1": bad})


def test_normalise_refuses_keys_that_are_not_call_ids() -> None:
    with pytest.raises(UserError, match="keyed by call id"):
        normalise({1: "rerun"})
