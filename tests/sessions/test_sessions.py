"""Tests for raygents.sessions: one behaviour suite over every session, then each one's own."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ray import cloudpickle

from raygents.core.messages import Message, ToolCall
from raygents.errors import CheckpointCorrupt, CheckpointTooLarge, RaygentsError, UserError
from raygents.records import codec
from raygents.sessions import (
    MemorySession,
    Session,
    SQLiteSession,
    StoreSession,
    load_session,
    save_session,
    storelog,
    validate_session_id,
)
from raygents.sessions import memory as memory_sessions
from raygents.sessions import store as store_sessions
from raygents.stores.base import Store
from raygents.stores.memory import MemoryStore
from raygents.stores.open import open_store

CONVERSATION = [
    Message("system", "You are terse."),
    Message("user", "What is 2+3 and the weather in Paris?"),
    Message(
        "assistant",
        None,
        tool_calls=[
            ToolCall("call_1", "add", '{"a": 2, "b": 3}'),
            ToolCall("call_2", "weather", '{"city": "Paris"}'),
        ],
    ),
    Message("tool", "5", tool_call_id="call_1"),
    Message("tool", "Sunny, 21 °C ✓", tool_call_id="call_2"),
    Message("assistant", "5, and sunny."),
]
KINDS = ["memory", "sqlite", "store-memory", "store-file"]
BAD_IDS: list[Any] = ["", "a/b", "../x", "a..b", ".hidden", "-x", "x" * 129, "héllo", "a b", 42]


def make(kind: str, tmp_path: Path) -> Any:
    if kind == "memory":
        return MemorySession()
    if kind == "sqlite":
        return SQLiteSession(tmp_path / "sessions.db")
    if kind == "store-memory":
        return StoreSession(f"memory://sessions-{uuid.uuid4().hex}")
    return StoreSession(f"file://{tmp_path}/store")


@pytest.fixture(params=KINDS)
def session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made = make(request.param, tmp_path)
    yield made
    if isinstance(made, MemorySession):
        made.close()


# --- the behaviour suite, for every session -----------------------------------------------------


def test_is_a_session(session: Any) -> None:
    assert isinstance(session, Session)


def test_unknown_id_is_empty(session: Any) -> None:
    assert session.load("nobody") == []


def test_round_trip_keeps_tool_calls(session: Any) -> None:
    session.save("s1", CONVERSATION)
    loaded = session.load("s1")
    assert loaded == CONVERSATION
    assert loaded[2].tool_calls[1] == ToolCall("call_2", "weather", '{"city": "Paris"}')
    assert [m.tool_call_id for m in loaded[3:5]] == ["call_1", "call_2"]
    assert loaded[2].content is None


def test_save_overwrites(session: Any) -> None:
    session.save("s1", CONVERSATION)
    session.save("s1", CONVERSATION[:2])
    assert session.load("s1") == CONVERSATION[:2]
    session.save("s1", [])
    assert session.load("s1") == []


def test_ids_are_independent(session: Any) -> None:
    session.save("alice", CONVERSATION[:2])
    session.save("bob", CONVERSATION[3:])
    assert session.load("alice") == CONVERSATION[:2]
    assert session.load("bob") == CONVERSATION[3:]
    assert session.load("alice.2") == []


def test_defensive_copies(session: Any) -> None:
    saved = list(CONVERSATION[:2])
    session.save("s1", saved)
    saved.append(Message("user", "added later"))
    first = session.load("s1")
    first.clear()
    second = session.load("s1")
    assert second == CONVERSATION[:2]
    assert second is not session.load("s1")


def test_accepts_tuples(session: Any) -> None:
    session.save("s1", tuple(CONVERSATION))
    assert session.load("s1") == CONVERSATION


@pytest.mark.parametrize("bad", BAD_IDS, ids=range(len(BAD_IDS)))
def test_bad_session_id(session: Any, bad: Any) -> None:
    with pytest.raises(UserError, match="session id"):
        session.load(bad)
    with pytest.raises(UserError, match="session id"):
        session.save(bad, CONVERSATION)


@pytest.mark.parametrize("bad", ["just text", [{"role": "user", "content": "hi"}], [None]])
def test_save_refuses_non_messages_and_keeps_the_old(session: Any, bad: Any) -> None:
    session.save("s1", CONVERSATION[:1])
    with pytest.raises(UserError):
        session.save("s1", bad)
    assert session.load("s1") == CONVERSATION[:1]


def test_cloudpickle_copy_shares_the_conversations(session: Any) -> None:
    session.save("s1", CONVERSATION[:2])
    copy = cloudpickle.loads(cloudpickle.dumps(session))
    assert type(copy) is type(session)
    assert copy.load("s1") == CONVERSATION[:2]
    copy.save("s2", CONVERSATION[3:])
    assert session.load("s2") == CONVERSATION[3:]


async def test_runtime_helpers(session: Any) -> None:
    await save_session(session, "s1", CONVERSATION)
    assert await load_session(session, "s1") == CONVERSATION
    assert await load_session(session, "other") == []
    with pytest.raises(UserError):
        await load_session(session, "a/b")


# --- the runtime helpers with custom sessions --------------------------------------------------


class AsyncSession:
    """A custom session with async methods."""

    def __init__(self) -> None:
        self.data: dict[str, list[Message]] = {}

    async def load(self, session_id: str) -> list[Message]:
        return list(self.data.get(session_id, []))

    async def save(self, session_id: str, messages: list[Message]) -> None:
        self.data[session_id] = list(messages)


class OddSession:
    """A custom session that misbehaves in the ways the helpers must catch."""

    def __init__(self, loaded: Any = None, error: Exception | None = None) -> None:
        self.loaded, self.error = loaded, error

    def load(self, session_id: str) -> Any:
        if self.error is not None:
            raise self.error
        return self.loaded

    def save(self, session_id: str, messages: list[Message]) -> None:
        if self.error is not None:
            raise self.error


async def test_helpers_await_async_sessions() -> None:
    session = AsyncSession()
    assert isinstance(session, Session)
    await save_session(session, "s1", CONVERSATION)
    assert await load_session(session, "s1") == CONVERSATION


async def test_helpers_run_sync_sessions_in_a_thread() -> None:
    threads: list[int] = []

    class Spy(OddSession):
        def load(self, session_id: str) -> Any:
            threads.append(threading.get_ident())
            return []

    assert await load_session(Spy(), "s1") == []
    assert threads and threads[0] != threading.get_ident()


async def test_helpers_wrap_foreign_errors() -> None:
    session = OddSession(error=OSError("disk gone"))
    with pytest.raises(RaygentsError, match=r"cannot load session 's1' .*OSError: disk gone"):
        await load_session(session, "s1")
    with pytest.raises(RaygentsError, match=r"cannot save session 's1' .*OSError: disk gone"):
        await save_session(session, "s1", [])
    with pytest.raises(UserError, match="mine"):  # raygents errors pass through unchanged
        await load_session(OddSession(error=UserError("mine")), "s1")


@pytest.mark.parametrize(
    ("loaded", "expected"),
    [(None, []), ((Message("user", "hi"),), [Message("user", "hi")])],
)
async def test_helpers_normalise_load_results(loaded: Any, expected: list[Message]) -> None:
    assert await load_session(OddSession(loaded), "s1") == expected


@pytest.mark.parametrize("loaded", ["text", 42, [{"role": "user"}]])
async def test_helpers_refuse_bad_load_results(loaded: Any) -> None:
    with pytest.raises(RaygentsError, match="load returned"):
        await load_session(OddSession(loaded), "s1")


@pytest.mark.parametrize("good", ["a", "0", "_x", "user-42.v2", "A" * 128, "6f1c2f0e-uuid"])
def test_validate_session_id_accepts(good: str) -> None:
    assert validate_session_id(good) == good


# --- MemorySession ----------------------------------------------------------------------------


def test_memory_session_in_process_without_ray() -> None:
    import ray

    if ray.is_initialized():
        pytest.skip("Ray is up in this process; test_sessions_shared.py covers the shared mode")
    session = MemorySession()
    session.save("s1", CONVERSATION)
    assert memory_sessions._LOCAL[session.name]["s1"][2]["tool_calls"][0]["id"] == "call_1"
    assert MemorySession().load("s1") == []  # each instance has its own conversations
    session.close()
    assert session.load("s1") == []


def test_memory_session_pickles_only_its_name() -> None:
    session = MemorySession()
    assert session.__getstate__() == {"name": session.name}
    assert session.name.startswith("raygents-session-")
    assert repr(session) == f"MemorySession({session.name!r})"


# --- SQLiteSession ----------------------------------------------------------------------------


def test_sqlite_two_objects_share_the_file(tmp_path: Path) -> None:
    one, two = SQLiteSession(tmp_path / "a.db"), SQLiteSession(str(tmp_path / "a.db"))
    one.save("s1", CONVERSATION)
    assert two.load("s1") == CONVERSATION
    two.save("s1", CONVERSATION[:1])
    assert one.load("s1") == CONVERSATION[:1]


def test_sqlite_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "shared.db"
    SQLiteSession(path).save("parent", CONVERSATION[:2])
    script = textwrap.dedent(
        f"""
        from raygents.core.messages import Message
        from raygents.sessions import SQLiteSession

        session = SQLiteSession({str(path)!r})
        seen = session.load("parent")
        session.save("child", [*seen, Message("assistant", "from the child")])
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert SQLiteSession(path).load("child") == [
        *CONVERSATION[:2],
        Message("assistant", "from the child"),
    ]


