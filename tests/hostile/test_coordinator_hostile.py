"""The coordinator against a hostile or damaged store, and its bounds: a rebuild that never
raises (each bad run is listed with its reason), failure records that survive a restart,
completed runs that are never claimed again, and tables that stay bounded (no Ray: the plain
classes over ``memory://`` and ``file://`` stores)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
from fakes import FakeHandle
from runtime.coordinator.test_coordinator import _until

from raygents.records import checkpoint, codec
from raygents.records.runinfo import RunInfo
from raygents.runtime.coordinator import coordinator as coordinator_module
from raygents.runtime.coordinator import recordstore
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.link.settings import Settings
from raygents.stores.memory import _MEMORY, MemoryStore


def _url() -> str:
    return f"memory://hostile-{os.urandom(4).hex()}"


def _record(
    run_id: str = "good", seq: int = 1, status: str = "suspended", **extra: Any
) -> dict[str, Any]:
    state = {"agent_name": "agent", "turns": 3, "epoch": 1}
    record: dict[str, Any] = {
        "format": 1,
        "seq": seq,
        "kind": "full",
        "status": status,
        "keep": 0,
        "append": [],
        "state": state,
        "run_id": run_id,
        "at": time.time(),
    }
    return {**record, **extra}


def _put(url: str, key: str, value: Any, hmac_key: bytes | None = None) -> None:
    data = value if isinstance(value, bytes) else codec.encode(value, key=hmac_key)
    MemoryStore(url.removeprefix("memory://")).put(key, data)


def _plant(url: str, key: str, data: bytes) -> None:
    """A key no store would accept (``put`` validates keys), written behind its back."""
    name = url.removeprefix("memory://")
    MemoryStore(name)
    _MEMORY[name][key] = data


def _with_good_run(url: str) -> None:
    _put(url, checkpoint.key_for("good", 1, 1), _record())


async def _rebuilt(url: str, **options: Any) -> Coordinator:
    coord = Coordinator("test", Settings(store=url, **options))
    assert await coord.records.rebuilt(timeout_s=10.0)
    return coord


def _assert_good_run_rebuilt(coord: Coordinator) -> None:
    good = coord.table.runs["good"]
    assert (good.status, good.agent_name, good.turns, good.seq) == ("suspended", "agent", 3, 1)


def _assert_listed(coord: Coordinator, run_id: str, *words: str) -> None:
    info = coord.table.runs[run_id]
    assert info.status == "failed", info
    assert info.last_error is not None and info.last_error.startswith("unreadable:"), info
    for word in words:
        assert word in info.last_error, (word, info.last_error)
    assert run_id in coord.table.unreadable


# --- 5: a rebuild never raises; each bad run is listed with its reason --------------------


async def test_a_non_numeric_fence_mark_is_ignored_in_a_good_run_and_listed_alone() -> None:
    url = _url()
    _with_good_run(url)
    _put(url, "runs/good/fence.x", b"")  # beside good records: ignored, logged
    _put(url, "runs/evil/fence.x", b"")  # alone: nothing to rebuild, listed
    coord = await _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    assert coord.table.epochs["good"] == 1
    _assert_listed(coord, "evil", "runs/evil/fence.x")


async def test_an_unsigned_record_without_a_status_is_listed() -> None:
    url = _url()
    _with_good_run(url)
    record = _record("nostatus")
    del record["status"]
    _put(url, checkpoint.key_for("nostatus", 1, 1), record)
    coord = await _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    _assert_listed(coord, "nostatus", "status", "0000000001.1.ckpt")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seq", "1"),
        ("seq", True),
        ("seq", 7),  # not the key's seq
        ("status", "exploded"),
        ("status", ["failed"]),
        ("state", ["not", "a", "dict"]),
        ("at", "yesterday"),
        ("error", {"nested": True}),
        ("run_id", "someone-else"),
    ],
)
async def test_a_record_with_a_wrong_field_is_listed(field: str, value: Any) -> None:
    url = _url()
    _with_good_run(url)
    _put(url, checkpoint.key_for("odd", 1, 1), {**_record("odd"), field: value})
    coord = await _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    _assert_listed(coord, "odd", "0000000001.1.ckpt")
    error = coord.table.runs["odd"].last_error or ""
    assert any(word in error for word in (field, "belongs to run", "not a valid record")), error


@pytest.mark.parametrize(
    ("field", "value"),
    [("turns", "many"), ("turns", -1), ("agent_name", 7), ("epoch", "e"), ("epoch", 2**40)],
)
async def test_a_state_with_a_wrong_field_is_listed(field: str, value: Any) -> None:
    url = _url()
    _with_good_run(url)
    record = _record("odd")
    record["state"] = {**record["state"], field: value}
    _put(url, checkpoint.key_for("odd", 1, 1), record)
    coord = await _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    _assert_listed(coord, "odd", "0000000001.1.ckpt")
    error = coord.table.runs["odd"].last_error or ""
    assert any(word in error for word in (field, "belongs to run")), error


@pytest.mark.parametrize(
    "data",
    [b"", b"RGCK", b"x" * 14, os.urandom(200), codec.encode([1, 2]), b"RGCK\x01" + bytes(60)],
)
async def test_a_record_that_does_not_decode_is_listed(data: bytes) -> None:
    url = _url()
    _with_good_run(url)
    _put(url, checkpoint.key_for("broken", 1, 1), data)
    coord = await _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    _assert_listed(coord, "broken", "0000000001.1.ckpt")


async def test_a_short_hmac_key_fails_each_read_not_the_coordinator() -> None:
    url = _url()
    _with_good_run(url)
    coord = await _rebuilt(url, key=b"k" * 14)  # codec refuses keys under 16 bytes
    _assert_listed(coord, "good", "key")


async def test_keys_no_run_writes_are_listed_under_their_run_id() -> None:
    url = _url()
    _with_good_run(url)
    data = codec.encode(_record("x"))
    _plant(url, "runs/a b/0000000001.1.ckpt", data)
    _plant(url, "runs/../0000000001.1.ckpt", data)
    _plant(url, "runs//0000000001.1.ckpt", data)
    _plant(url, "runs/" + "r" * 300 + "/0000000001.1.ckpt", data)
    _plant(url, "runs/lonely", data)  # a file where a run's folder should be
    coord = await _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    for run_id in ("a b", "..", "", "r" * 300):
        _assert_listed(coord, run_id, "run id")
    _assert_listed(coord, "lonely", "runs/lonely")


async def test_a_rebuild_over_a_file_store_with_planted_files_lists_them(tmp_path: Any) -> None:
    url = f"file://{tmp_path}"
    Coordinator("test", Settings(store=url))  # makes the store
    good = tmp_path / "runs" / "good"
    good.mkdir(parents=True)
    (good / "0000000001.1.ckpt").write_bytes(codec.encode(_record()))
    (good / "fence.x").write_bytes(b"")
    evil = tmp_path / "runs" / "evil"
    evil.mkdir()
    (evil / "0000000001.1.ckpt").write_bytes(b"x" * 14)
    coord = await _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    _assert_listed(coord, "evil", "0000000001.1.ckpt")


def test_an_unlistable_store_starts_an_empty_table(monkeypatch: Any) -> None:
    class Broken(MemoryStore):
        def _list(self, prefix: str) -> list[str]:
            raise OSError("the disk is on fire")

    url = _url()
    _with_good_run(url)
    monkeypatch.setattr(coordinator_module, "open_store", lambda _: Broken(url[len("memory://") :]))
    coord = Coordinator("test", Settings(store=url))
    assert coord.table.runs == {}
    assert coord.records.rebuild_error is not None and "fire" in coord.records.rebuild_error


async def test_list_runs_of_a_rebuilt_table_reports_the_unreadable_runs() -> None:
    url = _url()
    _with_good_run(url)
    _put(url, checkpoint.key_for("broken", 1, 1), b"x" * 14)
    [broken] = await Coordinator("test", Settings(store=url)).list_runs("failed")
    assert broken.run_id == "broken" and broken.last_error is not None


# --- 6: a failure record is stored after the failing activation's own records ------------


async def test_a_run_that_fails_after_its_own_records_stores_its_failure(tmp_path: Any) -> None:
    import raygents as rg
    from raygents.core.envelope import Envelope, RunState
    from raygents.core.messages import Message
    from raygents.errors import ModelError
    from raygents.runtime.actor.actor import AgentActor
    from raygents.runtime.link.drive import SuspendToken
    from raygents.testing import ScriptedModel, calls

    @rg.tool(remote=False)
    def lookup(q: str) -> str:
        """Look up ``q``."""
        return q.upper()

    model = ScriptedModel([calls(("lookup", {"q": "x"})), ModelError("the provider is down")])
    agent = rg.Agent("failing", model=model, tools=[lookup])
    url = f"file://{tmp_path}"

    coord = Coordinator("test", Settings(store=url))
    actor = AgentActor({"failing": agent}, "failing", "fp", "ns", coordinator=FakeHandle(coord))
    actor._beater = object()  # type: ignore[assignment]  # (no beats outside Ray)
    actor.writer.use_store(coord.store)  # it writes records itself
    _, epoch = await coord.claim("r1", "driver", "failing")
    state = RunState(
        run_id="r1",
        agent_name="failing",
        messages=(Message("user", "go"),),
        input_len=1,
        epoch=epoch,
    )
    outcome = await actor._run(Envelope(state, "fp"), SuspendToken("r1"), lambda e: None)
    assert outcome.kind == "failed" and "provider is down" in str(outcome.error)
    assert coord.table.runs["r1"].status == "failed"
    stored = Coordinator("test", Settings(store=url)).store.list("runs/r1/")
    assert len([k for k in stored if k.endswith(".ckpt")]) >= 2, stored  # the batch's, the end
    rebuilt = await _rebuilt(url)  # a coordinator that restarted
    info = rebuilt.table.runs["r1"]
    assert info.status == "failed", info
    assert info.last_error is not None and "provider is down" in info.last_error


# --- 7: a completed run is never claimed again --------------------------------------------


async def _completed_run(coord: Coordinator, run_id: str = "r1", output: str = "42") -> None:
    """A run that wrote two records, then completed (its end as a driver notes it)."""
    _, epoch = await coord.claim(run_id, "driver", "agent")
    for seq in (1, 2):
        data = codec.encode(_record(run_id, seq, "running"))
        await coord.save(run_id, seq, data, ("running", "agent", 3, None), True, epoch, seq == 1)
    summary = {"final_output": output, "messages": (), "usage": None, "turns": 3}
    await coord.finish(RunInfo(run_id, "completed", "agent", 3, seq=2), summary)


def _records(coord: Coordinator, run_id: str = "r1") -> list[str]:
    return [k for k in coord.store.list(f"runs/{run_id}/") if k.endswith(".ckpt")]


async def test_a_completed_run_is_refused_between_its_end_and_its_clean_up() -> None:
    from raygents.errors import UserError

    coord = Coordinator("test", Settings(store=_url()))
    await _completed_run(coord)  # (the cleaner has not run: nothing awaited since)
    assert _records(coord), "its records are still there"
    with pytest.raises(UserError, match="'r1' already completed"):
        await coord.claim_and_load("r1", "driver-2")
    taken, epoch = await coord.claim("r1", "driver-2", "agent")  # a start that names it
    assert taken is not None and (taken.status, epoch) == ("completed", 0)
    assert coord.table.runs["r1"].status == "completed" and coord.table.runs["r1"].owner == "driver"
    await _until(lambda: coord.store.list("runs/r1/") == ["runs/r1/done.1"])


async def test_a_run_completed_before_a_crash_stays_completed_and_its_records_go() -> None:
    from raygents.errors import UserError

    url = _url()
    # the coordinator crashed after the marker and before the records went
    for seq in (1, 2):
        _put(url, checkpoint.key_for("r1", seq, 1), _record("r1", seq, "running"))
    marker = {"format": 1, "kind": "done", "run_id": "r1", "epoch": 1, "seq": 2}
    _put(url, "runs/r1/done.1", {**marker, "agent_name": "agent", "turns": 3, "output": "42"})

    coord = Coordinator("test", Settings(store=url))
    assert coord.table.runs["r1"].status == "completed"
    with pytest.raises(UserError, match="'r1' already completed"):
        await coord.claim_and_load("r1", "driver")
    info, result = await coord.wait("r1")
    assert info is not None and result["final_output"] == "42"  # the marker kept it
    await _until(lambda: coord.store.list("runs/r1/") == ["runs/r1/done.1"])


async def test_a_completed_run_whose_records_were_not_deleted_is_refused(tmp_path: Any) -> None:
    from raygents.errors import CheckpointError, UserError

    url = f"file://{tmp_path}"

    coord = Coordinator("test", Settings(store=url))

    def refuse(keys: Any) -> None:
        raise CheckpointError("permission denied")

    coord.store.delete = refuse  # type: ignore[method-assign]
    await _completed_run(coord)
    await _until(lambda: "runs/r1/done.1" in coord.store.list("runs/r1/"))
    await asyncio.sleep(0.1)
    assert len(_records(coord)) == 2, "the delete failed: the records stay"
    with pytest.raises(UserError, match="'r1' already completed"):
        await coord.claim_and_load("r1", "driver-2")

    restarted = Coordinator("test", Settings(store=url))  # a restart: the marker says it completed
    assert restarted.table.runs["r1"].status == "completed"
    with pytest.raises(UserError, match="'r1' already completed"):
        await restarted.claim_and_load("r1", "driver-3")
    await _until(lambda: not _records(restarted))  # and this time its records go


async def test_a_forgotten_completed_run_is_still_refused_from_its_marker() -> None:
    from raygents.errors import UserError

    coord = Coordinator("test", Settings(store=_url()))
    coord.table.completed_kept = 1
    await _completed_run(coord, "r1")
    await _until(lambda: coord.store.list("runs/r1/") == ["runs/r1/done.1"])
    for run_id in ("r2", "r3"):
        await coord.finish(RunInfo(run_id, "completed", "agent"))
    assert "r1" not in coord.table.runs and "r1" not in coord.table.epochs, "forgotten"
    with pytest.raises(UserError, match="'r1' already completed"):
        await coord.claim_and_load("r1", "driver")
    taken, _ = await coord.claim("r1", "driver", "agent")
    assert taken is not None and taken.status == "completed"


async def test_a_completed_child_that_its_parent_runs_again_is_not_listed_as_completed() -> None:
    url = _url()
    coord = Coordinator("test", Settings(store=url))
    await _completed_run(coord, "p.c1")
    await _until(lambda: coord.store.list("runs/p.c1/") == ["runs/p.c1/done.1"])
    [(taken, epoch)] = await coord.claim_many([("p.c1", "actor", "agent", True)])
    assert (taken, epoch) == (None, 2), "a parent's forced claim runs its child again"
    state = {"agent_name": "agent", "turns": 1, "epoch": 2}
    data = codec.encode({**_record("p.c1", 1, "running"), "state": state})
    await coord.save("p.c1", 1, data, ("running", "agent", 1, None), True, epoch, True)
    rebuilt = await _rebuilt(url)
    assert rebuilt.table.runs["p.c1"].status == "suspended"  # (its parent's to resume)


# --- 12: bounded tables, retention, and a rebuild that does not hold up the start ---------


async def test_ended_runs_beyond_the_caps_are_forgotten_oldest_first() -> None:
    coord = Coordinator("test", Settings(store=_url()))
    coord.table.completed_kept = 3
    coord.table.failed_kept = 2
    for n in range(4):  # stopped runs are resumable: never forgotten, nor their records
        await coord.claim(f"s{n}", "driver", "agent")
        data = codec.encode(_record(f"s{n}", 1, "suspended"))
        await coord.save(f"s{n}", 1, data, ("suspended", "agent", 3, None), True, 1, True)
        await coord.finish(RunInfo(f"s{n}", "suspended", "agent", 3, seq=1))
    for n in range(5):
        await coord.claim(f"f{n}", "driver", "agent")
        data = codec.encode(_record(f"f{n}", 1, "failed"))
        await coord.save(f"f{n}", 1, data, ("failed", "agent", 3, "boom"), True, 1, True)
        await coord.finish(RunInfo(f"f{n}", "failed", "agent", 3, last_error="boom", seq=1))
    for n in range(10):
        await coord.claim(f"c{n}", "driver", "agent")
        await coord.finish(RunInfo(f"c{n}", "completed", "agent"), {"final_output": "ok"})
    assert sorted(r for r in coord.table.runs if r[0] == "c") == ["c7", "c8", "c9"]
    assert sorted(r for r in coord.table.runs if r[0] == "f") == ["f3", "f4"]
    assert sorted(r for r in coord.table.runs if r[0] == "s") == ["s0", "s1", "s2", "s3"]
    assert set(coord.table.epochs) == set(coord.table.runs)
    assert set(coord.table.results) <= {"c7", "c8", "c9"}
    # a forgotten failed run's records go; kept failed runs and stopped runs keep theirs
    await _until(lambda: not coord.store.list("runs/f0/"))
    for run_id in ("f3", "f4", "s0", "s1", "s2", "s3"):
        assert coord.store.list(f"runs/{run_id}/"), run_id


async def test_a_resumed_failed_run_leaves_the_failed_runs() -> None:
    coord = Coordinator("test", Settings(store=_url()))
    coord.table.failed_kept = 1
    await coord.finish(RunInfo("f0", "failed", "agent"))
    await coord.claim("f0", "driver", "agent")  # resumed: running now
    await coord.finish(RunInfo("f1", "failed", "agent"))
    await coord.finish(RunInfo("f2", "failed", "agent"))
    assert coord.table.runs["f0"].status == "running"
    assert set(coord.table.runs) == {"f0", "f2"}


async def test_results_are_bounded_in_bytes_as_well_as_in_count() -> None:
    from raygents.core.messages import Message

    coord = Coordinator("test", Settings(store=_url()))
    coord.table.results.max_bytes = 3000
    for n in range(5):
        result = {"final_output": "x" * 500, "messages": (Message("user", "y" * 500),)}
        await coord.finish(RunInfo(f"r{n}", "completed", "agent"), result)
    assert list(coord.table.results) == ["r3", "r4"] and coord.table.results.size <= 3000
    huge = {"final_output": "z" * 5000, "messages": ()}
    await coord.finish(RunInfo("huge", "completed", "agent"), huge)
    assert "huge" not in coord.table.results and list(coord.table.results) == ["r3", "r4"]
    assert coord.table.runs["huge"].status == "completed"


class _SlowStore(MemoryStore):
    reads = 0

    def _get(self, key: str, *args: Any) -> bytes | None:
        type(self).reads += 1
        time.sleep(0.02)
        return super()._get(key, *args)


def _slow_coordinator(url: str, monkeypatch: Any) -> Coordinator:
    monkeypatch.setattr(
        coordinator_module, "open_store", lambda _: _SlowStore(url.removeprefix("memory://"))
    )
    return Coordinator("test", Settings(store=url))


async def test_a_big_rebuild_reads_behind_the_start_and_answers_each_run_on_demand(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(recordstore, "_REBUILD_INLINE_RUNS", 5)
    monkeypatch.setattr(recordstore, "_REBUILD_THREADS", 1)
    url = _url()
    for n in range(60):
        record = _record(f"r{n}", status="suspended")
        record["state"]["epoch"] = 3
        _put(url, checkpoint.key_for(f"r{n}", 1, 3), record)
        _put(url, checkpoint.fence_key(f"r{n}", 4), b"")
    coord = _slow_coordinator(url, monkeypatch)
    # the start-up read 5 runs; the rest are read behind it
    assert len(coord.table.runs) == 5 and len(coord.table.unread) == 55
    assert coord.table.epochs["r59"] == 4, "epochs come from the listing, before any read"

    info = await coord.get_run("r59")  # read now, not in its turn
    assert info is not None and info.status == "suspended"
    # a claim of a run not read yet reads it first: the rebuild never overwrites it
    taken, epoch = await coord.claim("r58", "driver", "agent")
    assert (taken, epoch) == (None, 5)
    assert await coord.records.rebuilt(timeout_s=30.0)
    assert coord.table.runs["r58"].status == "running" and coord.table.runs["r58"].owner == "driver"
    taken, _ = await coord.claim("r58", "driver-2", "agent")
    assert taken is not None, "not dispatched twice"
    assert len(coord.table.runs) == 60


async def test_list_runs_waits_a_bounded_time_then_says_what_is_not_read_yet(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(recordstore, "_REBUILD_INLINE_RUNS", 0)
    monkeypatch.setattr(recordstore, "_REBUILD_THREADS", 1)
    url = _url()
    for n in range(100):
        _put(url, checkpoint.key_for(f"r{n}", 1, 1), _record(f"r{n}"))
    coord = _slow_coordinator(url, monkeypatch)
    coord.records.list_wait_s = 0.05
    listed = await coord.list_runs()  # (it returns while the rebuild still reads)
    unknown = [r for r in listed if r.status == "unknown"]
    assert unknown and len(listed) == 100
    assert unknown[0].last_error is not None and "still reading" in unknown[0].last_error
    assert all(r.status == "suspended" for r in await coord.list_runs("suspended"))


async def test_a_run_the_store_failed_to_read_is_read_again_not_listed_as_failed(
    monkeypatch: Any,
) -> None:
    from raygents.errors import CheckpointError

    class Flaky(MemoryStore):
        failures = 1

        def _get(self, key: str, *args: Any) -> bytes | None:
            if type(self).failures:
                type(self).failures -= 1
                raise CheckpointError("503 Slow Down")
            return super()._get(key, *args)

    url = _url()
    _with_good_run(url)
    monkeypatch.setattr(coordinator_module, "open_store", lambda _: Flaky(url[len("memory://") :]))
    coord = Coordinator("test", Settings(store=url))
    assert "good" not in coord.table.runs and "good" in coord.table.unread

    info = await coord.get_run("good")
    assert info is not None and info.status == "suspended"
