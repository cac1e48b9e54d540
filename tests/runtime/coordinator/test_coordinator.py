"""The coordinator's hot records (what a resume or a recovery reads), resume's claim, and the
records agent actors write themselves with their fencing, on the plain class (no Ray: records
stay small, so nothing goes to the object store)."""

from __future__ import annotations

import asyncio
import functools
import os
from typing import Any

import pytest

from raygents.core.envelope import RunState
from raygents.errors import CheckpointError, TooManyRuns
from raygents.records import checkpoint
from raygents.records.runinfo import RunInfo
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.link.settings import Settings


def _coordinator() -> Coordinator:
    return Coordinator("test", Settings(store=f"memory://hot-{os.urandom(4).hex()}"))


def _info(run_id: str, status: str = "running", seq: int = 0) -> RunInfo:
    return RunInfo(run_id, status, "agent", seq=seq)


async def _save(coord: Coordinator, run_id: str, seq: int, full: bool = False) -> bytes:
    data = f"{run_id}:{seq}".encode()
    await coord.save(run_id, seq, data, ("running", "agent", 0, None), True, 0, full)
    return data


async def test_load_reads_hot_records_and_the_store_has_the_same() -> None:
    coord = _coordinator()
    written = [await _save(coord, "r1", 1, full=True)]
    written += [await _save(coord, "r1", seq) for seq in (2, 3)]
    assert await coord.load("r1") == written
    stored = coord.store.list(checkpoint.run_prefix("r1"))
    assert [coord.store.get(k) for k in stored] == written


async def test_a_chain_that_started_before_this_coordinator_is_read_from_the_store() -> None:
    coord = _coordinator()
    coord.store.put(checkpoint.key_for("r1", 1), b"r1:1")  # written by a predecessor
    second = await _save(coord, "r1", 2)  # a delta: its chain starts in the store
    assert "r1" not in coord.hot
    assert await coord.load("r1") == [b"r1:1", second]


async def test_a_failed_write_drops_the_hot_records_so_a_load_reads_the_store() -> None:
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


async def test_stopped_runs_keep_their_hot_records_within_bounds() -> None:
    coord = _coordinator()
    coord.hot.max_parked = 2
    for run_id in ("a", "b", "c"):
        await _save(coord, run_id, 1, full=True)
        await coord.finish(_info(run_id, "suspended", 1))
    assert set(coord.hot.chains) == {"b", "c"}, "the oldest stopped run's records were let go"
    assert await coord.load("a") == [b"a:1"], "from the store"
    await _save(coord, "b", 2)  # resumed: running again, no longer parked
    assert list(coord.hot.parked) == ["c"]
    await coord.finish(_info("b", "completed", 2))
    assert "b" not in coord.hot
    assert coord.hot.parked_size == len(b"c:1")


async def test_claim_and_load_takes_a_stopped_run_and_leaves_others_alone() -> None:
    coord = _coordinator()
    record = await _save(coord, "r1", 1, full=True)
    await coord.finish(_info("r1", "suspended", 1))
    before = coord.table.runs["r1"]

    taken, epoch, blobs, was = await coord.claim_and_load("r1", "driver-1")
    assert (taken, blobs, was) == (None, [record], before)
    assert epoch == 1 and coord.table.runs["r1"].status == "running"
    assert coord.table.runs["r1"].owner == "driver-1"

    taken, epoch, blobs, _ = await coord.claim_and_load("r1", "driver-2")
    assert taken is not None and taken.owner == "driver-1"
    assert (epoch, blobs) == (0, [])

    coord.unclaim("r1", before)  # driver-1 did not go on with it
    assert coord.table.runs["r1"] == before

    taken, epoch, blobs, was = await coord.claim_and_load("nothing", "driver-1")
    assert (taken, epoch, blobs, was) == (None, 0, [], None)
    assert "nothing" not in coord.table.runs, "a run without records is not claimed"


# --- records that agent actors write to a file store themselves --------------------------


def _file_coordinator(tmp_path: Any) -> Coordinator:
    coord = Coordinator("test", Settings(store=f"file://{tmp_path}"))
    assert coord.direct and coord.settings().direct
    return coord


