"""The record writer of an agent actor: where its records go (the store itself, on the event
loop or in worker threads, or the coordinator), in what order, and what it waits for before a
run's outcome leaves (no Ray: a fake coordinator handle, a file store in a temporary folder)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeHandle

from raygents.agents.tools import ToolResult
from raygents.core.envelope import Outcome, RunState
from raygents.core.messages import Message
from raygents.errors import CheckpointError
from raygents.records import checkpoint
from raygents.runtime.actor import reports as reports_module
from raygents.runtime.actor import writer as writer_module
from raygents.runtime.actor.journal import Journal
from raygents.runtime.actor.writer import RecordWriter
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.settings import Settings
from raygents.stores.base import Store
from raygents.stores.file import FileStore
from raygents.stores.open import open_store


class _Coordinator:
    def __init__(self, durability: str, store: str = "memory://") -> None:
        self.durability = durability
        self.store = store
        self.reported: list[tuple[list[Any], list[Any]]] = []
        self.saved: list[tuple[Any, ...]] = []
        self.discarded: list[tuple[str, str]] = []

    def settings(self) -> Settings:
        return Settings(store=self.store, durability=self.durability)

    def noted(self, notes: list[Any], ends: list[Any]) -> None:
        self.reported.append((list(notes), list(ends)))

    def save(self, *args: Any) -> None:
        self.saved.append(args)

    def lease(self, runs: list[tuple[str, int]]) -> list[str]:
        return []  # (no lease: every checked record is checked in the store)

    def discard(self, run_id: str, key: str) -> None:
        self.discarded.append((run_id, key))

    def notes(self) -> list[tuple[str, int]]:
        return [(note[0], note[1]) for notes, _ in self.reported for note in notes]


class _Written:
    """The writer's ``written`` callback: the records a run waited for, in order."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int, str]] = []

    async def __call__(self, state: RunState, status: str, emit: Any) -> None:
        self.records.append((state.run_id, state.seq, status))


async def _writer(
    store: Store | None, durability: str = "sync", url: str = "memory://"
) -> tuple[RecordWriter, _Coordinator, _Written]:
    """A writer that writes to ``store`` (None: through the fake coordinator), whose
    coordinator names the store ``url``."""
    coordinator = _Coordinator(durability, url)
    directory = Directory("ns", FakeHandle(coordinator), owner="test")
    await directory.settings()
    written = _Written()
    writer = RecordWriter(directory, written)
    writer.use_store(store)
    return writer, coordinator, written


def _state(run_id: str, seq: int = 0) -> RunState:
    return RunState(
        run_id=run_id,
        agent_name="worker",
        messages=(Message("user", "go"),),
        input_len=1,
        seq=seq,
        turns=1,
        epoch=1,
    )


async def _reported(coordinator: _Coordinator, count: int) -> list[tuple[str, int]]:
    for _ in range(200):
        if len(coordinator.notes()) >= count:
            break
        await asyncio.sleep(0.02)
    return coordinator.notes()


@pytest.fixture(autouse=True)
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reports_module, "_NOTE_WINDOW_S", 0.01)


