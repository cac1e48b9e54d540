"""Batch outputs that cannot be written: an item is recorded as completed only once its output
is durable where the job writes it, and a re-run never writes an output as null."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import raygents as rg
from raygents.batch import start as batch_start
from raygents.batch.job import BatchHandle
from raygents.batch.output import Shards, open_ledger, open_output
from raygents.errors import CheckpointError
from raygents.stores.memory import MemoryStore
from raygents.testing import FunctionModel, text


def fresh_store() -> MemoryStore:
    """A memory store of its own (those of one name are shared in the process)."""
    return MemoryStore(os.urandom(6).hex())


class FullDisk(Shards):
    """A directory sink whose disk is full: every write raises ENOSPC."""

    def write(self, line: dict[str, Any]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


class DownStore(MemoryStore):
    """An S3-like store whose puts fail."""

    def _put(self, key: str, data: bytes) -> None:
        raise CheckpointError("put failed: service unavailable")


def handle_with(sink: Shards, ledger_store: MemoryStore) -> BatchHandle:
    """A job's handle without Ray, its ledger in ``ledger_store``."""
    handle = BatchHandle(SimpleNamespace(job_id="j"), [], 1, sink, None)  # type: ignore[arg-type]
    handle._ledger = open_ledger(ledger_store, "j")
    return handle


def completed(index: int) -> rg.BatchItem:
    return rg.BatchItem(index, f"j.{index}", "completed", output=f"out {index}")


def test_an_item_whose_output_cannot_be_written_is_not_recorded_as_completed(
    tmp_path: Path,
) -> None:
    ledger = fresh_store()
    sink = FullDisk("j", directory=tmp_path)
    sink.url = str(tmp_path)
    handle = handle_with(sink, ledger)
    handle._end(completed(0))
    handle._close()
    assert ledger.list("jobs/") == []
    assert handle._counts["completed"] == 0 and handle._counts["failed"] == 1
    assert handle._stopped is not None and "output" in handle._stopped
    assert isinstance(handle._error, rg.RaygentsError)
    assert "No space left" in str(handle._error) and str(tmp_path) in str(handle._error)


def test_the_ledger_is_put_only_after_the_s3_output(tmp_path: Path) -> None:
    ledger = fresh_store()
    sink = Shards("j", store=DownStore(os.urandom(6).hex()), prefix="out/")
    sink.url = "s3://bucket/out"
    handle = handle_with(sink, ledger)
    handle._end(completed(0))
    with pytest.raises(rg.RaygentsError, match="output could not be written to s3://bucket/out"):
        handle._flush()
    assert ledger.list("jobs/") == []  # (not completed while its output is not there)
    handle._sink = Shards("j", store=fresh_store(), prefix="out/")
    handle._flush()  # (the next flush puts both, output first)
    lines = [json.loads(x) for k in ledger.list("jobs/") for x in ledger.get(k).splitlines()]  # type: ignore[union-attr]
    assert [x["index"] for x in lines] == [0]


def test_a_directory_shard_that_failed_is_left_for_a_new_one(tmp_path: Path) -> None:
    out = open_output(tmp_path, "j")
    out.write({"index": 0, "status": "completed", "output": "a"})
    real = out._file

    class Once:
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    out._file = Once()  # type: ignore[assignment]
    with pytest.raises(OSError):
        out.write({"index": 1, "status": "completed", "output": "b"})
    assert out._file is None
    out.write({"index": 1, "status": "completed", "output": "b"})
    out.close()
    assert [x["index"] for x in out.completed()] == [0, 1]


def echo_model() -> FunctionModel:
    return FunctionModel(lambda req: text(f"echo {req.messages[-1].text}"))


@pytest.mark.usefixtures("rt")
def test_a_rerun_fills_outputs_the_output_directory_lost(tmp_path: Path) -> None:
    out = tmp_path / "out"
    agent = rg.Agent("batch-lost-output", model=echo_model())
    inputs = [f"q{i}" for i in range(6)]
    first = rg.run_batch(agent, inputs, job_id="lost-out", output=str(out), progress=False)
    assert first.completed == 6
    for shard in out.iterdir():
        shard.unlink()  # (the output directory was wiped; the ledger still holds the items)
    again = rg.run_batch(agent, inputs, job_id="lost-out", output=str(out), progress=False)
    assert again.completed == 6
    lines = [json.loads(x) for p in out.iterdir() for x in p.read_text().splitlines()]
    assert sorted((x["index"], x["output"]) for x in lines) == [(i, f"echo q{i}") for i in range(6)]


@pytest.mark.usefixtures("rt")
def test_a_full_disk_stops_the_job_and_a_rerun_writes_every_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    agent = rg.Agent("batch-full-disk", model=echo_model())
    inputs = [f"q{i}" for i in range(6)]
    real_open = batch_start.open_output
    full = FullDisk("full-disk", directory=out)
    full.url = str(out)
    monkeypatch.setattr(batch_start, "open_output", lambda url, job_id: full)
    out.mkdir()
    with pytest.raises(rg.RaygentsError, match="output could not be written"):
        rg.run_batch(agent, inputs, job_id="full-disk", output=str(out), progress=False)
    monkeypatch.setattr(batch_start, "open_output", real_open)
    again = rg.run_batch(agent, inputs, job_id="full-disk", output=str(out), progress=False)
    assert again.completed == 6
    lines = [json.loads(x) for p in out.iterdir() for x in p.read_text().splitlines()]
    done = sorted((x["index"], x["output"]) for x in lines if x["status"] == "completed")
    assert done == [(i, f"echo q{i}") for i in range(6)]


def test_an_s3_output_down_at_the_end_is_the_jobs_error() -> None:
    ledger = fresh_store()
    sink = Shards("j", store=DownStore(os.urandom(6).hex()), prefix="out/")
    sink.url = "s3://bucket/out"
    handle = handle_with(sink, ledger)
    handle._end(completed(0))
    handle._close()
    assert ledger.list("jobs/") == []
    assert isinstance(handle._error, rg.RaygentsError)
    assert "output could not be written to s3://bucket/out" in str(handle._error)


def test_a_shard_that_fails_to_close_is_never_appended_to_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = open_output(tmp_path, "j", shard_items=1)
    out.write({"index": 0, "status": "completed", "output": "a"})
    real_fsync, calls = os.fsync, []

    def full(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        out.write({"index": 1, "status": "completed", "output": "b"})  # (the roll fails)
    out.write({"index": 1, "status": "completed", "output": "b"})
    out.close()
    assert len(out.written) == 2
    assert [x["index"] for name in out.written for x in out.lines(name)] == [0, 1]
