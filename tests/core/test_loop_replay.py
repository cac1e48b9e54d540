"""Replay of a recorded conversation through the turn logic, table-driven: the same graph
agrees, and each kind of change is found at its first divergence."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from raygents.core.envelope import RunState
from raygents.core.loop import AgentView
from raygents.core.messages import Message, ToolCall, ToolSpec
from raygents.core.replay import replay

_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
LOOK = ToolSpec(name="look", parameters=_PARAMS)
TRANSFER = ToolSpec(name="transfer_to_expert", parameters={"type": "object", "properties": {}})
TRIAGE = AgentView(name="triage", tools=(LOOK, TRANSFER), handoffs={"transfer_to_expert": "expert"})
EXPERT = AgentView(name="expert")
VIEWS = {"triage": TRIAGE, "expert": EXPERT}

RECORDING = (
    Message("user", "weather in Paris?"),
    Message("assistant", None, [ToolCall("c1", "look", '{"city": "Paris"}')]),
    Message("tool", "Paris: sunny", tool_call_id="c1"),
    Message("assistant", None, [ToolCall("c2", "transfer_to_expert", "{}")]),
    Message("tool", "Transferred to expert", tool_call_id="c2"),
    Message("assistant", "It is sunny in Paris."),
)
START = RunState(run_id="r1", agent_name="triage", messages=RECORDING[:1], input_len=1)


def _run(
    views: dict[str, AgentView], recording: Any = RECORDING, outcome: Any = "completed"
) -> Any:
    return replay(START, recording, views, outcome=outcome)


def test_the_same_graph_makes_the_same_decisions() -> None:
    report = _run(VIEWS)
    assert report.ok and report.checked == len(RECORDING) and report.turn is None
    assert str(report) == "r1: ok (6 messages replayed)"


def test_a_run_that_stopped_to_wait_agrees_so_far() -> None:
    assert _run(VIEWS, RECORDING[:2], outcome="stopped").ok  # (awaiting its calls' results)


def test_a_run_that_failed_agrees_when_the_new_code_fails_there_too() -> None:
    views = {**VIEWS, "triage": replace(TRIAGE, max_turns=1)}
    assert _run(views, RECORDING[:3], outcome="failed").ok
    assert not _run(views, RECORDING[:3], outcome="completed").ok


CHANGES = [
    pytest.param(
        {**VIEWS, "triage": replace(TRIAGE, tools=(ToolSpec(name="lookup"), TRANSFER))},
        1,
        "tool message 'Paris: sunny'",
        "ToolNotFound: cannot dispatch tool call: unknown tool 'look'",
        id="renamed tool",
    ),
    pytest.param(
        {**VIEWS, "triage": replace(TRIAGE, handoffs={"transfer_to_expert": "other"})},
        2,
        "call transfer_to_expert(c2) answered 'Transferred to expert'",
        "transfer: 'Transferred to other'",
        id="changed handoff",
    ),
    pytest.param(
        {
            **VIEWS,
            "expert": replace(
                EXPERT,
                output_schema={"name": "Weather", "schema": {"type": "object", "properties": {}}},
            ),
        },
        3,
        "the end of the recording",
        "OutputValidationError",
        id="output type",
    ),
    pytest.param(
        {**VIEWS, "triage": replace(TRIAGE, max_turns=1)},
        1,
        "assistant message calling transfer_to_expert",
        "MaxTurnsExceeded: agent 'triage' exceeded maximum number of turns (1)",
        id="lower limit",
    ),
    pytest.param(
        {"triage": TRIAGE},
        2,
        "agent 'expert'",
        "no agent 'expert' in the graph",
        id="handoff target gone",
    ),
]


@pytest.mark.parametrize(("views", "turn", "expected", "got"), CHANGES)
def test_a_change_is_found_at_its_first_divergence(
    views: dict[str, AgentView], turn: int, expected: str, got: str
) -> None:
    report = _run(views)
    assert not report.ok
    assert (report.turn, report.expected) == (turn, expected)
    assert report.got is not None and report.got.startswith(got), report.got
    assert str(report).startswith(f"r1: diverges after turn {turn}: expected {expected}")


def test_arguments_the_schema_now_refuses_are_a_divergence() -> None:
    strict = {**_PARAMS, "properties": {"town": {"type": "string"}}, "required": ["town"]}
    views = {
        **VIEWS,
        "triage": replace(TRIAGE, tools=(ToolSpec(name="look", parameters=strict), TRANSFER)),
    }
    report = _run(views)
    assert (report.ok, report.turn) == (False, 1)
    assert report.expected == "call look(c1) answered 'Paris: sunny'"
    assert report.got is not None and report.got.startswith("reject: ")


def test_a_recording_that_goes_on_after_the_new_code_finishes_diverges() -> None:
    views = {**VIEWS, "triage": replace(TRIAGE, tool_use_behavior="stop_on_first_tool")}
    report = _run(views)
    assert (report.ok, report.turn) == (False, 1)
    assert report.got == "assistant message 'Paris: sunny'"
