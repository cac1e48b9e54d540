"""Checkpoint records: deltas, full records by bytes, replay, and what a long run writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from raygents.agents.tools import ToolResult
from raygents.core.envelope import RunState
from raygents.core.messages import Message, Usage
from raygents.errors import CheckpointError
from raygents.records import checkpoint, codec


def _write_all(states: list[RunState]) -> tuple[RunState, list[checkpoint.Record], int]:
    """Write a record for each successive state; the last state, the records, bytes written."""
    records: list[checkpoint.Record] = []
    written = 0
    current = states[0]
    for state in states:
        state = state.evolve(
            seq=current.seq,
            recorded=current.recorded,
            since_full=current.since_full,
            full_size=current.full_size,
        )
        current, record = checkpoint.make_record(state, "running")
        records.append(record)
        written += len(checkpoint.encode(record))
    return current, records, written


def _growing_run(turns: int, payload: int) -> list[RunState]:
    """A run whose history grows by an assistant message and a tool result per turn."""
    state = RunState(run_id="r1", agent_name="a", messages=(Message("user", "go"),), input_len=1)
    states = [state]
    for turn in range(turns):
        reply = Message("assistant", f"turn {turn}")
        result = Message("tool", "x" * payload, tool_call_id=f"c{turn}")
        state = state.evolve(messages=(*state.messages, reply, result), turns=turn + 1)
        states.append(state)
    return states


def test_the_first_record_is_full_and_later_ones_are_deltas() -> None:
    last, records, _ = _write_all(_growing_run(5, 64))
    assert [r["kind"] for r in records] == ["full"] + ["delta"] * 5
    assert records[3]["keep"] == 5 and len(records[3]["append"]) == 2
    assert last.seq == 6 and last.recorded == len(last.messages)


def test_replay_rebuilds_the_newest_state() -> None:
    states = _growing_run(40, 900)
    last, records, _ = _write_all(states)
    assert any(r["kind"] == "full" for r in records[1:]), "a long history gets new full records"
    state, record = checkpoint.replay([checkpoint.decode(checkpoint.encode(r)) for r in records])
    assert state.messages == states[-1].messages
    assert state.turns == 40 and state.seq == last.seq and record["seq"] == last.seq


def test_a_long_run_writes_at_most_three_times_its_history() -> None:
    for payload in (64, 1024):
        states = _growing_run(50, payload)
        _, _, written = _write_all(states)
        history = codec.packed_size([m.model_dump(mode="json") for m in states[-1].messages])
        assert written <= 3 * history, (payload, written, history)


def test_a_rewritten_history_gets_a_full_record() -> None:
    states = _growing_run(3, 64)
    last, _, _ = _write_all(states)
    shorter = last.evolve(messages=last.messages[:2])
    _, record = checkpoint.make_record(shorter, "running")
    assert record["kind"] == "full" and record["keep"] == 0 and len(record["append"]) == 2


def test_bodies_leave_out_defaults_and_replay_fills_them_in() -> None:
    state = RunState(
        run_id="r2",
        agent_name="a",
        messages=(Message("user", "hi"),),
        usage=Usage(3, 4),
        journal={"c1": ToolResult("ok")},
    )
    _, record = checkpoint.make_record(state, "suspended", cause="stop")
    body = record["state"]
    assert "depth" not in body and "pending" not in body and "max_turns" not in body
    assert record["run_id"] == "r2" and body["agent_name"] == "a" and "run_id" not in body
    replayed, _ = checkpoint.replay([record])
    assert replayed.usage == Usage(3, 4) and replayed.journal == state.journal
    assert replayed.depth == 0 and replayed.pending == ()


def test_a_missing_delta_breaks_the_chain() -> None:
    _, records, _ = _write_all(_growing_run(4, 64))
    with pytest.raises(CheckpointError, match=r"record 3 .* is missing"):
        checkpoint.replay([r for r in records if r["seq"] != 3])


def test_replay_derives_the_bookkeeping_the_bodies_leave_out() -> None:
    last, records, _ = _write_all(_growing_run(30, 700))
    assert records[-1]["run_id"] == "r1" and records[-1]["kind"] == "delta"
    assert "run_id" not in records[-1]["state"] and "seq" not in records[-1]["state"]
    state, _ = checkpoint.replay([checkpoint.decode(checkpoint.encode(r)) for r in records])
    derived = ("run_id", "seq", "recorded", "since_full", "full_size")
    assert {f: getattr(state, f) for f in derived} == {f: getattr(last, f) for f in derived}
    # so a resumed run's next record is the one the original run would have written
    extra = Message("user", "more")
    _, after_resume = checkpoint.make_record(
        state.evolve(messages=(*state.messages, extra)), "running"
    )
    _, original = checkpoint.make_record(last.evolve(messages=(*last.messages, extra)), "running")
    assert {k: v for k, v in after_resume.items() if k != "at"} == {
        k: v for k, v in original.items() if k != "at"
    }


def test_deltas_carry_only_changed_fields_and_replay_merges_them() -> None:
    base = RunState(run_id="r3", agent_name="a", messages=(Message("user", "hi"),))
    journal = {"c1": ToolResult("ok")}
    steps = [
        base.evolve(turns=1, usage=Usage(1, 1)),
        base.evolve(turns=1, usage=Usage(1, 1), journal=journal),  # a journal entry
        base.evolve(turns=2, usage=Usage(2, 2)),  # journal cleared: back at its default
    ]
    records: list[checkpoint.Record] = []
    state, previous = base, None
    for step in steps:
        step = step.evolve(seq=state.seq, recorded=state.recorded, full_size=state.full_size)
        state, record, previous = checkpoint.next_record(step, "running", previous)
        records.append(record)
    assert "state" in records[0] and "changes" not in records[0]
    assert records[1]["changes"] == {
        "agent_name": "a",
        "turns": 1,
        "journal": {"c1": {"content": "ok"}},
    }
    assert records[2]["unset"] == ["journal"] and records[2]["changes"]["usage"] == {
        "input_tokens": 2,
        "output_tokens": 2,
    }
    for upto in (2, 3):
        replayed, _ = checkpoint.replay(records[:upto])
        assert replayed.journal == (journal if upto == 2 else {})
        assert replayed.turns == steps[upto - 1].turns
        assert replayed.usage == steps[upto - 1].usage


def test_journal_records_of_a_wide_batch_carry_only_their_new_entries() -> None:
    """A fan-out's calls finish one by one, each journaled: the records must not repeat the
    whole journal (64 calls would write 2,080 entries), and replay must rebuild it."""
    base = RunState(run_id="r4", agent_name="a", messages=(Message("user", "fan out"),))
    state, previous = checkpoint.next_record(base, "running", None)[::2]
    records: list[checkpoint.Record] = []
    journal: dict[str, ToolResult] = {}
    for i in range(64):
        journal = {**journal, f"c{i}": ToolResult(f"answer {i}", is_error=i == 3)}
        step = state.evolve(journal=journal)
        state, record, previous = checkpoint.next_record(step, "running", previous)
        records.append(checkpoint.decode(checkpoint.encode(record)))
    first, *later = records
    assert first["format"] == checkpoint.FORMAT and first["changes"]["journal"] == {
        "c0": {"content": "answer 0"}
    }
    for i, record in enumerate(later, start=1):
        assert record["format"] == checkpoint.JOURNAL_FORMAT
        assert "journal" not in record["changes"]
        assert list(record["journal_add"]) == [f"c{i}"]
    assert later[2]["journal_add"]["c3"] == {"content": "answer 3", "is_error": True}
    full, *_ = checkpoint.make_record(base, "running")[1:]
    replayed, _ = checkpoint.replay([full, *records])
    assert replayed.journal == journal
    # the batch ends: its results become messages, the journal is cleared
    done = state.evolve(journal={}, messages=(*state.messages, Message("assistant", "ok")))
    _, cleared, _ = checkpoint.next_record(done, "running", previous)
    assert cleared["unset"] == ["journal"] and cleared["format"] == checkpoint.FORMAT
    assert checkpoint.replay([full, *records, cleared])[0].journal == {}


def test_a_record_of_an_unknown_format_is_refused() -> None:
    _, record = checkpoint.make_record(RunState(run_id="r5", agent_name="a"), "running")
    with pytest.raises(CheckpointError, match="record format 3; this raygents reads 1 and 2"):
        checkpoint.decode(checkpoint.encode({**record, "format": 3}), source="runs/r5/1")


def test_record_keys_carry_the_dispatch_and_sort_by_seq() -> None:
    assert checkpoint.key_for("r", 7) == "runs/r/0000000007.ckpt"
    assert checkpoint.key_for("r", 7, 3) == "runs/r/0000000007.3.ckpt"
    assert checkpoint.fence_key("r", 3) == "runs/r/fence.3"


def test_the_chain_leaves_out_what_a_later_dispatch_did_not_build_on() -> None:
    def k(seq: int, epoch: int = 1) -> str:
        return checkpoint.key_for("r", seq, epoch)

    # dispatch 2 went on from record 2; dispatch 1 (fenced) still wrote 3 and 4
    keys = [k(1), k(2), k(3), k(4), k(3, 2), checkpoint.fence_key("r", 2)]
    assert checkpoint.chain(reversed(keys)) == [k(1), k(2), k(3, 2)]
    assert checkpoint.chain([*keys, k(4, 2), k(5, 1)]) == [k(1), k(2), k(3, 2), k(4, 2)]
    # records from before epochs were part of the name, then a later dispatch
    assert checkpoint.chain([k(1, 0), k(2, 0), k(3, 4)]) == [k(1, 0), k(2, 0), k(3, 4)]
    # a fenced copy's record that nothing newer replaced is part of the chain
    assert checkpoint.chain([k(1), k(2), k(2, 2)]) == [k(1), k(2, 2)]
    assert checkpoint.chain([k(1), k(3)]) == [k(1)], "a gap ends the chain"
    assert checkpoint.chain(["runs/r/fence.2", "runs/r/x.ckpt"]) == []


# --- the count of output corrections -----------------------------------------------------------


def test_the_output_correction_count_survives_full_and_delta_records() -> None:
    base = RunState(run_id="r5", agent_name="a", messages=(Message("user", "hi"),))
    steps = [base.evolve(turns=1), base.evolve(turns=2, output_retries=1)]
    steps.append(steps[-1].evolve(turns=3, output_retries=2))
    records: list[checkpoint.Record] = []
    state, previous = base, None
    for step in steps:
        step = step.evolve(seq=state.seq, recorded=state.recorded, full_size=state.full_size)
        state, record, previous = checkpoint.next_record(step, "running", previous)
        records.append(checkpoint.decode(checkpoint.encode(record)))
    assert "output_retries" not in records[0]["state"]  # (at its default: left out)
    assert records[1]["changes"]["output_retries"] == 1
    for upto, expected in ((1, 0), (2, 1), (3, 2)):
        replayed, _ = checkpoint.replay(records[:upto])
        assert replayed.output_retries == expected
    full = base.evolve(output_retries=3)
    _, record = checkpoint.make_record(full, "suspended")
    assert checkpoint.replay([checkpoint.decode(checkpoint.encode(record))])[0].output_retries == 3


def test_records_written_before_the_count_was_kept_read_it_as_zero() -> None:
    import run_golden  # (tests/golden: records of format 1 written by an earlier raygents)

    folder = Path(__file__).resolve().parents[1] / "golden" / "runs" / run_golden.RUN_ID
    records = [checkpoint.decode(p.read_bytes(), source=p.name) for p in sorted(folder.iterdir())]
    assert not any("output_retries" in str(r) for r in records)
    state, _ = checkpoint.replay(records)
    assert state.output_retries == 0 and state.turns == 2
