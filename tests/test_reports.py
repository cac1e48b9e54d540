"""An agent actor's reports to the coordinator: records it wrote itself and the ends of its
agent-as-tool children travel together, in batches; and where it puts those records, on its
event loop or in worker threads (no Ray: the actor class in this process, a fake coordinator
handle)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import raygents as rg
from raygents.envelope import RunState
from raygents.messages import Message
from raygents.runtime import actor as actor_module
from raygents.runtime.actor import AgentActor
from raygents.store import FileStore
from raygents.testing import ScriptedModel, text


class _Noted:
    def __init__(self) -> None:
        self.calls: list[tuple[list[Any], list[Any]]] = []

    def remote(self, notes: list[Any], ends: list[Any]) -> asyncio.Future[None]:
        self.calls.append((list(notes), list(ends)))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Coordinator:
    def __init__(self) -> None:
        self.noted = _Noted()


def _actor(coordinator: _Coordinator) -> AgentActor:
    agent = rg.Agent("reporting", model=ScriptedModel([text("x")]))
    return AgentActor({"reporting": agent}, "reporting", "fp", "ns", coordinator=coordinator)


def _child(run_id: str, seq: int) -> RunState:
    return RunState(
        run_id=run_id,
        agent_name="worker",
        messages=(Message("user", "go"),),
        input_len=1,
        seq=seq,
        turns=1,
    )


def _note(run_id: str, seq: int) -> tuple[Any, ...]:
    return (run_id, seq, 1, b"record", ("running", "reporting", 1, None), seq == 1)


def test_child_ends_go_with_the_record_reports_of_one_window(monkeypatch: Any) -> None:
    monkeypatch.setattr(actor_module, "_NOTE_WINDOW_S", 0.02)
    coordinator = _Coordinator()

    async def main() -> None:
        actor = _actor(coordinator)
        actor._child_ended(_child("parent.c1", 2))
        actor._notes.append(_note("parent", 3))  # the parent's journal record, just written
        actor._note_soon()
        actor._child_ended(_child("parent.c2", 2))
        assert coordinator.noted.calls == []
        await asyncio.sleep(0.05)
        [(notes, ends)] = coordinator.noted.calls
        assert notes == [_note("parent", 3)]
        assert [(e.run_id, e.status, e.seq) for e in ends] == [
            ("parent.c1", "completed", 2),
            ("parent.c2", "completed", 2),
        ]
        actor._send_notes()  # nothing left: no call
        assert len(coordinator.noted.calls) == 1

    asyncio.run(main())


def test_a_completed_runs_waiting_reports_are_dropped_and_others_kept(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(actor_module, "_NOTE_WINDOW_S", 0.02)
    coordinator = _Coordinator()

    async def main() -> None:
        actor = _actor(coordinator)
        actor._notes += [_note("done", 1), _note("running", 1), _note("done", 2)]
        actor._note_soon()
        actor._drop_reports("done")
        await asyncio.sleep(0.05)
        assert coordinator.noted.calls == [([_note("running", 1)], [])]

    asyncio.run(main())


@pytest.mark.parametrize("pending", [True, False])
def test_reports_settle_before_a_handoff_goes_out(pending: bool) -> None:
    coordinator = _Coordinator()

    async def main() -> None:
        actor = _actor(coordinator)
        if pending:
            actor._notes.append(_note("r1", 1))
            actor._note_soon()
        await actor._notes_settled()  # sends at once, without waiting for the window
        assert coordinator.noted.calls == ([([_note("r1", 1)], [])] if pending else [])

    asyncio.run(main())


def test_a_lone_put_runs_on_the_loop_and_puts_that_come_together_in_threads(
    tmp_path: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(actor_module, "_NOTE_WINDOW_S", 0.01)
    coordinator = _Coordinator()
    store = FileStore(tmp_path / "store")
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

    async def main() -> None:
        actor = _actor(coordinator)
        actor.directory._settings = {"durability": "sync", "key": None}
        actor._store, actor._store_known = store, True
        loop_thread = threading.current_thread().name
        states = [_child(f"r{i}", 0).evolve(epoch=1) for i in range(4)]
        writes = [actor._write(state, "running")[1] for state in states]
        # the first went on the loop at once; the others of this turn were handed to threads
        assert [w.done() for w in writes] == [True, False, False, False]
        await asyncio.gather(*writes)
        assert threads[0] == loop_thread
        assert all(name != loop_thread for name in threads[1:])
        assert actor._threaded_puts == 0
        # records that come one at a time, as a fan-out's children end, stay on the loop
        for state in states:
            await asyncio.sleep(0)
            _, write = actor._write(state.evolve(seq=1), "running")
            assert write.done()
            await write
        assert threads[4:] == [loop_thread] * 4
        keys = store.list("runs/")
        assert [key.rsplit("/", 1)[1] for key in keys] == [
            name for _ in states for name in ("0000000001.1.ckpt", "0000000002.1.ckpt")
        ]
        # the reports of all eight go out (in one window, or two when the disk was slow)
        for _ in range(100):
            notes = [note for call, _ in coordinator.noted.calls for note in call]
            if len(notes) == 8:
                break
            await asyncio.sleep(0.05)
        assert sorted((note[0], note[1]) for note in notes) == [
            (f"r{i}", seq) for i in range(4) for seq in (1, 2)
        ]

    asyncio.run(main())


def test_async_mode_puts_every_record_in_a_thread_in_order(tmp_path: Any, monkeypatch: Any) -> None:
    """``async`` durability: the run never waits for the disk, not even for a lone put, and
    a run's records still land one after the other."""
    monkeypatch.setattr(actor_module, "_NOTE_WINDOW_S", 0.01)
    store = FileStore(tmp_path / "store")
    landed: list[tuple[str, str]] = []
    real_put, real_put_if_dir = store.put, store.put_if_dir

    def put(key: str, data: bytes) -> None:
        time.sleep(0.01)  # a slow disk: a put on the loop would be done when _write returns
        real_put(key, data)
        landed.append((threading.current_thread().name, key))

    def put_if_dir(key: str, data: bytes) -> bool:
        time.sleep(0.01)
        done = real_put_if_dir(key, data)
        landed.append((threading.current_thread().name, key))
        return done

    monkeypatch.setattr(store, "put", put)
    monkeypatch.setattr(store, "put_if_dir", put_if_dir)
    coordinator = _Coordinator()

    async def main() -> None:
        actor = _actor(coordinator)
        actor.directory._settings = {"durability": "async", "key": None}
        actor._store, actor._store_known = store, True
        state = _child("behind", 0).evolve(epoch=1)
        writes = []
        for _ in range(3):
            state, write = actor._write(state, "running")
            writes.append(write)
        assert not any(w.done() for w in writes), "a put ran on the loop"
        await asyncio.gather(*writes)
        loop_thread = threading.current_thread().name
        assert all(name != loop_thread for name, _ in landed)
        assert [key.rsplit("/", 1)[1] for _, key in landed] == [
            f"000000000{seq}.1.ckpt" for seq in (1, 2, 3)
        ]
        for _ in range(100):
            notes = [note for call, _ in coordinator.noted.calls for note in call]
            if len(notes) == 3:
                break
            await asyncio.sleep(0.02)
        assert [(note[0], note[1]) for note in notes] == [("behind", seq) for seq in (1, 2, 3)]

    asyncio.run(main())


