"""Which of an agent actor's records are checked against fencing after their put, and what
stops a fenced copy whose records are put alone (no Ray: a fake coordinator handle or a real
coordinator object, a file store or moto's S3 server)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import writerkit

from raygents.core.envelope import Outcome
from raygents.errors import CheckpointError
from raygents.records import checkpoint
from raygents.runtime.actor import reports as reports_module
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.link.settings import Settings
from raygents.stores.base import Store
from raygents.stores.file import FileStore
from raygents.stores.open import open_store


class _Coordinator:
    def __init__(self, durability: str) -> None:
        self.durability = durability
        self.discarded: list[tuple[str, str]] = []

    def settings(self) -> Settings:
        return Settings(store="memory://", durability=self.durability)

    def noted(self, notes: list[Any], ends: list[Any]) -> None:
        pass

    def lease(self, runs: list[tuple[str, int]]) -> list[str]:
        return []  # (no lease: every checked record is checked in the store)

    def discard(self, run_id: str, key: str) -> None:
        self.discarded.append((run_id, key))


def _counted(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The store's puts and looks (``put``/``has``), in order."""
    calls: list[str] = []
    for name in ("put", "put_if_dir", "has"):
        real = getattr(store, name)

        def counted(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append("has" if _name == "has" else "put")
            return _real(*args)

        monkeypatch.setattr(store, name, counted)
    return calls


def _store_of(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "file":
        return FileStore(tmp_path / "store")
    from s3_server import create_bucket

    server = request.getfixturevalue("session_s3")
    return open_store(f"s3://{create_bucket(server.endpoint_url)}/runs")


@pytest.fixture(autouse=True)
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reports_module, "_NOTE_WINDOW_S", 0.01)


@pytest.mark.parametrize("durability", ["sync", "async"])
async def test_only_a_sync_record_that_gates_something_is_checked_after_its_put(
    durability: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checked ``sync`` record: its put, then the fence mark and the newest checked record
    looked for. A record put ``checked=False`` (a batch's result, a journal record), and
    every ``async`` record: the put alone."""
    store = FileStore(tmp_path / "store")
    calls = _counted(store, monkeypatch)
    writer = await writerkit.writer(store, _Coordinator(durability))
    state = await writer.save(writerkit.state("r1"), "running", None)  # a first intent
    state = await writer.save(state, "running", None, checked=False)  # its batch's result
    state = await writer.save(state, "running", None)  # the next intent
    await writer.finish(Outcome("suspended", state))  # (waits for write-behind records)
    if durability == "sync":
        assert calls == ["put", "has", "put", "put", "has", "has"]
    else:
        assert calls == ["put", "put", "put"]
    assert [k.rsplit("/", 1)[1] for k in store.list("runs/r1/")] == [
        "0000000001.1.ckpt",
        "0000000002.1.ckpt",
        "0000000003.1.ckpt",
    ]


@pytest.mark.parametrize("kind", ["file", "s3"])
async def test_a_checked_record_after_a_deletion_is_fenced_though_an_unchecked_one_landed(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The run ended elsewhere and its records (fence marks too) were deleted; then this
    copy's unchecked result record landed (S3 has no directories to refuse it). Its next
    checked record looks for its newest *checked* record, which is gone, not for the
    unchecked one that landed after the deletion: the copy is fenced before its tools run."""
    store = _store_of(kind, tmp_path, request)
    coordinator = _Coordinator("sync")
    writer = await writerkit.writer(store, coordinator)
    state = await writer.save(writerkit.state("r1"), "running", None)  # checked: an intent
    state = await writer.save(state, "running", None, checked=False)
    store.delete(store.list("runs/r1/"))  # the run's clean-up elsewhere
    if kind == "file":  # (a file store refuses even the unchecked put: no directory)
        store.remove_empty_dir("runs/r1/")
        with pytest.raises(CheckpointError, match="fenced"):
            await writer.save(state, "running", None, checked=False)
        return
    state = await writer.save(state, "running", None, checked=False)  # lands
    assert store.list("runs/r1/") == [checkpoint.key_for("r1", 3, 1)]
    with pytest.raises(CheckpointError, match="fenced"):
        await writer.save(state, "running", None)  # the next intent
    assert coordinator.discarded == [("r1", checkpoint.key_for("r1", 4, 1))]


async def test_an_unchecked_record_of_a_fenced_copy_is_voided_by_the_coordinator(
    tmp_path: Path,
) -> None:
    """``async`` records are put alone: a copy of an earlier dispatch is not told at its put.
    Its report reaches the coordinator, which voids the record by its epoch and deletes it
    (the run's valid records do not build on it)."""
    coord = Coordinator("test", Settings(store=f"file://{tmp_path}", durability="async"))
    writer = await writerkit.writer(coord.store, coord)
    _, epoch = await coord.claim("r1", "driver", "worker")
    state = await writer.save(writerkit.state("r1", epoch), "running", None)
    _, again = await coord.claim("r1", "driver-2", "worker", True)  # a recovery
    assert again == epoch + 1
    recovered = checkpoint.key_for("r1", 2, again)  # the recovered dispatch's first record
    coord.store.put(recovered, b"r1:2:2")
    coord.noted([("r1", 2, again, b"r1:2:2", ("running", "worker", 2, None), False)])
    state = await writer.save(state, "running", None)  # the stale copy's next record
    await writer.finish(Outcome("suspended", state))
    void = checkpoint.key_for("r1", 2, epoch)
    for _ in range(250):
        if void not in coord.store.list("runs/r1/"):
            break
        await asyncio.sleep(0.02)
    first = checkpoint.key_for("r1", 1, epoch)
    assert coord.store.list("runs/r1/") == [first, recovered, checkpoint.fence_key("r1", again)]
    info = coord.table.get("r1")
    assert info is not None and info.seq == 2 and coord.table.epochs["r1"] == again
