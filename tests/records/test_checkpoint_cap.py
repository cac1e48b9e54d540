"""A checkpoint over its size cap is refused with a typed error, before anything is written."""

from __future__ import annotations

import pickle

import pytest

import raygents as rg
from raygents.core.envelope import RunState
from raygents.core.messages import Message
from raygents.errors import MAX_PAYLOAD_BYTES, CheckpointError, PayloadTooLarge
from raygents.records import checkpoint, codec

CAP = codec.DEFAULT_MAX_BYTES


def test_the_checkpoint_cap_is_the_codecs() -> None:
    assert MAX_PAYLOAD_BYTES["checkpoint"] == CAP


def test_a_frame_over_the_cap_is_payload_too_large_and_a_checkpoint_error() -> None:
    # many small strings: the walk's lower bound stays under the cap, the packed frame does not
    obj = ["x" * 100] * 200
    limit = codec.packed_size(obj) + codec.OVERHEAD - 1
    with pytest.raises(PayloadTooLarge) as caught:
        codec.encode(obj, max_bytes=limit, source="runs/r1/0000000001")
    error = caught.value
    assert isinstance(error, CheckpointError)
    assert error.kind == "checkpoint"
    assert error.size == limit + 1 and error.limit == limit
    assert error.key == "runs/r1/0000000001"
    assert "too large" in str(error) and "at least" not in str(error)
    assert f"{limit + 1} bytes" in str(error) and f"{limit} bytes" in str(error)


def test_a_frame_at_the_cap_is_accepted() -> None:
    obj = ["x" * 100] * 200
    limit = codec.packed_size(obj) + codec.OVERHEAD
    assert len(codec.encode(obj, max_bytes=limit)) == limit


def test_a_value_over_the_cap_is_refused_during_the_walk_with_a_lower_bound() -> None:
    with pytest.raises(PayloadTooLarge) as caught:
        codec.encode({"a": "x" * 600, "b": b"y" * 600}, max_bytes=1000)
    error = caught.value
    assert isinstance(error, CheckpointError)
    assert error.kind == "checkpoint" and error.limit == 1000
    assert error.size is not None and error.size > 1000
    assert f"at least {error.size} bytes" in str(error)


def test_the_error_survives_pickling_and_a_checkpoint_error_handler_catches_it() -> None:
    with pytest.raises(CheckpointError) as caught:  # how existing callers catch it
        codec.encode("x" * 2000, max_bytes=1000, source="k")
    copy = pickle.loads(pickle.dumps(caught.value.with_run_id("run-7")))
    assert type(copy) is type(caught.value)
    assert (copy.kind, copy.size, copy.limit, copy.key) == ("checkpoint", 2000, 1000, "k")
    assert "run-7" in str(copy)


def test_the_class_is_public_and_builds_from_a_message_alone() -> None:
    error = rg.CheckpointTooLarge("too big")
    assert str(error) == "too big" and error.kind == "checkpoint"
    made = rg.CheckpointTooLarge(size=11, limit=10)
    assert "checkpoint is 11 bytes, over the limit of 10 bytes" in str(made)


def _big_run(results: int, each: int) -> RunState:
    tools = [Message(role="tool", content="r" * each, tool_call_id=f"c{i}") for i in range(results)]
    return RunState(run_id="run-big", agent_name="a", messages=(Message("user", "go"), *tools))


def test_a_history_past_the_cap_fails_its_record_and_keeps_the_previous_one() -> None:
    # a run's first record fits; tool results adding up past 10 MiB make the next one too large
    small = _big_run(3, 1024)
    state, record, body = checkpoint.next_record(small, "running", None)
    kept = checkpoint.encode(record)
    assert checkpoint.decode(kept)["seq"] == 1
    grown = state.evolve(
        messages=[*state.messages]
        + [
            Message(role="tool", content="r" * (1024 * 1024 - 64), tool_call_id=f"d{i}")
            for i in range(11)
        ]
    )
    _, record2, _ = checkpoint.next_record(grown, "running", body)
    with pytest.raises(PayloadTooLarge) as caught:
        checkpoint.encode(record2)
    error = caught.value.with_run_id(grown.run_id)
    assert isinstance(error, CheckpointError)
    assert error.kind == "checkpoint" and error.limit == CAP
    assert error.size is not None and error.size > CAP
    assert "run-big" in str(error) and "checkpoint" in str(error)
    assert checkpoint.decode(kept)["seq"] == 1  # the previous durable record is untouched