def test_sqlite_concurrent_writers(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        session = SQLiteSession(path)
        try:
            for round_ in range(10):
                session.save("shared", [Message("user", f"{n}:{round_}")] * (n + 1))
                session.save(f"own-{n}", [Message("user", str(round_))])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    shared = SQLiteSession(path).load("shared")
    n = int(shared[0].text.split(":")[0])
    assert len(shared) == n + 1 and len({m.text for m in shared}) == 1  # one whole save won
    assert [SQLiteSession(path).load(f"own-{n}") for n in range(6)] == [[Message("user", "9")]] * 6


def test_sqlite_uses_wal_and_one_table(tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "wal.db")
    session.save("s1", CONVERSATION[:2])
    db = sqlite3.connect(tmp_path / "wal.db")
    try:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        rows = db.execute(
            "SELECT session_id, seq, message FROM raygents_session_messages ORDER BY seq"
        ).fetchall()
    finally:
        db.close()
    assert [(r[0], r[1]) for r in rows] == [("s1", 0), ("s1", 1)]
    assert Message.model_validate_json(rows[1][2]) == CONVERSATION[1]


def test_sqlite_resolves_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    session = SQLiteSession("rel.db")
    assert session.path == str(tmp_path / "rel.db")
    copy = cloudpickle.loads(cloudpickle.dumps(session))
    assert copy.path == session.path and copy.timeout_s == 30.0


@pytest.mark.parametrize("path", ["", ":memory:", "file:x.db?mode=memory"])
def test_sqlite_refuses_memory_databases(path: str) -> None:
    with pytest.raises(UserError, match="MemorySession"):
        SQLiteSession(path)


def test_sqlite_failure_is_a_raygents_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(RaygentsError, match="cannot save session 's1' in SQLite file"):
        SQLiteSession(blocker / "x.db").save("s1", [])
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(RaygentsError, match="cannot load session 's1'"):
        SQLiteSession(tmp_path / "junk.db").load("s1")


# --- StoreSession ----------------------------------------------------------------------------


class RecordingStore(MemoryStore):
    """A memory store that records every put, to prove no key is written twice."""

    def __init__(self) -> None:
        super().__init__(f"recording-{uuid.uuid4().hex}")
        self.puts: list[str] = []

    def put(self, key: str, data: bytes) -> None:
        assert self.get(key) is None, f"{key} written twice"
        self.puts.append(key)
        super().put(key, data)


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> RecordingStore:
    store = RecordingStore()
    monkeypatch.setattr(store_sessions, "open_store", lambda url: store)
    return store


def key(session_id: str, seq: int, suffix: str = ".sess") -> str:
    return f"sessions/{session_id}/{seq:010d}{suffix}"


def test_store_session_never_overwrites(recording: RecordingStore) -> None:
    session = StoreSession("memory://ignored")
    for n in range(1, 5):
        session.save("s1", CONVERSATION[:n])
    session.save("s2", CONVERSATION)
    records_put = [k for k in recording.puts if k.endswith(".sess")]
    assert records_put == [key("s1", n) for n in range(1, 5)] + [key("s2", 1)]
    marks = [(n, k) for n, k in enumerate(recording.puts) if k.endswith(".snap")]
    assert marks and key("s2", 1, ".snap") in recording.puts
    for n, mark in marks:  # (each just after the snapshot it marks)
        assert recording.puts[n - 1] == mark.removesuffix(".snap") + ".sess"
    assert key("s1", 4) in recording.list("sessions/")
    assert session.load("s1") == CONVERSATION[:4]


def records(store: Store, session_id: str) -> list[tuple[int, dict[str, Any]]]:
    """The session's records in the store, decoded, oldest first."""
    out = []
    for k in store.list(f"sessions/{session_id}/"):
        if k.endswith(".snap"):  # (the marks of snapshots)
            assert store.get(k) == b"" and store.has(k.removesuffix(".snap") + ".sess")
            continue
        data = store.get(k)
        assert data is not None
        out.append((int(k.rpartition("/")[2][:10]), codec.decode(data)))
    return out


def test_store_session_writes_what_a_save_adds(recording: RecordingStore) -> None:
    """A 200-message conversation, one turn (2 messages) a save: each save's record holds
    that turn (a snapshot now and then), never the whole history each time."""
    session = StoreSession("memory://ignored")
    sizes: dict[str, int] = {}
    history: list[Message] = []
    for n in range(100):
        history += [Message("user", f"question {n} " * 10), Message("assistant", f"a{n} " * 20)]
        before = len(recording.puts)
        session.save_run("s", history, input_len=len(history) - 1)
        (put,) = [k for k in recording.puts[before:] if k.endswith(".sess")]  # (a mark aside)
        sizes[put] = len(recording.get(put) or b"")
    assert session.load("s") == history
    whole = len(codec.encode({"messages": [m.model_dump(mode="json") for m in history]}))
    kinds = {key("s", seq): value["kind"] for seq, value in records(recording, "s")}
    deltas = [size for put, size in sizes.items() if kinds.get(put) == "save"]
    assert len(deltas) > 20 and max(deltas) < whole / 50  # a turn, not the history
    assert sum(sizes.values()) < 8 * whole  # (a whole history a save: 50 times)


def test_store_session_loads_and_extends_a_session_of_whole_records(
    recording: RecordingStore,
) -> None:
    """Sessions written before records held changes: one whole conversation per record."""
    for seq, n in ((4, 2), (5, 3)):
        payload = {
            "format": "raygents.session",
            "session_id": "old",
            "messages": [m.model_dump(mode="json") for m in CONVERSATION[:n]],
            "marks": [n],
            "id": f"version-{seq}",
            "lineage": [f"version-{seq - 1}"],
        }
        recording.put(key("old", seq), codec.encode(payload))
    session = StoreSession("memory://ignored")
    assert session.load("old") == CONVERSATION[:3]
    session.save_run("old", CONVERSATION, input_len=4)
    _, added = records(recording, "old")[-1]
    assert added["kind"] == "save" and added["keep"] == 3 and added["base"] == "version-5"
    assert len(added["messages"]) == 3
    assert session.load("old") == CONVERSATION


def test_store_session_records_a_compaction_as_what_it_replaces(
    recording: RecordingStore,
) -> None:
    session = StoreSession("memory://ignored")
    session.save("s", CONVERSATION)
    summary = Message("user", "the sum and the weather", summary=True)
    run = [summary, CONVERSATION[5], Message("user", "thanks"), Message("assistant", "np")]
    session.save_compacted("s", run, compacted=(6, 5, 1))
    _, record = records(recording, "s")[-1]
    assert (record["kind"], record["upto"]) == ("compact", 5)
    assert [m["content"] for m in record["summary"]] == [summary.content]
    assert [m["content"] for m in record["messages"]] == ["thanks", "np"]
    assert session.load("s") == run


def test_store_session_grows_past_the_largest_record(
    recording: RecordingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation over the record limit (here 4,000 bytes) gets no more snapshots: its
    saves go on, as records of what they add, and it loads whole."""
    encode = codec.encode

    def small_records(value: Any, **kwargs: Any) -> bytes:
        frame = encode(value, **kwargs)
        if len(frame) > 4000:
            raise CheckpointTooLarge("over 4000 bytes", size=len(frame), limit=4000)
        return frame

    monkeypatch.setattr(store_sessions.codec, "encode", small_records)
    session = StoreSession("memory://ignored")
    history: list[Message] = []
    for n in range(40):
        history.append(Message("user", f"message {n}: " + "words " * 30))
        session.save("s", history)
    assert len(encode({"m": [m.model_dump(mode="json") for m in history]})) > 8000
    assert session.load("s") == history
    kinds = [value["kind"] for _, value in records(recording, "s")]
    assert kinds[-1] == "save" and "snapshot" in kinds
    with pytest.raises(CheckpointTooLarge):  # what a save adds must fit
        session.save("s", [*history, Message("user", "x" * 5000)])
    assert session.load("s") == history


def test_store_session_reads_only_the_records_since_it_last_knew_the_session(
    recording: RecordingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other = StoreSession("memory://ignored"), StoreSession("memory://ignored")
    history: list[Message] = []
    for n in range(10):
        history.append(Message("user", f"message {n}"))
        mine.save_run("s", history, input_len=len(history))
    gets: list[str] = []
    get = recording.get
    monkeypatch.setattr(recording, "get", lambda k, **kw: gets.append(k) or get(k, **kw))
    assert mine.load("s") == history and gets == []  # (it wrote the newest record)
    other.save_run("s", [*other.load("s"), Message("user", "theirs")], input_len=11)
    assert gets and key("s", 10) in gets  # a fresh object reads back to a snapshot
    gets.clear()
    assert mine.load("s") == [*history, Message("user", "theirs")]
    assert gets == [key("s", 11)]


@pytest.mark.parametrize("keep", [1, 3])
def test_store_session_keeps_versions(
    tmp_path: Path, keep: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storelog, "_SNAPSHOT_EVERY", 4)
    session = StoreSession(f"file://{tmp_path}", keep_versions=keep)
    store = open_store(f"file://{tmp_path}")
    history: list[Message] = []
    for n in range(40):
        history.append(Message("user", f"message {n}"))
        session.save("s1", history)
    stored = records(store, "s1")
    snapshots = [seq for seq, value in stored if value["kind"] == "snapshot"]
    assert len(snapshots) == keep and stored[0][0] == snapshots[0]  # older ones went
    assert [seq for seq, _ in stored] == list(range(stored[0][0], 41))
    assert session.load("s1") == history


def test_store_session_survives_a_lost_race(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    session = StoreSession(url)
    session.save("s1", CONVERSATION[:1])
    store = open_store(url)
    listed = store.list
    stale = [True]

    def stale_list(prefix: str = "") -> list[str]:  # once, hides what another writer just made
        hide = stale.pop() if stale else False
        return [k for k in listed(prefix) if not (hide and k == key("s1", 2))]

    StoreSession(url, keep_versions=5).save("s1", CONVERSATION[:2])
    session._open()
    session._store.list = stale_list  # type: ignore[union-attr,method-assign]
    session.save("s1", CONVERSATION[:3])
    assert stale == []  # the stale listing was used, and the save lost one race
    assert key("s1", 3) in listed("sessions/")
    assert StoreSession(url).load("s1") == CONVERSATION[:3]


def test_store_session_concurrent_writers(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for _ in range(5):
                StoreSession(url).save("shared", [Message("user", str(n))])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    (loaded,) = StoreSession(url).load("shared")
    assert loaded.text in {str(n) for n in range(6)}


def test_store_session_default_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAYGENTS_STORE", raising=False)
    session = StoreSession()
    assert session.url is None  # nothing is read before first use
    monkeypatch.setenv("RAYGENTS_STORE", f"file://{tmp_path}/from-env")
    session.save("s1", CONVERSATION[:1])
    assert session.url == f"file://{tmp_path}/from-env"
    assert (tmp_path / "from-env" / "sessions" / "s1" / "0000000001.sess").is_file()

    monkeypatch.delenv("RAYGENTS_STORE")
    fallback = StoreSession()
    fallback.save("s1", CONVERSATION[:1])
    assert fallback.url == f"file://{tmp_path}/.raygents"


def test_store_session_pickles_its_resolved_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYGENTS_STORE", f"file://{tmp_path}/chosen")
    copy = cloudpickle.loads(cloudpickle.dumps(StoreSession()))
    monkeypatch.setenv("RAYGENTS_STORE", f"file://{tmp_path}/elsewhere")
    assert copy.url == f"file://{tmp_path}/chosen"
    copy.save("s1", [])
    assert (tmp_path / "chosen").is_dir() and not (tmp_path / "elsewhere").exists()


def test_store_session_hmac(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"file://{tmp_path}"
    StoreSession(url, key=b"k" * 16).save("s1", CONVERSATION)
    assert StoreSession(url, key=b"k" * 16).load("s1") == CONVERSATION
    with pytest.raises(CheckpointCorrupt) as caught:
        StoreSession(url).load("s1")
    assert caught.value.reason == "key required"
    monkeypatch.setenv("RAYGENTS_CHECKPOINT_KEY", "k" * 16)
    assert StoreSession(url).load("s1") == CONVERSATION


@pytest.mark.parametrize(
    "payload",
    [
        b"garbage",
        codec.encode({"format": "something-else", "messages": []}),
        codec.encode({"format": "raygents.session", "session_id": "other", "messages": []}),
        codec.encode({"format": "raygents.session", "session_id": "s1", "messages": [{"x": 1}]}),
    ],
)
def test_store_session_refuses_bad_data(tmp_path: Path, payload: bytes) -> None:
    session = StoreSession(f"file://{tmp_path}")
    session.save("s1", CONVERSATION)
    open_store(f"file://{tmp_path}").put(key("s1", 7), payload)
    with pytest.raises(RaygentsError):
        session.load("s1")


def test_store_session_ignores_foreign_keys(tmp_path: Path) -> None:
    store: Store = open_store(f"file://{tmp_path}")
    session = StoreSession(store.url)
    session.save("s1", CONVERSATION[:1])
    store.put("sessions/s1/notes.txt", b"x")
    store.put("sessions/s1/nested/0000000009.sess", b"x")
    store.put("sessions/s10/0000000009.sess", b"x")
    assert session.load("s1") == CONVERSATION[:1]
    session.save("s1", CONVERSATION[:2])
    assert store.get(key("s1", 2)) is not None


@pytest.mark.parametrize(
    ("make_session", "match"),
    [
        (lambda: StoreSession("ftp://nope"), "unsupported store URL"),
        (lambda: StoreSession(42), "must be a str"),  # type: ignore[arg-type]
        (lambda: StoreSession("memory://", keep_versions=0), "keep_versions"),
    ],
)
def test_store_session_refuses_bad_options(make_session: Callable[[], Any], match: str) -> None:
    with pytest.raises(UserError, match=match):
        make_session()


def test_store_session_repr(tmp_path: Path) -> None:
    assert repr(StoreSession(f"file://{tmp_path}")) == f"StoreSession('file://{tmp_path}')"
    assert os.fspath(tmp_path)  # keep the import used on every platform


def test_sqlite_setup_retries_while_another_connection_switches_the_file(tmp_path: Path) -> None:
    """SQLite may refuse the switch to WAL at once, without waiting, while other connections
    open the same new file ("database is locked"); the session tries again."""
    session = SQLiteSession(tmp_path / "new.db", timeout_s=5)
    real = sqlite3.connect(tmp_path / "new.db", isolation_level=None)
    refusals = iter([True, True])

    class Refusing:
        def execute(self, sql: str, *args: Any) -> Any:
            if sql.startswith("PRAGMA journal_mode") and next(refusals, False):
                raise sqlite3.OperationalError("database is locked")
            return real.execute(sql, *args)

    session._prepare(Refusing())  # type: ignore[arg-type]
    assert real.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert next(refusals, None) is None, "refused twice, then done"

    class Broken:
        def execute(self, sql: str, *args: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        session._prepare(Broken())  # type: ignore[arg-type]
