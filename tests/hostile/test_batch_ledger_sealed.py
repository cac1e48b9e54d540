"""A batch job's ledger with a checkpoint key: every line carries a seal (HMAC with the key that
signs the records), and a line whose seal is missing, wrong, of another key or of another job
is refused when the job reads its ledger back; its item runs again (and finds its run's
signed completion marker if it completed). Without Ray: the shards and a job's start."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from raygents.batch.job import BatchHandle
from raygents.batch.output import open_ledger
from raygents.records import ledger
from raygents.stores.memory import MemoryStore

KEY = b"k" * 32
WRITER = "0000000000000001-1"
SHARD = f"jobs/j/j.{WRITER}.00000.jsonl"


def fresh_store() -> MemoryStore:
    return MemoryStore(os.urandom(6).hex())


def item(index: int, output: str = "real", job_id: str = "j") -> dict[str, Any]:
    return {"index": index, "run_id": f"{job_id}.{index}", "status": "completed", "output": output}


def plant(store: MemoryStore, *lines: dict[str, Any], key: str = SHARD) -> None:
    store.put(key, "".join(json.dumps(line) + "\n" for line in lines).encode())


def read_job(
    monkeypatch: pytest.MonkeyPatch, store: MemoryStore, key: bytes | None, inputs: Any
) -> BatchHandle:
    """What a job's start reads of its ledger, without Ray, with the coordinator's ``key``."""
    import raygents.runtime.driver.client as client
    import raygents.stores.open as opener

    directory = SimpleNamespace(cached_settings=lambda: SimpleNamespace(key=key))
    rt = SimpleNamespace(settings=SimpleNamespace(store="memory://"), directory=directory)
    monkeypatch.setattr(client, "current", lambda: rt)
    monkeypatch.setattr(opener, "open_store", lambda url: store)
    runs = SimpleNamespace(job_id="j", read=lambda: None)
    handle = BatchHandle(runs, inputs, 1, None, None)  # type: ignore[arg-type]
    handle._read_job()
    return handle


def test_lines_are_sealed_with_the_key_and_read_back_without_their_seal() -> None:
    store = fresh_store()
    shards = open_ledger(store, "j", KEY)
    shards.write(item(0))
    shards.flush()
    (name,) = store.list("jobs/j/")
    (raw,) = [json.loads(t) for t in (store.get(name) or b"").decode().splitlines()]
    assert isinstance(raw[ledger.SEAL], str) and len(raw[ledger.SEAL]) == 64
    assert list(open_ledger(store, "j", KEY).completed()) == [item(0)]


def test_planted_lines_are_refused_and_their_items_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = fresh_store()
    honest = open_ledger(store, "j", KEY)
    honest.write(item(0))
    honest.flush()
    other_job = ledger.seal(item(4, job_id="j"), KEY, "other")  # (sealed for another job)
    edited = ledger.seal(item(3), KEY, "j")
    edited["output"] = "attacker's"
    plant(
        store,
        item(1, "attacker's"),  # no seal
        {**item(2, "attacker's"), ledger.SEAL: "00" * 32},  # a made-up seal
        edited,  # a sealed line changed since
        other_job,
        ledger.seal(item(5), b"another key, 32 bytes long......", "j"),
    )
    handle = read_job(monkeypatch, store, KEY, ["a"] * 6)
    assert sorted(handle._earlier.logged) == [0]
    assert handle._earlier.logged[0].output == "real"


def test_without_a_key_nothing_can_be_checked_and_lines_are_read_as_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = fresh_store()
    plant(store, item(0), ledger.seal(item(1), KEY, "j"))
    handle = read_job(monkeypatch, store, None, ["a", "b"])
    assert sorted(handle._earlier.logged) == [0, 1]


def test_a_key_set_later_refuses_the_unsealed_lines_of_before(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = fresh_store()
    unsigned = open_ledger(store, "j")
    unsigned.write(item(0))
    unsigned.flush()
    assert sorted(read_job(monkeypatch, store, None, ["a"])._earlier.logged) == [0]
    assert read_job(monkeypatch, store, KEY, ["a"])._earlier.logged == {}
