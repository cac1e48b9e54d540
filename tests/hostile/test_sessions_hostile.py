"""Sessions under hostile and concurrent use: runs that save over each other, text that is not
UTF-8, messages of foreign types, and who may read a SQLite session's file."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
from sessions.test_sessions import make, session

from raygents.core.messages import Message, ToolCall
from raygents.errors import RaygentsError, UserError
from raygents.sessions import (
    MemorySession,
    SQLiteSession,
    StoreSession,
    load_session,
    save_session,
    storelog,
)

__all__ = ["session"]  # the fixture, shared with test_sessions.py

HISTORY = [Message("user", "earlier"), Message("assistant", "earlier answer")]


def turn(question: str, answer: str) -> list[Message]:
    return [Message("user", question), Message("assistant", answer)]


def texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


# --- a run's save keeps what other runs saved since it loaded ----------------------------------


def test_save_run_without_another_save_stores_the_run(session: Any) -> None:
    session.save("s", HISTORY)
    run = [*session.load("s"), *turn("q", "a")]
    session.save_run("s", run, input_len=3)
    assert session.load("s") == run


def test_save_run_keeps_the_messages_another_run_saved_since(session: Any) -> None:
    """Run A loads the history and suspends; run B loads the same history and completes; A
    resumes and completes: the session holds the history, then B's turn, then A's."""
    session.save("s", HISTORY)
    loaded_a, loaded_b = session.load("s"), session.load("s")
    session.save_run("s", [*loaded_b, *turn("from b", "b done")], input_len=3)
    session.save_run("s", [*loaded_a, *turn("from a", "a done")], input_len=3)
    expected = [*HISTORY, *turn("from b", "b done"), *turn("from a", "a done")]
    assert session.load("s") == expected


def test_save_run_when_both_runs_asked_the_same_thing(session: Any) -> None:
    """The runs' inputs are equal: A's input is still stored (the merge is by what A loaded,
    not by the longest common prefix)."""
    session.save("s", HISTORY)
    session.save_run("s", [*HISTORY, *turn("continue", "b")], input_len=3)
    session.save_run("s", [*HISTORY, *turn("continue", "a")], input_len=3)
    assert texts(session.load("s")) == [*texts(HISTORY), "continue", "b", "continue", "a"]


def test_save_run_on_a_fresh_session_and_after_a_plain_save(session: Any) -> None:
    session.save_run("s", turn("first", "one"), input_len=1)
    loaded = session.load("s")
    session.save("s", [*loaded, Message("user", "a note")])  # the user adds to it
    session.save_run("s", [*loaded, *turn("second", "two")], input_len=3)
    assert texts(session.load("s")) == ["first", "one", "a note", "second", "two"]


def test_save_run_after_the_conversation_was_cleared_keeps_the_run(session: Any) -> None:
    session.save("s", HISTORY)
    loaded = session.load("s")
    session.save("s", [])
    session.save_run("s", [*loaded, *turn("q", "a")], input_len=3)
    assert session.load("s") == [*HISTORY, *turn("q", "a")]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", None])
def test_save_run_refuses_a_bad_input_len(session: Any, bad: Any) -> None:
    session.save("s", HISTORY)
    with pytest.raises(UserError, match="input_len"):
        session.save_run("s", [*HISTORY, *turn("q", "a")], input_len=bad)
    assert session.load("s") == HISTORY


@pytest.mark.parametrize("kind", ["memory", "sqlite", "store-file"])
def test_concurrent_save_runs_keep_every_run(kind: str, tmp_path: Path) -> None:
    session = make(kind, tmp_path)
    try:
        session.save("s", HISTORY)
        errors: list[BaseException] = []

        def one_run(i: int) -> None:
            try:
                copy = make(kind, tmp_path) if kind != "memory" else session
                loaded = copy.load("s")
                run = [*loaded, *turn(f"q{i}", f"a{i}")]
                copy.save_run("s", run, input_len=len(loaded) + 1)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=one_run, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        stored = texts(session.load("s"))
        assert stored[:2] == texts(HISTORY)
        pairs = sorted(zip(stored[2::2], stored[3::2], strict=True))
        assert pairs == sorted((f"q{i}", f"a{i}") for i in range(8))
    finally:
        if isinstance(session, MemorySession):
            session.close()


async def test_the_runtime_helper_saves_a_run_through_save_run(session: Any) -> None:
    session.save("s", HISTORY)
    await save_session(session, "s", [*HISTORY, *turn("from b", "b")], input_len=3)
    await save_session(session, "s", [*HISTORY, *turn("from a", "a")], input_len=3)
    assert texts(await load_session(session, "s"))[2:] == ["from b", "b", "from a", "a"]


async def test_the_runtime_helper_saves_plainly_through_a_session_without_save_run() -> None:
    class Plain:
        def __init__(self) -> None:
            self.saved: list[tuple[str, list[Message]]] = []

        def load(self, session_id: str) -> list[Message]:
            return []

        def save(self, session_id: str, messages: list[Message]) -> None:
            self.saved.append((session_id, messages))

    plain = Plain()
    await save_session(plain, "s", turn("q", "a"), input_len=1)  # type: ignore[arg-type]
    assert plain.saved == [("s", turn("q", "a"))]


# --- text that is not UTF-8, and messages of foreign types --------------------------------------


def unchecked(role: str, content: str | None, **fields: Any) -> Message:
    """A message built without validation (as a subclass or ``model_construct`` can)."""
    return Message.model_construct(role=role, content=content, **fields)


def test_a_lone_surrogate_never_poisons_a_session(session: Any) -> None:
    bad = [
        unchecked("user", "open report-\udcff.txt"),
        unchecked(
            "assistant",
            None,
            tool_calls=(ToolCall.model_construct(id="c\udc80", name="read", arguments='"\udcff"'),),
        ),
        unchecked("tool", "read \ud800", tool_call_id="c\udc80"),
    ]
    session.save("s", bad)
    loaded = session.load("s")
    assert texts(loaded) == ["open report-\ufffd.txt", "", "read \ufffd"]
    assert loaded[1].tool_calls[0] == ToolCall("c\ufffd", "read", '"\ufffd"')
    assert loaded[2].tool_call_id == "c\ufffd"
    session.save("s", [*loaded, Message("assistant", "fine")])
    assert texts(session.load("s"))[-1] == "fine"
    session.save_run("s", [*session.load("s"), unchecked("user", "again \udcff")], input_len=4)
    assert texts(session.load("s"))[-1] == "again \ufffd"


class NotedMessage(Message):
    """A user's own message type, with a field raygents does not know."""

    note: str = ""


