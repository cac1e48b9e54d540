"""Batch jobs' ledgers hold every completed item's output, so they follow the runs' retention:
``raygents gc`` (on the store alone and through the coordinator) and the coordinator's expiry
remove the shards written by runs of a job that started longer ago than the age, and leave
fresh shards, shards of a writer whose clock runs ahead, and keys that are not shards."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest

from raygents.cli.main import main
from raygents.records import retention
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.link.settings import Settings
from raygents.stores.file import FileStore
from raygents.stores.memory import MemoryStore

DAY = 86400.0


def _shard(job_id: str, started_at: float, part: int = 0) -> str:
    writer = f"{int(started_at * 1e6):016x}-42"
    return f"jobs/{job_id}/{job_id}.{writer}.{part:05d}.jsonl"


def _plant(store: FileStore | MemoryStore) -> dict[str, str]:
    now = time.time()
    keys = {
        "old": _shard("old", now - 30 * DAY),
        "old2": _shard("old", now - 20 * DAY, part=1),
        "mixed_old": _shard("mixed", now - 30 * DAY),
        "mixed_new": _shard("mixed", now - 60),
        "ahead": _shard("ahead", now + 365 * DAY),
        "not_a_shard": "jobs/old/notes.txt",
        "another_jobs_name": f"jobs/old/{_shard('other', now - 30 * DAY).rpartition('/')[2]}",
    }
    for key in keys.values():
        store.put(key, b'{"index":0}\n')
    return keys


def _left(store: FileStore | MemoryStore, keys: dict[str, str]) -> set[str]:
    found = set(store.list("jobs/"))
    return {name for name, key in keys.items() if key in found}


KEPT = {"mixed_new", "ahead", "not_a_shard", "another_jobs_name"}


def test_gc_on_the_store_removes_expired_ledger_shards(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path / "s"))
    keys = _plant(store)
    url = f"file://{tmp_path / 's'}"
    out = io.StringIO()
    assert main(["gc", "--store", url, "--older-than", "7d", "--dry-run", "--json"], out=out) == 0
    doc = json.loads(out.getvalue())
    assert sorted((j["job_id"], j["keys"]) for j in doc["jobs"]) == [("mixed", 1), ("old", 2)]
    assert _left(store, keys) == set(keys)  # (a dry run deletes nothing)
    out = io.StringIO()
    assert main(["gc", "--store", url, "--older-than", "7d"], out=out) == 0
    assert "ledger shards of 2 batch job(s)" in out.getvalue()
    assert _left(store, keys) == KEPT


async def test_gc_through_the_coordinator_removes_expired_ledger_shards() -> None:
    url = f"memory://gc-ledgers-{os.urandom(4).hex()}"
    store = MemoryStore(url.removeprefix("memory://"))
    keys = _plant(store)
    coord = Coordinator("test", Settings(store=url))
    _, rows = await coord.gc(older_than_s=7 * DAY)
    assert sorted(r["job_id"] for r in rows if "job_id" in r) == ["mixed", "old"]
    assert _left(store, keys) == KEPT


def test_the_coordinators_expiry_removes_them_too() -> None:
    store = MemoryStore(f"gc-ledgers-{os.urandom(4).hex()}")
    keys = _plant(store)
    coord = Coordinator("test", Settings(store=store.url, retention_s=7 * DAY))
    coord.cleaner.expire_ledgers(time.time() - 7 * DAY)
    assert _left(store, keys) == KEPT


@pytest.mark.parametrize("name", ["j.zzzz.00000.jsonl", "j.0000000000000001-1.00000.json"])
def test_names_that_are_not_shards_have_no_time(name: str) -> None:
    assert retention.scan_ledgers(_with(name), time.time()) == []


def _with(name: str) -> MemoryStore:
    store = MemoryStore(os.urandom(4).hex())
    store.put(f"jobs/j/{name}", b"")
    return store
