"""Retention never deletes what it cannot read: a completion marker or a record that does not
decode (signed with a key ``gc`` was not given, damaged, planted) says nothing of when its
run ended, so the run is listed as unreadable and kept, by ``raygents gc --store``, by the
coordinator's ``gc`` and by its background expiry."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path

import pytest
from runtime.coordinator.test_coordinator import _until

from raygents.cli.main import main
from raygents.records import checkpoint, codec, rebuild, retention
from raygents.records.keptresult import done_marker
from raygents.records.runinfo import RunInfo, RunSummary
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.link.settings import Settings
from raygents.stores.open import FileStore

KEY = b"a-checkpoint-key-of-32-bytes-...."
KEY_ENV = "RAYGENTS_CHECKPOINT_KEY"
MINUTE_AGO = time.time() - 60
LONG_AGO = time.time() - 30 * 86400


def _marker(run_id: str, at: float, key: bytes | None = None) -> bytes:
    result = RunSummary(final_output="out", messages=(), usage=None, turns=1, agent_name="agent")
    done = done_marker(RunInfo(run_id, "completed", "agent", 1, seq=1), 1, result)
    return codec.encode({**done, "at": at}, key=key)


def _record(run_id: str, status: str, at: float, key: bytes | None = None) -> bytes:
    state = {"agent_name": "agent", "turns": 1, "epoch": 1}
    record = {
        "format": 1, "run_id": run_id, "seq": 1, "kind": "full", "status": status, "keep": 0,
        "append": [], "state": state, "at": at,
    }  # fmt: skip
    return codec.encode(record, key=key)


def _store(tmp_path: Path) -> FileStore:
    """Fresh and old results signed with ``KEY``, a damaged and a foreign marker, a signed
    failed run, and one old result that reads without a key."""
    store = FileStore(tmp_path)
    store.put("runs/fresh/done.1", _marker("fresh", MINUTE_AGO, KEY))
    store.put("runs/old-signed/done.1", _marker("old-signed", LONG_AGO, KEY))
    store.put("runs/damaged/done.1", b"\x00not a marker at all")
    store.put("runs/foreign/done.1", _marker("someone-else", LONG_AGO))
    store.put(
        checkpoint.key_for("failed-signed", 1, 1), _record("failed-signed", "failed", LONG_AGO, KEY)
    )
    store.put("runs/old-plain/done.1", _marker("old-plain", LONG_AGO))
    return store


UNREADABLE = ["damaged", "failed-signed", "foreign", "fresh", "old-signed"]


def _gc(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["gc", *args], out=out), out.getvalue()


def test_a_marker_that_cannot_be_read_makes_its_run_unreadable_not_ended_in_1970(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    for run_id in ("fresh", "damaged", "foreign"):
        listed = rebuild.listing(run_id, store.list(f"runs/{run_id}/"))
        found = rebuild.read(store, listed, None)
        assert found is not None and found.status == "completed", "its name says it completed"
        assert found.unreadable and "marker" in (found.error or ""), found


def test_gc_on_a_store_without_the_key_keeps_and_lists_what_it_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    store = _store(tmp_path)
    url = f"file://{tmp_path}"
    code, text = _gc("--store", url, "--older-than", "7d", "--json")
    assert code == 0, text
    doc = json.loads(text)
    assert [r["run_id"] for r in doc["runs"]] == ["old-plain"]
    assert sorted(r["run_id"] for r in doc["unreadable"]) == UNREADABLE
    assert all(r["why"].startswith("unreadable: ") for r in doc["unreadable"])
    left = sorted({k.split("/")[1] for k in store.list("runs/")})
    assert left == UNREADABLE, "nothing it could not read was deleted"

    code, text = _gc("--store", url, "--older-than", "0s")
    assert code == 0, text
    assert text.startswith("deleted 0 run(s) that ended over 0s ago"), text
    assert "kept 5 run(s) that cannot be read" in text and "fresh" in text, text
    assert sorted({k.split("/")[1] for k in store.list("runs/")}) == UNREADABLE


def test_gc_on_a_store_with_the_key_deletes_only_the_old_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY.decode())
    store = _store(tmp_path)
    code, text = _gc("--store", f"file://{tmp_path}", "--older-than", "7d", "--json")
    assert code == 0, text
    doc = json.loads(text)
    assert sorted(r["run_id"] for r in doc["runs"]) == ["failed-signed", "old-signed"]
    assert sorted(r["run_id"] for r in doc["unreadable"]) == ["damaged", "foreign", "old-plain"]
    assert sorted({k.split("/")[1] for k in store.list("runs/")}) == [
        "damaged", "foreign", "fresh", "old-plain"
    ]  # fmt: skip


async def test_gc_on_the_coordinator_keeps_what_it_cannot_read(tmp_path: Path) -> None:
    store = _store(tmp_path)
    coord = Coordinator("test", Settings(store=f"file://{tmp_path}"))
    assert await coord.records.rebuilt(timeout_s=10.0)
    _, rows = await coord.gc(0.0, dry_run=False)
    assert [r["run_id"] for r in rows if "unreadable" not in r] == ["old-plain"]
    assert sorted(r["run_id"] for r in rows if "unreadable" in r) == UNREADABLE
    assert sorted({k.split("/")[1] for k in store.list("runs/")}) == UNREADABLE
    _, rows = await coord.gc(0.0, dry_run=False)  # (and again, once it has read them)
    assert sorted({k.split("/")[1] for k in store.list("runs/")}) == UNREADABLE


async def test_the_coordinators_expiry_keeps_what_it_cannot_read(tmp_path: Path) -> None:
    store = _store(tmp_path)
    coord = Coordinator("test", Settings(store=f"file://{tmp_path}", retention_s=1.0))
    coord.table.completed_kept = coord.table.failed_kept = 0  # (forgotten at once: aging)
    assert await coord.records.rebuilt(timeout_s=10.0)
    coord.table._prune(coord.table._completed, 0)
    coord.table._prune(coord.table._failed, 0)
    coord.cleaner.start()
    await _until(lambda: not store.list("runs/old-plain/"))
    coord.cleaner.expire_due(time.time() + 86400)  # (whatever the age: not read, not deleted)
    await _until(lambda: not coord.cleaner._expiring)
    assert sorted({k.split("/")[1] for k in store.list("runs/")}) == UNREADABLE


def test_scan_lists_unreadable_runs_beside_the_expired(tmp_path: Path) -> None:
    store = _store(tmp_path)
    expired, unreadable = retention.scan(store, None, time.time())
    assert [e.run_id for e in expired] == ["old-plain"]
    assert sorted(u.run_id for u in unreadable) == UNREADABLE


async def test_a_marker_that_cannot_be_read_does_not_clean_its_runs_records_away(
    tmp_path: Path,
) -> None:
    """A completed run's records left behind are deleted after its marker is read back; a
    planted or foreign marker over a suspended run's records must not take them."""
    store = FileStore(tmp_path)
    record = checkpoint.key_for("victim", 1, 1)
    store.put(record, _record("victim", "suspended", MINUTE_AGO))
    store.put("runs/victim/done.1", _marker("victim", MINUTE_AGO, KEY))  # (no key here)
    coord = Coordinator("test", Settings(store=f"file://{tmp_path}"))
    assert await coord.records.rebuilt(timeout_s=10.0)
    info = coord.table.get("victim")
    assert info is not None and info.status == "completed" and "victim" in coord.table.unreadable
    coord.cleaner.start()
    await asyncio.sleep(0.5)  # (the clean-up it would queue takes a few milliseconds)
    assert sorted(store.list("runs/victim/")) == [record, "runs/victim/done.1"]