def _watched(store: FileStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread of each put to ``store``, in order."""
    threads: list[str] = []
    real_put, real_put_if_dir = store.put, store.put_if_dir

    def put(key: str, data: bytes) -> None:
        threads.append(threading.current_thread().name)
        real_put(key, data)

    def put_if_dir(key: str, data: bytes) -> bool:
        threads.append(threading.current_thread().name)
        return real_put_if_dir(key, data)

    monkeypatch.setattr(store, "put", put)
    monkeypatch.setattr(store, "put_if_dir", put_if_dir)
    return threads


async def test_a_lone_put_runs_on_the_loop_and_puts_that_come_together_in_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path / "store")
    threads = _watched(store, monkeypatch)
    monkeypatch.setattr(writer_module, "_INLINE_PUT_MAX_S", 60.0)  # (a loaded disk: not slow)
    writer, coordinator, _ = await _writer(store)
    loop_thread = threading.current_thread().name
    states = [_state(f"r{i}") for i in range(4)]
    writes = [writer.write(state, "running")[1] for state in states]
    # the first went on the loop at once; the others of this turn were handed to threads
    assert [w.done() for w in writes] == [True, False, False, False]
    await asyncio.gather(*writes)
    assert threads[0] == loop_thread
    assert all(name != loop_thread for name in threads[1:])
    assert writer.threaded_puts == 0
    # records that come one at a time, as a fan-out's children end, stay on the loop
    for state in states:
        await asyncio.sleep(0)
        _, write = writer.write(state.evolve(seq=1), "running")
        assert write.done()
        await write
    assert threads[4:] == [loop_thread] * 4
    keys = store.list("runs/")
    assert [key.rsplit("/", 1)[1] for key in keys] == [
        name for _ in states for name in ("0000000001.1.ckpt", "0000000002.1.ckpt")
    ]
    # the reports of all eight go out (in one window, or two when the disk was slow)
    assert sorted(await _reported(coordinator, 8)) == [
        (f"r{i}", seq) for i in range(4) for seq in (1, 2)
    ]


async def test_async_mode_puts_every_record_in_a_thread_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``async`` durability: the run never waits for the disk, not even for a lone put, and
    a run's records still land one after the other."""
    store = FileStore(tmp_path / "store")
    landed: list[tuple[str, str]] = []
    real_put, real_put_if_dir = store.put, store.put_if_dir

    def put(key: str, data: bytes) -> None:
        time.sleep(0.01)  # a slow disk: a put on the loop would be done when write returns
        real_put(key, data)
        landed.append((threading.current_thread().name, key))

    def put_if_dir(key: str, data: bytes) -> bool:
        time.sleep(0.01)
        done = real_put_if_dir(key, data)
        landed.append((threading.current_thread().name, key))
        return done

    monkeypatch.setattr(store, "put", put)
    monkeypatch.setattr(store, "put_if_dir", put_if_dir)
    writer, coordinator, _ = await _writer(store, "async")
    state = _state("behind")
    writes = []
    for _ in range(3):
        state, write = writer.write(state, "running")
        writes.append(write)
    assert not any(w.done() for w in writes), "a put ran on the loop"
    await asyncio.gather(*writes)
    loop_thread = threading.current_thread().name
    assert all(name != loop_thread for name, _ in landed)
    assert [key.rsplit("/", 1)[1] for _, key in landed] == [
        f"000000000{seq}.1.ckpt" for seq in (1, 2, 3)
    ]
    assert await _reported(coordinator, 3) == [("behind", seq) for seq in (1, 2, 3)]


async def test_once_puts_on_the_loop_turn_slow_they_go_to_threads_for_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "_INLINE_PUT_MAX_S", 0.005)
    monkeypatch.setattr(writer_module, "_SLOW_PUTS_S", 0.2)
    store = FileStore(tmp_path / "store")
    threads: list[str] = []
    real_put = store.put

    def slow_put(key: str, data: bytes) -> None:  # a disk that takes 15 ms per put: two
        # of the last three puts on the loop are slow with the second
        threads.append(threading.current_thread().name)
        time.sleep(0.015)
        real_put(key, data)

    monkeypatch.setattr(store, "put", slow_put)
    writer, _, _ = await _writer(store)
    loop_thread = threading.current_thread().name
    for i in range(4):
        await asyncio.sleep(0)
        _, write = writer.write(_state(f"r{i}"), "running")
        await write
    # the first two ran on the loop and were slow: the next ones did not stall the loop
    assert threads[:2] == [loop_thread] * 2
    assert all(name != loop_thread for name in threads[2:])
    await asyncio.sleep(0.25)  # the while passed: a put tries the loop again
    _, write = writer.write(_state("r4"), "running")
    assert write.done()
    assert threads[4] == loop_thread