def test_a_message_subclass_is_stored_as_a_message(session: Any) -> None:
    session.save("s", [NotedMessage("user", "hi", note="private"), Message("assistant", "hello")])
    loaded = session.load("s")
    assert loaded == [Message("user", "hi"), Message("assistant", "hello")]
    assert all(type(m) is Message for m in loaded)


def test_a_message_that_would_not_load_back_is_refused(session: Any) -> None:
    session.save("s", HISTORY)
    broken = Message.model_construct(role="robot", content="beep")
    with pytest.raises(UserError, match="robot"):
        session.save("s", [*HISTORY, broken])
    assert session.load("s") == HISTORY


def test_sqlite_rows_with_bad_text_still_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file written by an older raygents (a JSON ``\\udcff`` escape) or by hand (bytes that
    are not UTF-8): the bad text is replaced, with a warning, and every row still loads."""
    session = SQLiteSession(tmp_path / "old.db")
    session.save("s", HISTORY)
    db = sqlite3.connect(session.path)
    with db:
        db.execute(
            "INSERT INTO raygents_session_messages VALUES ('s', 2, ?)",
            ('{"role": "user", "content": "report-\\udcff.txt"}',),
        )
        db.execute(
            "INSERT INTO raygents_session_messages VALUES ('s', 3, CAST(? AS TEXT))",
            (b'{"role": "assistant", "content": "ok\xff"}',),
        )
    db.close()
    with caplog.at_level(logging.WARNING, logger="raygents.sessions"):
        loaded = session.load("s")
    assert texts(loaded) == [*texts(HISTORY), "report-\ufffd.txt", "ok\ufffd"]
    assert "not valid UTF-8" in caplog.text and "'s'" in caplog.text
    session.save("s", [*loaded, Message("user", "next")])
    assert texts(session.load("s"))[-1] == "next"


# --- who may read a SQLite session ------------------------------------------------------------


def test_sqlite_files_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        session = SQLiteSession(tmp_path / "deep" / "private.db")
        session.save("s", HISTORY)
        db = sqlite3.connect(session.path)  # keeps -wal and -shm in place while we look
        try:
            db.execute("SELECT count(*) FROM raygents_session_messages").fetchone()
            files = [Path(session.path + suffix) for suffix in ("", "-wal", "-shm")]
            modes = {f.name: stat.S_IMODE(os.stat(f).st_mode) for f in files if f.exists()}
        finally:
            db.close()
    finally:
        os.umask(old)
    assert "private.db" in modes and "private.db-wal" in modes
    assert modes == dict.fromkeys(modes, 0o600)
    assert session.load("s") == HISTORY


def test_sqlite_leaves_an_existing_file_as_its_owner_made_it(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    sqlite3.connect(path).close()
    path.chmod(0o640)
    session = SQLiteSession(path)
    session.save("s", HISTORY)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert session.load("s") == HISTORY


def test_sqlite_creates_a_dangling_links_target_private(tmp_path: Path) -> None:
    link = tmp_path / "linked.db"
    link.symlink_to(tmp_path / "target.db")
    old = os.umask(0o022)
    try:
        SQLiteSession(link).save("s", HISTORY)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "target.db").st_mode) == 0o600


# --- what a user's own session loads -------------------------------------------------------------


class Returns:
    """A user's session that loads what it was given."""

    def __init__(self, loaded: list[Any]) -> None:
        self.loaded = loaded

    def load(self, session_id: str) -> list[Any]:
        return self.loaded

    def save(self, session_id: str, messages: list[Message]) -> None:
        raise AssertionError("not saved in these tests")