def _direct(coord: Coordinator, run_id: str, seq: int, epoch: int = 1) -> tuple[Any, ...]:
    """An agent actor's write: the record in the store, and its report."""
    data = f"{run_id}:{seq}:{epoch}".encode()
    coord.store.put(checkpoint.key_for(run_id, seq, epoch), data)
    return (run_id, seq, epoch, data, ("running", "agent", seq, None), seq == 1)


async def test_reported_records_fill_the_run_table_and_the_hot_copies(tmp_path: Any) -> None:
    coord = _file_coordinator(tmp_path)
    await coord.claim("r1", "driver", "agent")
    coord.noted([_direct(coord, "r1", 1), _direct(coord, "r1", 2)])
    assert coord.table.runs["r1"].seq == 2 and coord.table.runs["r1"].turns == 2
    assert coord.hot.chains["r1"].blobs() == [b"r1:1:1", b"r1:2:1"] and coord.hot.chains["r1"].told
    coord.noted([_direct(coord, "r1", 1)])  # late, out of order: the table keeps seq 2
    assert coord.table.runs["r1"].seq == 2


async def test_a_running_runs_load_reads_the_store_which_may_hold_unreported_records(
    tmp_path: Any,
) -> None:
    coord = _file_coordinator(tmp_path)
    await coord.claim("r1", "driver", "agent")
    coord.noted([_direct(coord, "r1", 1)])
    _direct(coord, "r1", 2)  # its actor died before reporting it
    assert await coord.load("r1") == [b"r1:1:1", b"r1:2:1"]
    # a stop record the coordinator stores itself comes after every report: hot is whole
    await coord.save("r1", 3, b"r1:3:1", ("suspended", "agent", 3, None), True, 1)
    await coord.finish(_info("r1", "suspended", 3))
    coord.store.delete(coord.store.list("runs/"))
    assert await coord.load("r1") == [b"r1:1:1", b"r1:3:1"], "from memory"


async def test_a_new_dispatch_marks_the_store_and_voids_the_old_copys_records(
    tmp_path: Any,
) -> None:
    coord = _file_coordinator(tmp_path)
    _, first = await coord.claim("r1", "driver", "agent")
    coord.noted([_direct(coord, "r1", 1), _direct(coord, "r1", 2)])
    assert coord.store.get(checkpoint.fence_key("r1", 2)) is None
    _, second = await coord.claim("r1", "driver", "agent", True)  # recovery
    assert (first, second) == (1, 2)
    assert coord.store.get(checkpoint.fence_key("r1", 2)) == b""
    stale = _direct(coord, "r1", 3, epoch=1)  # the old copy, before it sees the mark
    coord.noted([stale])
    assert coord.table.runs["r1"].seq == 2, "a fenced copy's report changes nothing"
    coord.noted([_direct(coord, "r1", 3, epoch=2)])
    assert await coord.load("r1") == [b"r1:1:1", b"r1:2:1", b"r1:3:2"]
    coord.discard("r1", checkpoint.key_for("r1", 3, 1))
    coord.discard("r1", checkpoint.key_for("r1", 2, 1))  # the chain builds on it: kept
    await _until(lambda: checkpoint.key_for("r1", 3, 1) not in coord.store.list("runs/"))
    assert checkpoint.key_for("r1", 2, 1) in coord.store.list("runs/")


async def test_a_fenced_write_after_the_run_completed_is_deleted(tmp_path: Any) -> None:
    coord = _file_coordinator(tmp_path)
    await coord.claim("r1", "driver", "agent")
    coord.noted([_direct(coord, "r1", 1)])
    await coord.finish(_info("r1", "completed", 1))
    marker = "runs/r1/done.1"  # (kept: the run is never claimed again)
    await _until(lambda: coord.store.list("runs/") == [marker])
    late = _direct(coord, "r1", 2)
    coord.discard("r1", checkpoint.key_for("r1", 2, late[2]))
    await _until(lambda: coord.store.list("runs/") == [marker])


