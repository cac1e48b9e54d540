"""B4 (checkpoint): a run whose history grows past the checkpoint cap fails with a typed
error naming the run, and its stored records still replay to its last durable state."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import raygents as rg
from raygents.errors import MAX_PAYLOAD_BYTES, CheckpointError, PayloadTooLarge
from raygents.records import checkpoint
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")

CHUNK = MAX_PAYLOAD_BYTES["tool result"] - 1024  # each result is under its own cap
CALLS = MAX_PAYLOAD_BYTES["checkpoint"] // CHUNK + 2  # together they pass the checkpoint's


@pytest.fixture
def store(own_raygents: None, tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "ckpt"
    rg.shutdown()
    rg.init(namespace=f"ckpt-cap-{os.urandom(3).hex()}", store=f"file://{root}")
    yield root
    rg.shutdown()


@rg.tool(remote=False)
def chunk(i: int) -> str:
    """Return about 1 MiB of text."""
    return str(i % 10) * CHUNK


def test_a_history_past_the_checkpoint_cap_fails_the_run_with_a_typed_error(store: Path) -> None:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        if any(m.role == "tool" for m in req.messages):
            return text("ok")
        return calls(*(call("chunk", {"i": i}, id=f"c{i}") for i in range(CALLS)))

    agent = rg.Agent("hoarder", tools=[chunk], model=FunctionModel(reply))
    handle = rg.start(agent, "go")
    with pytest.raises(PayloadTooLarge) as caught:
        handle.result(timeout_s=120)
    error = caught.value
    assert isinstance(error, CheckpointError)
    assert error.kind == "checkpoint" and error.limit == MAX_PAYLOAD_BYTES["checkpoint"]
    assert error.size is not None and error.size > error.limit
    assert error.run_id == handle.run_id and handle.run_id in str(error)
    folder = store / "runs" / handle.run_id
    names = sorted(p.name for p in folder.glob("*.ckpt"))
    blobs = [(folder / name).read_bytes() for name in names]
    assert blobs, "the run's earlier records are kept"
    assert all(len(b) <= MAX_PAYLOAD_BYTES["checkpoint"] for b in blobs)
    state, _ = checkpoint.restore(blobs, run_id=handle.run_id)  # whole records, a valid chain
    assert not any(m.role == "tool" for m in state.messages)  # the batch left no trace
