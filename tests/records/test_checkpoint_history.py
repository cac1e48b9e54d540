"""A run's history from its records, table-driven: each record's reason, the state at any
seq, a completed run's final checkpoint from its marker, and seqs that do not exist."""

from __future__ import annotations

from typing import Any

import pytest

from raygents.core.envelope import RunState
from raygents.core.messages import Message, ToolCall, ToolResult
from raygents.errors import CheckpointError, CheckpointNotFound, RunNotFound
from raygents.records import checkpoint, codec, keptresult
from raygents.records.history import History, load
from raygents.records.runinfo import RunInfo

USER = Message("user", "weather?")
ASK = Message("assistant", None, [ToolCall("c1", "look", "{}"), ToolCall("c2", "look", "{}")])
RESULTS = (Message("tool", "sunny", tool_call_id="c1"), Message("tool", "warm", tool_call_id="c2"))


def _steps() -> list[tuple[dict[str, Any], str]]:
    """Records of a run (each with the reason its history gives it)."""
    state = RunState(run_id="r1", agent_name="a", messages=(USER,), input_len=1)
    steps = [
        (state, "running", "input"),
        (state.evolve(messages=(USER, ASK), turns=1), "running", "intent"),
        (
            state.evolve(messages=(USER, ASK), turns=1, journal={"c1": ToolResult("sunny")}),
            "running",
            "journal",
        ),
        (state.evolve(messages=(USER, ASK, *RESULTS), turns=1), "running", "results"),
        (
            state.evolve(agent_name="b", messages=(USER, ASK, *RESULTS), turns=1),
            "running",
            "handoff",
        ),
        (
            state.evolve(agent_name="b", messages=(USER, ASK, *RESULTS), turns=1),
            "suspended",
            "suspend",
        ),
    ]
    out, current = [], state
    for target, status, reason in steps:
        current, record = checkpoint.make_record(
            target.evolve(seq=current.seq, recorded=current.recorded), status
        )
        out.append((record, reason))
    return out


def test_each_record_gets_its_reason_and_its_state() -> None:
    steps = _steps()
    history = History("r1", [r for r, _ in steps])
    found = history.checkpoints()
    assert [c.reason for c in found] == [reason for _, reason in steps]
    assert [c.seq for c in found] == [1, 2, 3, 4, 5, 6]
    assert [c.messages for c in found] == [1, 2, 2, 4, 4, 4]
    assert found[1].last == "assistant: calls look, look"
    assert found[-1].agent_name == "b" and found[-1].turn == 1
    assert history.state_at(2).messages == (USER, ASK)
    assert history.state_at(3).journal == {"c1": ToolResult("sunny")}
    assert history.state_at(None).agent_name == "b"
    with pytest.raises(CheckpointNotFound, match=r"no checkpoint 9 \(it has \[1, 2, 3, 4, 5, 6\]"):
        history.state_at(9)


def test_a_completed_run_has_a_final_checkpoint_from_its_marker() -> None:
    info = RunInfo("r1", "completed", "b", 2, seq=6)
    result = {
        "final_output": "sunny",
        "messages": (USER, Message("assistant", "sunny")),
        "input_count": 1,
    }
    marker = keptresult.done_marker(info, 1, result)  # type: ignore[arg-type]
    alone = load("r1", [], codec.encode(marker), key=None)
    (final,) = alone.checkpoints()
    assert (final.seq, final.reason, final.messages, final.last) == (
        6,
        "final",
        2,
        "assistant: sunny",
    )
    assert alone.state_at(6).messages[-1].content == "sunny"
    with pytest.raises(CheckpointNotFound, match=r"final state only, unless .*keep_history=True"):
        alone.state_at(1)
    kept = load("r1", [checkpoint.encode(r) for r, _ in _steps()], codec.encode(marker), key=None)
    assert [c.reason for c in kept.checkpoints()][-2:] == ["suspend", "final"]
    assert kept.checkpoints()[-1].seq == 7  # (after the newest record)


def test_a_kept_result_names_its_start_agent_and_a_rewrite() -> None:
    info = RunInfo("r1", "completed", "b", 2, seq=6)
    result = {
        "final_output": "sunny",
        "messages": (USER, Message("assistant", "sunny")),
        "input_count": 1,
        "start_agent": "a",
        "rewritten": True,
    }
    marker = keptresult.done_marker(info, 1, result)  # type: ignore[arg-type]
    state = load("r1", [], codec.encode(marker), key=None).state_at(None)
    assert (state.agent_name, state.start_agent, state.rewritten) == ("b", "a", True)
    plain = keptresult.done_marker(info, 1, {**result, "rewritten": False})  # type: ignore[arg-type]
    assert "rewritten" not in plain and plain["start_agent"] == "a"
    # a marker written before kept results named them still reads: no start agent, no rewrite
    old = {k: v for k, v in marker.items() if k not in ("start_agent", "rewritten")}
    state = load("r1", [], codec.encode(old), key=None).state_at(None)
    assert (state.agent_name, state.start_agent, state.rewritten) == ("b", "", False)
    assert state.messages[-1].content == "sunny"


def test_nothing_kept_is_run_not_found() -> None:
    with pytest.raises(RunNotFound, match="no checkpoint of run 'gone'"):
        load("gone", [], None, key=None)


def test_the_state_after_each_record_is_the_replay_of_its_prefix() -> None:
    state = RunState(run_id="r2", agent_name="a", messages=(USER,), input_len=1)
    records = []
    for i in range(60):  # (long enough for full records between the deltas)
        call = Message("assistant", None, [ToolCall(f"c{i}", "look", "{}")])
        state, record = checkpoint.make_record(
            state.evolve(messages=(*state.messages, call)), "running"
        )
        records.append(record)
        answer = Message("tool", "x" * 400, tool_call_id=f"c{i}")
        state, record = checkpoint.make_record(
            state.evolve(messages=(*state.messages, answer)), "running"
        )
        records.append(record)
    assert {r["kind"] for r in records} == {"full", "delta"}
    each = [s for s, _ in checkpoint.states(records, run_id="r2")]
    assert each == [checkpoint.replay(records[: i + 1], run_id="r2")[0] for i in range(120)]


def test_a_completed_run_read_while_its_records_are_deleted_is_its_final_state() -> None:
    """A completed run's clean-up deletes its records oldest first: a history read in between
    finds a chain without its first (full) record, and shows the marker's final state."""
    info = RunInfo("r1", "completed", "b", 2, seq=6)
    result = {"final_output": "sunny", "messages": (USER, Message("assistant", "sunny"))}
    marker = codec.encode(keptresult.done_marker(info, 1, result))  # type: ignore[arg-type]
    rest = [checkpoint.encode(r) for r, _ in _steps()[2:]]  # (records 1 and 2 are gone)
    (final,) = load("r1", rest, marker, key=None).checkpoints()
    assert (final.reason, final.messages, final.last) == ("final", 2, "assistant: sunny")
    with pytest.raises(CheckpointError, match="no full checkpoint record"):
        load("r1", rest, None, key=None).checkpoints()  # (a run not completed: an error)