async def test_the_run_table_is_rebuilt_from_the_valid_records_and_the_fence_marks(
    tmp_path: Any,
) -> None:
    coord = _file_coordinator(tmp_path)
    await coord.claim("r1", "driver", "agent")
    await coord.claim("r1", "driver", "agent", True)
    for seq, epoch in ((1, 1), (2, 1), (2, 2), (3, 1)):
        record = {"format": 1, "seq": seq, "kind": "full", "status": "running", "keep": 0}
        state = {"agent_name": "agent", "turns": seq * 10 + epoch, "epoch": epoch}
        data = checkpoint.encode({**record, "append": [], "state": state, "run_id": "r1"})
        coord.store.put(checkpoint.key_for("r1", seq, epoch), data)
    rebuilt = Coordinator("test", Settings(store=coord.store.url))
    assert rebuilt.table.runs["r1"].seq == 2 and rebuilt.table.runs["r1"].turns == 22
    assert rebuilt.table.runs["r1"].status == "suspended"
    assert rebuilt.table.epochs["r1"] == 2


async def test_a_rebuilt_run_keeps_its_tenant_and_its_resume_takes_that_tenants_slot(
    tmp_path: Any,
) -> None:
    coord = _file_coordinator(tmp_path)
    state = RunState(run_id="r1", agent_name="agent", tenant="acme")
    _, first, body = checkpoint.next_record(state.evolve(seq=0), "running", None)
    _, delta, _ = checkpoint.next_record(state.evolve(seq=1, recorded=0), "suspended", body)
    for record in (first, delta):
        key = checkpoint.key_for("r1", record["seq"], 0)
        coord.store.put(key, checkpoint.encode(record))
    rebuilt = Coordinator("test", Settings(store=coord.store.url, max_concurrent_runs=1))
    assert rebuilt.table.runs["r1"].tenant == "acme"
    await rebuilt.claim("other", "driver", "agent", False, "acme")
    with pytest.raises(TooManyRuns, match="'acme'"):
        await rebuilt.claim_and_load("r1", "driver")


async def test_claims_in_one_call_are_answered_in_order_and_a_refusal_is_its_own(
    tmp_path: Any,
) -> None:
    coord = Coordinator("test", Settings(store=f"file://{tmp_path}", max_concurrent_runs=2))
    assert await coord.claim("busy", "driver-1", "agent") == (None, 1)
    answers = await coord.claim_runs(
        [
            ("job.0", "driver-2", "agent", None),
            ("busy", "driver-2", "agent", None),
            ("job.1", "driver-2", "agent", None),  # (the default tenant's 2 slots are taken)
            ("job.2", "driver-2", "agent", "acme"),
        ]
    )
    assert answers[0] == (None, 1)
    taken, epoch = answers[1]  # type: ignore[misc]
    assert taken is not None and (taken.owner, epoch) == ("driver-1", 0)
    assert isinstance(answers[2], TooManyRuns) and answers[2].tenant == "default"
    assert answers[3] == (None, 1)
    assert "job.1" not in coord.table.runs  # (nothing of a refused claim stays)
    assert coord.table.runs["job.2"].owner == "driver-2"