def test_once_puts_on_the_loop_turn_slow_they_go_to_threads_for_a_while(
    tmp_path: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(actor_module, "_NOTE_WINDOW_S", 0.01)
    monkeypatch.setattr(actor_module, "_INLINE_PUT_MAX_S", 0.005)
    monkeypatch.setattr(actor_module, "_SLOW_PUTS_S", 0.2)
    store = FileStore(tmp_path / "store")
    threads: list[str] = []
    real_put = store.put

    def slow_put(key: str, data: bytes) -> None:  # a disk that takes 15 ms per put: two
        # of the last three puts on the loop are slow with the second
        threads.append(threading.current_thread().name)
        time.sleep(0.015)
        real_put(key, data)

    monkeypatch.setattr(store, "put", slow_put)

    async def main() -> None:
        actor = _actor(_Coordinator())
        actor.directory._settings = {"durability": "sync", "key": None}
        actor._store, actor._store_known = store, True
        loop_thread = threading.current_thread().name
        for i in range(4):
            await asyncio.sleep(0)
            _, write = actor._write(_child(f"r{i}", 0).evolve(epoch=1), "running")
            await write
        # the first two ran on the loop and were slow: the next ones did not stall the loop
        assert threads[:2] == [loop_thread] * 2
        assert all(name != loop_thread for name in threads[2:])
        await asyncio.sleep(0.25)  # the window passed: a put tries the loop again
        _, write = actor._write(_child("r4", 0).evolve(epoch=1), "running")
        assert write.done()
        assert threads[4] == loop_thread

    asyncio.run(main())


def test_a_single_slow_put_keeps_puts_on_the_loop(tmp_path: Any, monkeypatch: Any) -> None:
    """One stall of a shared disk is not a slow store: the puts after it stay on the loop."""
    monkeypatch.setattr(actor_module, "_NOTE_WINDOW_S", 0.01)
    monkeypatch.setattr(actor_module, "_INLINE_PUT_MAX_S", 0.005)
    store = FileStore(tmp_path / "store")
    threads: list[str] = []

    def put(key: str, data: bytes) -> None:  # (no disk: its own stalls would count)
        threads.append(threading.current_thread().name)
        if len(threads) in (2, 5):  # two stalls, three puts apart
            time.sleep(0.03)

    monkeypatch.setattr(store, "put", put)

    async def main() -> None:
        actor = _actor(_Coordinator())
        actor.directory._settings = {"durability": "sync", "key": None}
        actor._store, actor._store_known = store, True
        for i in range(7):
            await asyncio.sleep(0)
            _, write = actor._write(_child(f"r{i}", 0).evolve(epoch=1), "running")
            assert write.done()  # written on the loop, at once
            await write
        assert threads == [threading.current_thread().name] * 7

    asyncio.run(main())


def test_a_lone_runs_directory_is_made_ahead_not_those_of_runs_that_come_together(
    tmp_path: Any,
) -> None:
    store = FileStore(tmp_path / "store")

    async def main() -> None:
        actor = _actor(_Coordinator())
        actor.directory._settings = {"durability": "sync", "key": None}
        actor._store, actor._store_known = store, True
        actor._active = {"alone": object()}  # type: ignore[dict-item]
        actor._make_run_dir("alone")
        await actor._dir_made("alone")
        assert (tmp_path / "store" / "runs" / "alone").is_dir()
        actor._active = {"a": object(), "b": object()}  # type: ignore[dict-item]
        actor._make_run_dir("a")  # (its first put makes it, in a thread with the others)
        assert "a" not in actor._made_dirs
        assert not (tmp_path / "store" / "runs" / "a").exists()

    asyncio.run(main())


def test_a_fresh_runs_directory_is_made_in_a_thread_and_its_end_waits_for_it(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """The directory of a run's records is made behind the model call, off the event loop;
    the run's end waits for it, so the coordinator's removal of an empty one comes after."""
    store = FileStore(tmp_path / "store")
    real_make_dir = store.make_dir
    made: list[str] = []

    def make_dir(prefix: str) -> None:
        time.sleep(0.2)  # a slow disk
        real_make_dir(prefix)
        made.append(threading.current_thread().name)

    monkeypatch.setattr(store, "make_dir", make_dir)

    async def main() -> None:
        actor = _actor(_Coordinator())
        actor.directory._settings = {"durability": "sync", "key": None}
        actor._store, actor._store_known = store, True
        began = time.monotonic()
        actor._make_run_dir("fresh")
        assert time.monotonic() - began < 0.1, "the event loop waited for the directory"
        folder = tmp_path / "store" / "runs" / "fresh"
        assert not folder.exists()
        await actor._dir_made("fresh")
        assert folder.is_dir()
        assert made and made[0] != threading.current_thread().name
        await actor._dir_made("fresh")  # (nothing left to wait for)

    asyncio.run(main())
