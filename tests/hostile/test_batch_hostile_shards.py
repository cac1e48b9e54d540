"""A hostile output directory or ledger cannot exhaust the driver or pass for the job's own:
indexes are bounded, shard reads are capped, links are never followed, and shard names match
the job exactly."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from raygents.batch import output as batch_output
from raygents.batch.job import BatchHandle
from raygents.batch.output import open_ledger, open_output
from raygents.stores.memory import MemoryStore


def fresh_store() -> MemoryStore:
    """A memory store of its own (those of one name are shared in the process)."""
    return MemoryStore(os.urandom(6).hex())


WRITER = "0000000000000001-1"


def line(index: int, job_id: str = "j", **extra: Any) -> str:
    item = {"index": index, "run_id": f"{job_id}.{index}", "status": "completed", "output": "x"}
    return json.dumps({**item, **extra}) + "\n"


def read_job(
    monkeypatch: pytest.MonkeyPatch, ledger: MemoryStore, inputs: Any, out: Path | None
) -> BatchHandle:
    """What a job's start reads of its ledger and output, without Ray."""
    import raygents.runtime.driver.client as client
    import raygents.stores.open as opener

    directory = SimpleNamespace(cached_settings=lambda: SimpleNamespace(key=None))
    settings = SimpleNamespace(settings=SimpleNamespace(store="memory://"), directory=directory)
    monkeypatch.setattr(client, "current", lambda: settings)
    monkeypatch.setattr(opener, "open_store", lambda url: ledger)
    runs = SimpleNamespace(job_id="j", read=lambda: None)
    sink = None if out is None else open_output(out, "j")
    handle = BatchHandle(runs, inputs, 1, sink, None)  # type: ignore[arg-type]
    handle._read_job()
    return handle


@pytest.mark.parametrize("index", [2**31, 10**13])
@pytest.mark.parametrize("inputs", [["a", "b"], iter(["a", "b"])])
def test_a_huge_index_in_the_ledger_or_output_costs_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, index: int, inputs: Any
) -> None:
    ledger = fresh_store()
    ledger.put(f"jobs/j/j.{WRITER}.00000.jsonl", (line(index) + line(1)).encode())
    (tmp_path / f"j.{WRITER}.00000.jsonl").write_text(line(index) + line(1))
    handle = read_job(monkeypatch, ledger, inputs, tmp_path)
    earlier = handle._earlier
    assert len(earlier.logged_bits) <= 1 and len(earlier.written) <= 1
    assert earlier.logged_before(1) is not None and earlier.logged_before(0) is None
    plain = read_job(monkeypatch, ledger, inputs, None)
    assert sorted(plain._earlier.logged) == [1]


def test_a_line_of_another_run_id_is_not_the_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = fresh_store()
    planted = line(0, run_id="someone-else.0") + line(1, usage={"input_tokens": "many"})
    ledger.put(f"jobs/j/j.{WRITER}.00000.jsonl", planted.encode())
    handle = read_job(monkeypatch, ledger, ["a", "b"], None)
    assert handle._earlier.logged == {}


def test_job_a_does_not_read_job_a_b_shards(tmp_path: Path) -> None:
    (tmp_path / f"a.b.{WRITER}.00000.jsonl").write_text(line(0, job_id="a.b"))
    (tmp_path / f"a.{WRITER}.00000.jsonl").write_text(line(1, job_id="a"))
    shards = open_output(tmp_path, "a")
    assert shards.shards() == [f"a.{WRITER}.00000.jsonl"]
    assert [x["index"] for x in shards.completed()] == [1]
    store = fresh_store()
    store.put(f"out/a.b.{WRITER}.00000.jsonl", line(0, job_id="a.b").encode())
    in_store = batch_output.Shards("a", store=store, prefix="out/")
    assert in_store.shards() == []


def test_links_in_the_output_directory_are_never_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(line(0))
    out = tmp_path / "out"
    out.mkdir()
    (out / f"j.{WRITER}.00000.jsonl").symlink_to(elsewhere)
    (out / f"j.{WRITER}.00001.jsonl").symlink_to("/dev/zero")
    os.mkfifo(out / f"j.{WRITER}.00002.jsonl")
    assert list(open_output(out, "j").completed()) == []


def test_a_new_shard_is_never_written_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "target"
    out = tmp_path / "out"
    shards = open_output(out, "j")
    (out / f"j.{shards.writer}.00000.jsonl").symlink_to(target)
    with pytest.raises(OSError):
        shards.write({"index": 0, "status": "completed"})
    assert not target.exists()


def test_shard_reads_are_capped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(batch_output, "_LINE_BYTES", 1000, raising=False)
    monkeypatch.setattr(batch_output, "_SHARD_BYTES", 100_000)
    long = line(0, output="y" * 5000)
    (tmp_path / f"j.{WRITER}.00000.jsonl").write_text(long + line(1) + "z" * 200_000)
    assert [x["index"] for x in open_output(tmp_path, "j").completed()] == [1]
    store = fresh_store()
    store.put(f"jobs/j/j.{WRITER}.00000.jsonl", (line(0) + "z" * 200_000 + "\n").encode())
    store.put(f"jobs/j/j.{WRITER}.00001.jsonl", line(1).encode())
    assert [x["index"] for x in open_ledger(store, "j").completed()] == [1]