async def _until(check: Any, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_ends_reported_with_records_finish_children_after_the_records(tmp_path: Any) -> None:
    coord = _file_coordinator(tmp_path)
    await coord.claim("parent", "actor", "agent")
    await coord.claim("parent.c1", "actor", "worker")
    coord.noted([_direct(coord, "parent.c1", 1), _direct(coord, "parent.c1", 2)])
    journal = _direct(coord, "parent", 1)
    # the parent's journal record and its child's end travel in one report
    coord.noted([journal], [RunInfo("parent.c1", "completed", "worker", 1, seq=2)])
    assert coord.table.runs["parent"].seq == 1 and coord.table.runs["parent"].status == "running"
    assert coord.table.runs["parent.c1"].status == "completed" and "parent.c1" not in coord.hot
    marker = "runs/parent.c1/done.1"  # (kept: the run is never claimed again)
    await _until(lambda: coord.store.list("runs/parent.c1/") == [marker])
    assert coord.store.list("runs/parent/") == [checkpoint.key_for("parent", 1, 1)]
    coord.noted([_direct(coord, "parent.c1", 2)])  # a late report of the child: no change
    assert coord.table.runs["parent.c1"].status == "completed"


async def test_claim_many_claims_in_order_with_one_answer_each(tmp_path: Any) -> None:
    coord = _file_coordinator(tmp_path)
    await coord.claim("b", "someone-else", "agent")
    answers = await coord.claim_many(
        [
            ("a", "actor", "agent", True),
            ("b", "actor", "agent", True),
            ("a", "actor", "x", True),
        ]
    )
    assert [epoch for _, epoch in answers] == [1, 2, 2]
    assert all(taken is None for taken, _ in answers)
    assert coord.table.runs["b"].owner == "actor"  # taken over (force), and fenced in the store
    assert coord.store.get(checkpoint.fence_key("b", 2)) == b""
    taken, epoch = (await coord.claim_many([("b", "driver", "agent", False)]))[0]
    assert taken is not None and taken.owner == "actor" and epoch == 0


async def test_a_report_that_arrives_after_the_runs_end_changes_nothing(tmp_path: Any) -> None:
    coord = _file_coordinator(tmp_path)
    await coord.claim("r1", "driver", "agent")
    first, second = _direct(coord, "r1", 1), _direct(coord, "r1", 2)
    coord.noted([first])
    await coord.finish(RunInfo("r1", "completed", "agent", 2, seq=2))
    coord.noted([second])  # the actor sent it before the run ended; it came after
    assert coord.table.runs["r1"].status == "completed" and "r1" not in coord.hot


def test_an_actor_write_finds_out_that_its_copy_of_the_run_is_fenced(tmp_path: Any) -> None:
    from raygents.runtime.actor.writer import _fenced, _put_record
    from raygents.stores.file import FileStore

    def _put_unless_fenced(
        store: Any, key: str, data: bytes, fence: str, first: bool, previous: str | None
    ) -> bool:  # (a checked put with no lease: the put, then the checks)
        return not _put_record(store, key, data, first) or _fenced(store, fence, previous)

    store = FileStore(tmp_path)
    key = functools.partial(checkpoint.key_for, "r1")
    fence = checkpoint.fence_key("r1", 2)
    assert not _put_unless_fenced(store, key(1, 1), b"1", fence, True, None)
    assert not _put_unless_fenced(store, key(2, 1), b"2", fence, False, key(1, 1))
    store.mark(fence)  # the run was dispatched again
    assert _put_unless_fenced(store, key(3, 1), b"3", fence, False, key(2, 1))
    store.delete(store.list())  # the run completed elsewhere: its records went
    assert _put_unless_fenced(store, key(3, 1), b"3", fence, False, key(2, 1))
    assert store.list() == [], "nothing written where the run's records were"
    store.put(key(3, 2), b"3'")  # a record of the newer copy (its directory is back)
    assert _put_unless_fenced(store, key(4, 1), b"4", fence, False, key(3, 1)), (
        "its own previous record is gone"
    )


@pytest.mark.parametrize("store", ["file", "memory"])
async def test_in_exit_mode_actors_mark_completed_runs_and_a_new_dispatch_fences(
    tmp_path: Any, store: str
) -> None:
    """``exit`` durability: no running records, but agent actors store completed runs' markers
    in a durable store themselves (not through this coordinator), so a recovery's dispatch
    marks the store for the lost copy's marker to be refused."""
    url = f"file://{tmp_path}" if store == "file" else f"memory://exit-{tmp_path.name}"
    coord = Coordinator("test", Settings(store=url, durability="exit"))
    assert coord.settings().direct is (store == "file")
    _, first = await coord.claim("r1", "driver", "agent")
    _, second = await coord.claim("r1", "driver", "agent", True)  # recovery
    assert (first, second) == (1, 2)
    fenced = coord.store.get(checkpoint.fence_key("r1", 2))
    assert fenced == (b"" if store == "file" else None)


async def test_resuming_a_run_whose_copy_stopped_here_needs_no_fence_mark(tmp_path: Any) -> None:
    coord = _file_coordinator(tmp_path)
    await coord.claim("r1", "driver", "agent")
    coord.noted([_direct(coord, "r1", 1)])
    await coord.save("r1", 2, b"r1:2:1", ("suspended", "agent", 2, None), True, 1)
    await coord.finish(_info("r1", "suspended", 2))
    _, epoch, blobs, _ = await coord.claim_and_load("r1", "driver")
    assert epoch == 2 and blobs == [b"r1:1:1", b"r1:2:1"]
    assert coord.store.get(checkpoint.fence_key("r1", 2)) is None, "that copy ended"
    _, epoch = await coord.claim("r1", "driver", "agent", True)  # a recovery
    assert coord.store.get(checkpoint.fence_key("r1", epoch)) == b""