async def test_a_single_slow_put_keeps_puts_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stall of a shared disk is not a slow store: the puts after it stay on the loop."""
    monkeypatch.setattr(writer_module, "_INLINE_PUT_MAX_S", 0.005)
    store = FileStore(tmp_path / "store")
    threads: list[str] = []

    def put(key: str, data: bytes) -> None:  # (no disk: its own stalls would count)
        threads.append(threading.current_thread().name)
        if len(threads) in (2, 5):  # two stalls, three puts apart
            time.sleep(0.03)

    monkeypatch.setattr(store, "put", put)
    writer, _, _ = await _writer(store)
    for i in range(7):
        await asyncio.sleep(0)
        _, write = writer.write(_state(f"r{i}"), "running")
        assert write.done()  # written on the loop, at once
        await write
    assert threads == [threading.current_thread().name] * 7


async def test_a_lone_runs_directory_is_made_ahead_not_those_of_runs_that_come_together(
    tmp_path: Path,
) -> None:
    writer, _, _ = await _writer(FileStore(tmp_path / "store"))
    writer.make_run_dir("alone", alone=True)
    await writer.dir_made("alone")
    assert (tmp_path / "store" / "runs" / "alone").is_dir()
    writer.make_run_dir("a", alone=False)  # (its first put makes it, in a thread with others)
    assert not writer.making_dir("a")
    assert not (tmp_path / "store" / "runs" / "a").exists()


async def test_a_fresh_runs_directory_is_made_in_a_thread_and_its_end_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory of a run's records is made behind the model call, off the event loop;
    the run's end waits for it, so the coordinator's removal of an empty one comes after."""
    store = FileStore(tmp_path / "store")
    real_make_dir = store.make_dir
    release = threading.Event()
    made: list[str] = []

    def make_dir(prefix: str) -> None:
        assert release.wait(30)  # a disk that answers when the test says so
        real_make_dir(prefix)
        made.append(threading.current_thread().name)

    monkeypatch.setattr(store, "make_dir", make_dir)
    writer, _, _ = await _writer(store)
    writer.make_run_dir("fresh", alone=True)  # returns while the disk has not answered
    folder = tmp_path / "store" / "runs" / "fresh"
    assert not folder.exists() and writer.making_dir("fresh")
    ending = asyncio.ensure_future(writer.finish(Outcome("completed", _state("fresh"))))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not ending.done()  # the run's end waits for its directory
    release.set()
    await asyncio.wait_for(ending, 30)
    assert folder.is_dir()
    assert made and made[0] != threading.current_thread().name
    await writer.dir_made("fresh")  # (nothing left to wait for)


async def test_without_a_store_of_its_own_the_coordinator_stores_the_records() -> None:
    writer, coordinator, written = await _writer(None)
    state = await writer.save(_state("r1"), "running", None)
    state = await writer.save(state, "suspended", None, cause="drain", durable=True)
    assert [(args[0], args[1], args[3][0], args[4]) for args in coordinator.saved] == [
        ("r1", 1, "running", False),
        ("r1", 2, "suspended", True),
    ]
    assert written.records == [("r1", 1, "running"), ("r1", 2, "suspended")]
    newest = writer.newest("r1")
    assert newest is not None and newest.seq == 2
    writer.forget("r1")
    assert writer.newest("r1") is None


async def test_a_stop_record_goes_to_the_coordinator_after_the_runs_own_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reports_module, "_NOTE_WINDOW_S", 600.0)
    writer, coordinator, _ = await _writer(FileStore(tmp_path / "store"))
    state = await writer.save(_state("r1"), "running", None)
    assert coordinator.reported == []  # the report waits for its window
    await writer.save(state, "suspended", None, cause="drain", durable=True)
    assert coordinator.notes() == [("r1", 1)]
    assert [args[1] for args in coordinator.saved] == [2]


async def test_a_record_of_a_fenced_copy_of_a_run_fails_and_is_discarded(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path / "store")
    writer, coordinator, _ = await _writer(store)
    state = await writer.save(_state("r1"), "running", None)
    store.put(checkpoint.fence_key("r1", 2), b"")  # the run was dispatched again
    with pytest.raises(CheckpointError, match="fenced"):
        await writer.save(state, "running", None)
    assert coordinator.discarded == [("r1", checkpoint.key_for("r1", 2, 1))]