async def test_what_a_users_session_loads_becomes_plain_messages() -> None:
    """A subclass's extra fields or a lone surrogate would break the run's checkpoints."""
    loaded = [NotedMessage("user", "hi", note="private"), unchecked("user", "report-\udcff.txt")]
    messages = await load_session(Returns(loaded), "s")  # type: ignore[arg-type]
    assert messages == [Message("user", "hi"), Message("user", "report-\ufffd.txt")]
    assert all(type(m) is Message for m in messages)


async def test_a_users_session_that_loads_a_broken_message_fails_clearly() -> None:
    broken = Message.model_construct(role="robot", content="beep")
    with pytest.raises(RaygentsError, match=r"load returned .*message 1.*robot"):
        await load_session(Returns([Message("user", "hi"), broken]), "s")  # type: ignore[arg-type]


@pytest.fixture
def snapshot_every_save(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every StoreSession record a snapshot, so that a save deletes the records before it."""
    monkeypatch.setattr(storelog, "_SNAPSHOT_EVERY", 1)


@pytest.mark.usefixtures("snapshot_every_save")
def test_store_session_save_where_an_old_record_was_deleted_is_not_lost(tmp_path: Path) -> None:
    """A slow save reads record 1; meanwhile three others write records 2 to 4 and delete
    the old ones, record 2 included: the slow save's put of record 2 succeeds, yet nothing
    newer is built on it. It must notice and save again on top of record 4."""
    url = f"file://{tmp_path}"
    slow, other = StoreSession(url), StoreSession(url, keep_versions=1)
    slow.save("s", HISTORY)
    real = slow._current
    raced: list[int] = []

    def current_then_three_saves(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        while len(raced) < 3:
            loaded = other.load("s")
            other.save_run("s", [*loaded, *turn(f"o{len(raced)}", "x")], input_len=len(loaded) + 1)
            raced.append(1)
        return found

    slow._current = current_then_three_saves  # type: ignore[method-assign]
    slow.save_run("s", [*HISTORY, *turn("mine", "y")], input_len=3)
    assert texts(other.load("s")) == [*texts(HISTORY), "o0", "x", "o1", "x", "o2", "x", "mine", "y"]


@pytest.mark.usefixtures("snapshot_every_save")
def test_a_save_that_others_built_on_and_cleaned_up_after_is_not_saved_twice(
    tmp_path: Path,
) -> None:
    """A save puts record 2; before it checks that record, three other saves build on it
    (records 3 to 5) and their clean-up deletes records 2 to 4. The first save's turn is in
    record 5 already: it must not be saved again."""
    url = f"file://{tmp_path}"
    mine, other = StoreSession(url), StoreSession(url, keep_versions=1)
    mine.save("s", HISTORY)
    real = mine._landed
    raced: list[int] = []

    def three_saves_then_check(*args: Any) -> Any:
        while len(raced) < 3:
            loaded = other.load("s")
            other.save_run("s", [*loaded, *turn(f"o{len(raced)}", "x")], input_len=len(loaded) + 1)
            raced.append(1)
        return real(*args)

    mine._landed = three_saves_then_check  # type: ignore[method-assign]
    mine.save_run("s", [*HISTORY, *turn("mine", "y")], input_len=3)
    assert texts(other.load("s")) == [
        *texts(HISTORY),
        "mine",
        "y",
        *("o0", "x", "o1", "x", "o2", "x"),
    ]


# --- a compacted run's save records its compaction -------------------------------------------

LOADED = [Message("user", f"old {i}") for i in range(4)]
SUMMARY = Message("user", "summary of old 0..2", summary=True)


def test_save_compacted_keeps_what_another_run_saved_since(session: Any) -> None:
    session.save("s", LOADED)
    loaded = session.load("s")
    session.save_run("s", [*loaded, *turn("from b", "b")], input_len=5)
    mine = [SUMMARY, loaded[3], *turn("from a", "a")]
    session.save_compacted("s", mine, compacted=(4, 3, 1))
    assert texts(session.load("s")) == [SUMMARY.text, "old 3", "from b", "b", "from a", "a"]
    assert session.load("s")[0].summary
    # a later run that loaded the compacted conversation saves after it as usual
    later = session.load("s")
    session.save_run("s", [*later, *turn("from c", "c")], input_len=len(later) + 1)
    assert texts(session.load("s"))[-4:] == ["from a", "a", "from c", "c"]


def test_save_compacted_where_the_history_it_loaded_is_gone_appends(session: Any) -> None:
    """The conversation was replaced since the run loaded it: nothing is lost, the run's own
    messages are appended (after its summary, where it stands for all the run loaded)."""
    session.save("s", LOADED)
    session.save("s", [Message("user", "replaced")])
    session.save_compacted("s", [SUMMARY, LOADED[3], *turn("a", "b")], compacted=(4, 3, 1))
    assert texts(session.load("s")) == ["replaced", "a", "b"]
    session.save("s", [Message("user", "again")])
    session.save_compacted("s", [SUMMARY, *turn("a", "b")], compacted=(4, 4, 1))
    assert texts(session.load("s")) == ["again", SUMMARY.text, "a", "b"]


@pytest.mark.parametrize("bad", [(4, 5, 1), (4, 3), (4, 3, -1), [4, 3, 1], (4, 0, 9), None])
def test_save_compacted_refuses_a_bad_span(session: Any, bad: Any) -> None:
    session.save("s", LOADED)
    with pytest.raises(UserError, match="compacted"):
        session.save_compacted("s", [SUMMARY, *turn("a", "b")], compacted=bad)
    assert session.load("s") == LOADED


async def test_the_runtime_helper_saves_a_compaction_through_save_compacted(session: Any) -> None:
    session.save("s", LOADED)
    await save_session(session, "s", [SUMMARY, LOADED[3]], compacted=(4, 3, 1))
    assert texts(await load_session(session, "s")) == [SUMMARY.text, "old 3"]
