"""How StoreSession reads a session: the newest snapshot and the records after it at once,
found from one listing; and the sessions older raygents wrote, without snapshot marks."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from raygents.core.messages import Message
from raygents.errors import CheckpointError
from raygents.records import codec
from raygents.sessions import StoreSession, storelog
from raygents.sessions import store as store_sessions
from raygents.stores.memory import MemoryStore


class CountingStore(MemoryStore):
    """A memory store that counts reads and lists, and how many reads were in flight at once.

    With ``gate`` set, each read waits (up to 10 s, once) until ``gate`` reads are in flight
    together: reads made one at a time never get there."""

    def __init__(self) -> None:
        super().__init__(f"counting-{uuid.uuid4().hex}")
        self.gets: list[str] = []
        self.lists = 0
        self.gate = 0
        self.peak = 0
        self._in_flight = 0
        self._cond = threading.Condition()

    def get(self, key: str, **kwargs: Any) -> bytes | None:
        with self._cond:
            self.gets.append(key)
            self._in_flight += 1
            self.peak = max(self.peak, self._in_flight)
            self._cond.notify_all()
            if self.gate and not self._cond.wait_for(lambda: self.peak >= self.gate, 10):
                self.gate = 0  # (waited in vain: let the rest through)
        try:
            return super().get(key, **kwargs)
        finally:
            with self._cond:
                self._in_flight -= 1

    def list(self, prefix: str = "") -> list[str]:
        self.lists += 1
        return super().list(prefix)


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> CountingStore:
    made = CountingStore()
    monkeypatch.setattr(store_sessions, "open_store", lambda url: made)
    return made


def key(session_id: str, seq: int, suffix: str = ".sess") -> str:
    return f"sessions/{session_id}/{seq:010d}{suffix}"


def turn(n: int) -> list[Message]:
    return [Message("user", f"question {n} " * 5), Message("assistant", f"answer {n} " * 5)]


def saved_turns(store: CountingStore, count: int) -> list[Message]:
    """A session ``s`` of ``count`` saves, one turn each."""
    writer = StoreSession("memory://ignored")
    history: list[Message] = []
    for n in range(count):
        history += turn(n)
        writer.save_run("s", history, input_len=len(history) - 1)
    store.gets.clear()
    store.lists = 0
    return history


def test_a_fresh_load_lists_once_and_reads_the_newest_snapshot_and_what_follows_at_once(
    store: CountingStore,
) -> None:
    """100 saves: a process that never saw the session lists it once, then reads the newest
    snapshot's record and each record after it, together (the store sees them all in flight
    at once, up to the readers a load uses)."""
    history = saved_turns(store, 100)
    listed = store.list("sessions/s/")
    marked = max(int(k[-15:-5]) for k in listed if k.endswith(".snap"))
    newest = max(int(k[-15:-5]) for k in listed if k.endswith(".sess"))
    wanted = [key("s", seq) for seq in range(marked, newest + 1)]
    assert 1 < len(wanted) <= 32
    store.gets.clear()
    store.lists = 0
    store.gate = min(len(wanted), store_sessions._READERS)
    assert StoreSession("memory://ignored").load("s") == history
    assert store.lists == 1
    assert sorted(store.gets) == wanted  # one read each, nothing older than the snapshot
    assert store.peak == min(len(wanted), store_sessions._READERS)


def test_a_mark_on_a_record_that_is_no_snapshot_only_costs_reads(store: CountingStore) -> None:
    """Marks are hints: a load checks the record, and reads back to a real snapshot."""
    history = saved_turns(store, 40)
    newest = max(int(k[-15:-5]) for k in store.list("sessions/s/") if k.endswith(".sess"))
    store.mark(key("s", newest - 1, ".snap"))  # (a delta)
    store.mark(key("s", newest + 5, ".snap"))  # (no record)
    assert StoreSession("memory://ignored").load("s") == history


def old_record(seq: int, body: dict[str, Any], base: str | None) -> bytes:
    head = {"format": "raygents.session", "session_id": "old", "id": f"record-{seq}"}
    return codec.encode({**head, **({"base": base} if base else {}), **body})


def dump(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") for m in messages]


def test_records_of_every_kind_written_before_marks_still_load(store: CountingStore) -> None:
    """A session as raygents wrote it before snapshot marks: a whole-conversation record
    (no kind), a snapshot, a save and a compaction record, and no ``.snap`` keys."""
    first, second = turn(0), turn(1)
    summary = Message("user", "summary of turns 0 and 1", summary=True)
    planted: list[dict[str, Any]] = [
        {"messages": dump(first), "marks": [2]},  # (no kind: a whole conversation)
        {"kind": "snapshot", "messages": dump(first), "marks": [2], "lineage": ["record-1"]},
        {"kind": "save", "keep": 2, "messages": dump(second)},
        {"kind": "compact", "upto": 4, "summary": dump([summary]), "messages": dump(turn(2))},
    ]
    for seq, body in enumerate(planted, 1):
        store.put(key("old", seq), old_record(seq, body, f"record-{seq - 1}" if seq > 1 else None))
    loaded = StoreSession("memory://ignored").load("old")
    assert loaded == [summary, *turn(2)]
    assert sorted(store.gets) == [key("old", seq) for seq in (2, 3, 4)]  # back to the snapshot
    session = StoreSession("memory://ignored")
    session.save_run("old", [*loaded, *turn(3)], input_len=3)
    assert StoreSession("memory://ignored").load("old") == [summary, *turn(2), *turn(3)]


def test_a_load_whose_records_go_while_it_reads_them_reads_again(
    store: CountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another save writes a snapshot and deletes the records the load listed: the load
    lists again and reads the new snapshot; when that happens every time, it says so."""
    saved_turns(store, 5)
    monkeypatch.setattr(storelog, "_SNAPSHOT_EVERY", 1)
    other = StoreSession("memory://ignored", keep_versions=1)
    real_get = MemoryStore.get
    races: list[int] = []
    racing = threading.Lock()

    def racing_get(self: CountingStore, k: str, **kwargs: Any) -> bytes | None:
        if len(races) < limit and racing.acquire(blocking=False):  # (not the race's own)
            try:
                races.append(1)
                other.save("s", turn(100 + len(races)))  # (deletes every older record)
            finally:
                racing.release()
        return real_get(self, k, **kwargs)

    monkeypatch.setattr(CountingStore, "get", racing_get)
    limit = 1
    assert StoreSession("memory://ignored").load("s") == turn(101)
    limit = 10
    with pytest.raises(CheckpointError, match=r"other saves deleted its records"):
        StoreSession("memory://ignored").load("s")
    assert len(races) == 4  # (one a load, three loads)


def test_an_unmarked_session_is_read_back_one_record_at_a_time(store: CountingStore) -> None:
    """Records of a session written before marks may each be a whole conversation: a load
    reads back from the newest only to the first snapshot, also after what it knew."""
    reader = StoreSession("memory://ignored")
    for seq in range(1, 4):
        store.put(key("old", seq), old_record(seq, {"messages": dump(turn(seq))}, None))
    assert reader.load("old") == turn(3)
    for seq in range(4, 8):  # (written by an older raygents meanwhile)
        store.put(key("old", seq), old_record(seq, {"messages": dump(turn(seq))}, None))
    store.gets.clear()
    assert reader.load("old") == turn(7)
    assert store.gets == [key("old", 7)]