def _store_of(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    if kind == "file":
        return FileStore(tmp_path / "store")
    from s3_server import create_bucket

    server = request.getfixturevalue("session_s3")
    return open_store(f"s3://{create_bucket(server.endpoint_url)}/runs")


@pytest.mark.parametrize("kind", ["file", "s3"])
@pytest.mark.parametrize("why", ["dispatched again", "ended elsewhere"])
async def test_a_fenced_copys_record_fails_and_is_discarded_on_every_store_it_writes(
    kind: str, why: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The fencing of records an agent actor writes itself, without the coordinator: after a
    put it looks for its next dispatch's mark and for its own previous record."""
    store = _store_of(kind, tmp_path, request)
    writer, coordinator, _ = await _writer(store)
    state = await writer.save(_state("r1"), "running", None)
    state = await writer.save(state, "running", None)
    if why == "dispatched again":
        store.mark(checkpoint.fence_key("r1", 2))
    else:  # (its records were deleted: records first, then the directory)
        store.delete(store.list("runs/r1/"))
        store.remove_empty_dir("runs/r1/")
    with pytest.raises(CheckpointError, match="fenced"):
        await writer.save(state, "running", None)
    assert coordinator.discarded == [("r1", checkpoint.key_for("r1", 3, 1))]


@pytest.mark.parametrize("kind", ["completed", "handoff"])
async def test_a_runs_end_drops_or_settles_its_waiting_reports(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A completed run's records are deleted at its end: its waiting reports are moot. A
    handoff's reports reach the coordinator before the run leaves (its next actor may not
    write itself). A child's end goes out with the run's outcome either way."""
    monkeypatch.setattr(reports_module, "_NOTE_WINDOW_S", 600.0)
    writer, coordinator, _ = await _writer(FileStore(tmp_path / "store"))
    await writer.save(_state("r1"), "running", None)
    writer.child_ended(_state("r1.c1", 3))
    await writer.finish(Outcome(kind, _state("r1", 1)))  # type: ignore[arg-type]
    for _ in range(5):
        await asyncio.sleep(0)
    assert coordinator.notes() == ([] if kind == "completed" else [("r1", 1)])
    assert [e.run_id for _, ends in coordinator.reported for e in ends] == ["r1.c1"]


async def test_a_batchs_slow_call_is_journaled_at_once_and_its_last_left_to_the_batch(
    tmp_path: Path,
) -> None:
    writer, _, written = await _writer(FileStore(tmp_path / "store"))
    journal = Journal(writer, _state("r1"), lambda event: None, calls=2)
    journal.finished(1.0, "c1", ToolResult("one"))  # slow: its record goes at once
    assert await journal.settle()
    assert written.records == [("r1", 1, "running")]
    assert dict(journal.state.journal) == {"c1": ToolResult("one")}
    journal.finished(1.0, "c2", ToolResult("two"))  # the last: the batch's own record has it
    assert not await journal.settle()
    assert written.records == [("r1", 1, "running")]


@pytest.mark.parametrize("writes", ["itself", "through the coordinator"])
async def test_a_completed_runs_marker_is_stored_before_its_outcome_leaves(
    tmp_path: Path, writes: str
) -> None:
    """The run's writer marks it done in the store (itself, or through the coordinator for a
    store it does not write): a coordinator that crashed before its clean-up rebuilds the run
    as completed, and never runs it again."""
    import raygents as rg
    from raygents.core.envelope import Envelope
    from raygents.errors import UserError
    from raygents.runtime.actor.actor import AgentActor
    from raygents.runtime.coordinator.coordinator import Coordinator
    from raygents.runtime.link.drive import SuspendToken
    from raygents.testing import ScriptedModel, calls, text

    @rg.tool(remote=False)
    def lookup(q: str) -> str:
        """Look up ``q``."""
        return q.upper()

    agent = rg.Agent(
        "marking", model=ScriptedModel([calls(("lookup", {"q": "x"})), text("X")]), tools=[lookup]
    )
    url = f"file://{tmp_path}" if writes == "itself" else f"memory://marking-{tmp_path.name}"
    coord = Coordinator("test", Settings(store=url))
    actor = AgentActor({"marking": agent}, "marking", "fp", "ns", coordinator=FakeHandle(coord))
    actor._beater = object()  # type: ignore[assignment]  # (no beats outside Ray)
    if writes == "itself":
        actor.writer.use_store(coord.store)  # type: ignore[arg-type]
    else:
        actor.writer.use_store(None)
    _, epoch = await coord.claim("r1", "driver", "marking")
    state = _state("r1").evolve(agent_name="marking", turns=0, epoch=epoch, started_at=1234.5)
    outcome = await actor._run(Envelope(state, "fp"), SuspendToken("r1"), lambda e: None)
    assert outcome.kind == "completed" and outcome.state.seq >= 1
    # the coordinator crashes now: the outcome never reached it (no driver here), so its
    # clean-up never ran
    keys = coord.store.list("runs/r1/")
    assert f"runs/r1/done.{epoch}" in keys, keys
    rebuilt = Coordinator("test", Settings(store=url))
    assert await rebuilt.records.rebuilt(timeout_s=10.0)
    assert rebuilt.table.runs["r1"].status == "completed"
    assert rebuilt.table.runs["r1"].started_at == 1234.5  # (the marker keeps when it started)
    with pytest.raises(UserError, match="'r1' already completed"):
        await rebuilt.claim_and_load("r1", "driver-2")
    info, result = await rebuilt.wait("r1")
    assert info is not None and result["final_output"] == "X"  # the marker kept it
    # the coordinator that did not crash learns the end: its clean-up keeps the marker found
    from raygents.records.runinfo import RunInfo, RunSummary

    summary = RunSummary(
        final_output="X", messages=(), usage=None, turns=outcome.state.turns, agent_name="marking"
    )
    info = RunInfo("r1", "completed", "marking", outcome.state.turns, seq=outcome.state.seq)
    marked = coord.store.get(f"runs/r1/done.{epoch}")
    await coord.finish(info, summary)
    for _ in range(200):
        if coord.store.list("runs/r1/") == [f"runs/r1/done.{epoch}"]:
            break
        await asyncio.sleep(0.02)
    assert coord.store.list("runs/r1/") == [f"runs/r1/done.{epoch}"]
    assert coord.store.get(f"runs/r1/done.{epoch}") == marked


async def test_in_exit_mode_the_actor_marks_a_completed_run_itself_unless_fenced(
    tmp_path: Path,
) -> None:
    """``exit`` durability writes no running record, but a completed run's marker is stored
    by its agent actor (no coordinator call on the run's path), fenced like a record."""
    store = FileStore(tmp_path / "store")
    writer, coordinator, _ = await _writer(store, "exit", url=store.url)
    ran = await writer.save(_state("ran"), "running", None)
    assert ran.seq == 0 and store.list() == [], "no running record"
    await writer.finish(Outcome("completed", ran, output="ok"))
    store.put(checkpoint.fence_key("stale", 2), b"")  # the run was dispatched again
    await writer.finish(Outcome("completed", _state("stale"), output="stale"))
    assert [k for k in store.list("runs/") if "/done." in k] == ["runs/ran/done.1"]
    assert coordinator.saved == [] and coordinator.notes() == []


async def test_a_copy_that_ends_after_the_next_dispatch_completed_marks_nothing(
    tmp_path: Path,
) -> None:
    """A copy stalled past its recovery ends after the recovered dispatch completed and its
    clean-up took the fence mark: the newer marker fences it."""
    store = FileStore(tmp_path / "store")
    writer, _, _ = await _writer(store, "exit", url=store.url)
    store.put("runs/late/done.2", b"the recovered dispatch's result")
    await writer.finish(Outcome("completed", _state("late"), output="stale"))
    assert store.list("runs/") == ["runs/late/done.2"]


async def test_only_a_completed_run_with_records_of_an_unfenced_copy_is_marked(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path / "store")
    writer, _, _ = await _writer(store)
    await writer.finish(Outcome("completed", _state("bare")))  # no records: no marker
    stopped = await writer.save(_state("stopped"), "running", None)
    await writer.finish(Outcome("suspended", stopped))
    fenced = await writer.save(_state("fenced"), "running", None)
    store.put(checkpoint.fence_key("fenced", 2), b"")  # the run was dispatched again
    await writer.finish(Outcome("completed", fenced, output="stale"))
    done = await writer.save(_state("done"), "running", None)
    await writer.finish(Outcome("completed", done, output="ok"))
    assert [k for k in store.list("runs/") if "/done." in k] == ["runs/done/done.1"]
