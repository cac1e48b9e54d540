"""The coordinator's hot records (what a resume or a recovery reads) and resume's claim, on the
plain class (no Ray: records stay small, so nothing goes to the object store)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from raygents import checkpoint
from raygents.errors import CheckpointError
from raygents.runtime import coordinator as coordinator_module
from raygents.runtime.coordinator import Coordinator, RunInfo, _Hot


def _coordinator() -> Coordinator:
    return Coordinator("test", f"memory://hot-{os.urandom(4).hex()}")


def _info(run_id: str, status: str = "running", seq: int = 0) -> RunInfo:
    return RunInfo(run_id, status, "agent", seq=seq)


async def _save(coord: Coordinator, run_id: str, seq: int, full: bool = False) -> bytes:
    data = f"{run_id}:{seq}".encode()
    await coord.save(run_id, seq, data, ("running", "agent", 0, None), True, 0, full)
    return data


def test_hot_records_keep_the_chain_from_the_newest_full_record_in_any_arrival_order() -> None:
    hot = _Hot(1, {})
    hot.add(1, b"1", 1, True)
    hot.add(3, b"3", 1, False)  # arrives before 2
    hot.add(2, b"2", 1, False)
    assert hot.blobs() == [b"1", b"2", b"3"]
    hot.add(5, b"5", 1, False)
    hot.add(4, b"4", 1, True)  # a full record drops what it supersedes, keeps what follows
    assert hot.blobs() == [b"4", b"5"]
    hot.add(2, b"2", 1, False)  # older than the newest full record: not needed
    assert hot.blobs() == [b"4", b"5"]
    assert hot.size == 2


def test_load_reads_hot_records_and_the_store_has_the_same() -> None:
    async def main() -> None:
        coord = _coordinator()
        written = [await _save(coord, "r1", 1, full=True)]
        written += [await _save(coord, "r1", seq) for seq in (2, 3)]
        assert await coord.load("r1") == written
        stored = coord.store.list(checkpoint.run_prefix("r1"))
        assert [coord.store.get(k) for k in stored] == written

    asyncio.run(main())


def test_a_chain_that_started_before_this_coordinator_is_read_from_the_store() -> None:
    async def main() -> None:
        coord = _coordinator()
        coord.store.put(checkpoint.key_for("r1", 1), b"r1:1")  # written by a predecessor
        second = await _save(coord, "r1", 2)  # a delta: its chain starts in the store
        assert "r1" not in coord.hot
        assert await coord.load("r1") == [b"r1:1", second]

    asyncio.run(main())


def test_a_failed_write_drops_the_hot_records_so_a_load_reads_the_store() -> None:
    async def main() -> None:
        coord = _coordinator()
        first = await _save(coord, "r1", 1, full=True)
        real_put = coord.store.put

        def failing(key: str, data: bytes) -> None:
            real_put(key, data)  # applied, then reported as failed
            raise CheckpointError("store timed out", key=key)

        coord.store.put = failing  # type: ignore[method-assign]
        with pytest.raises(CheckpointError):
            await _save(coord, "r1", 2)
        coord.store.put = real_put  # type: ignore[method-assign]
        assert "r1" not in coord.hot
        assert await coord.load("r1") == [first, b"r1:2"]

    asyncio.run(main())


def test_stopped_runs_keep_their_hot_records_within_bounds(monkeypatch: Any) -> None:
    monkeypatch.setattr(coordinator_module, "_PARKED", 2)

    async def main() -> None:
        coord = _coordinator()
        for run_id in ("a", "b", "c"):
            await _save(coord, run_id, 1, full=True)
            await coord.finish(_info(run_id, "suspended", 1))
        assert set(coord.hot) == {"b", "c"}, "the oldest stopped run's records were let go"
        assert await coord.load("a") == [b"a:1"], "from the store"
        await _save(coord, "b", 2)  # resumed: running again, no longer parked
        assert list(coord.parked) == ["c"]
        await coord.finish(_info("b", "completed", 2))
        assert "b" not in coord.hot
        assert coord.parked_size == len(b"c:1")

    asyncio.run(main())


def test_claim_and_load_takes_a_stopped_run_and_leaves_others_alone() -> None:
    async def main() -> None:
        coord = _coordinator()
        record = await _save(coord, "r1", 1, full=True)
        await coord.finish(_info("r1", "suspended", 1))
        before = coord.runs["r1"]

        taken, epoch, blobs, was = await coord.claim_and_load("r1", "driver-1")
        assert (taken, blobs, was) == (None, [record], before)
        assert epoch == 1 and coord.runs["r1"].status == "running"
        assert coord.runs["r1"].owner == "driver-1"

        taken, epoch, blobs, _ = await coord.claim_and_load("r1", "driver-2")
        assert taken is not None and taken.owner == "driver-1"
        assert (epoch, blobs) == (0, [])

        coord.unclaim("r1", before)  # driver-1 did not go on with it
        assert coord.runs["r1"] == before

        taken, epoch, blobs, was = await coord.claim_and_load("nothing", "driver-1")
        assert (taken, epoch, blobs, was) == (None, 0, [], None)
        assert "nothing" not in coord.runs, "a run without records is not claimed"

    asyncio.run(main())
