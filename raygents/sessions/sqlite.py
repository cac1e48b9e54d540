"""SQLiteSession: conversations in a SQLite file, durable on one machine."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from raygents.core.messages import Message
from raygents.errors import RaygentsError, UserError
from raygents.sessions.base import (
    build_messages,
    check_compacted,
    check_input_len,
    common_prefix,
    merge_compacted,
    merge_save,
    plain_messages,
    validate_session_id,
)

__all__ = ["SQLiteSession"]

log = logging.getLogger(__name__)

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS raygents_session_messages (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID
""",
    """
CREATE TABLE IF NOT EXISTS raygents_session_marks (
    session_id TEXT NOT NULL,
    length INTEGER NOT NULL,
    PRIMARY KEY (session_id, length)
) WITHOUT ROWID
""",
)


class SQLiteSession:
    """Conversations in a SQLite file: durable on one machine, safe across processes.

    Every call opens its own connection (WAL journal, busy timeout), so copies in many
    processes or threads can share the file; a save replaces a conversation in one
    transaction. It pickles as its absolute path: every process of a Ray cluster that uses it
    must see that file (one machine, or a shared filesystem with working locks). A file it
    creates is readable by its owner only (mode 0600, as are SQLite's ``-wal`` and ``-shm``
    files next to it); an existing file keeps its mode.

    Args:
        path: the database file; created, with its directory, on first use.
        timeout_s: how long a call waits for another writer's lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> None:
        text = os.fspath(path)
        if not text or text == ":memory:" or text.startswith("file:"):
            raise UserError(
                f"SQLiteSession needs a file path, got {text!r}; use MemorySession for a "
                "session in memory"
            )
        self.path = os.path.abspath(os.path.expanduser(text))
        self.timeout_s = timeout_s
        self._ready = False

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.timeout_s, self._ready = state["path"], state["timeout_s"], False

    def __repr__(self) -> str:
        return f"SQLiteSession({self.path!r})"

    def load(self, session_id: str) -> list[Message]:
        """The stored conversation, or ``[]`` for an unknown id."""
        validate_session_id(session_id)
        with self._connect("load", session_id) as db:
            rows = self._rows(db, session_id)
        return self._parse(rows, session_id)

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the stored conversation with ``messages``, in one transaction."""
        self._write(session_id, messages, None)

    def save_run(self, session_id: str, messages: Sequence[Message], *, input_len: int) -> None:
        """Save a run's conversation, keeping what other runs saved since it loaded (see
        :class:`Session`), in one transaction."""
        self._write(session_id, messages, check_input_len(input_len))

    def save_compacted(
        self, session_id: str, messages: Sequence[Message], *, compacted: tuple[int, int, int]
    ) -> None:
        """Save a compacted run's conversation: its summary in place of what it stands for,
        keeping what other runs saved since (see :class:`Session`), in one transaction."""
        self._write(session_id, messages, None, check_compacted(compacted, len(messages)))

    def _write(
        self,
        session_id: str,
        messages: Sequence[Message],
        input_len: int | None,
        compacted: tuple[int, int, int] | None = None,
    ) -> None:
        validate_session_id(session_id)
        plain = plain_messages(messages)
        with self._connect("save", session_id) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._replace(db, session_id, plain, input_len, compacted)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _replace(
        self,
        db: sqlite3.Connection,
        session_id: str,
        messages: list[Message],
        input_len: int | None,
        compacted: tuple[int, int, int] | None,
    ) -> None:
        """Write the conversation a save leaves (inside the caller's transaction): only the
        rows that change."""
        rows = self._rows(db, session_id)
        try:
            current: list[Message] | None = self._parse(rows, session_id)
        except RaygentsError:
            if input_len is not None or compacted is not None:  # (it adds to what is there)
                raise
            current = None  # a plain save replaces what cannot be read
        marks = [
            row[0]
            for row in db.execute(
                "SELECT length FROM raygents_session_marks WHERE session_id = ?", (session_id,)
            )
        ]
        if compacted is not None:
            new, new_marks = merge_compacted(current or [], marks, messages, compacted)
        else:
            new, new_marks = merge_save(current or [], marks, messages, input_len)
        keep = common_prefix(current, new) if current is not None else 0
        start = rows[keep - 1][0] + 1 if keep else 0  # (rows written by hand may skip a seq)
        if keep < len(rows):
            db.execute(
                "DELETE FROM raygents_session_messages WHERE session_id = ? AND seq >= ?",
                (session_id, start),
            )
        db.executemany(
            "INSERT INTO raygents_session_messages VALUES (?, ?, ?)",
            [(session_id, start + i, m.model_dump_json()) for i, m in enumerate(new[keep:])],
        )
        db.execute("DELETE FROM raygents_session_marks WHERE session_id = ?", (session_id,))
        db.executemany(
            "INSERT INTO raygents_session_marks VALUES (?, ?)",
            [(session_id, length) for length in new_marks],
        )

    @staticmethod
    def _rows(db: sqlite3.Connection, session_id: str) -> list[tuple[int, bytes]]:
        cursor = db.execute(
            "SELECT seq, CAST(message AS BLOB) FROM raygents_session_messages "
            "WHERE session_id = ? ORDER BY seq",
            (session_id,),
        )
        return [(int(seq), bytes(raw)) for seq, raw in cursor]

    @contextlib.contextmanager
    def _connect(self, action: str, session_id: str) -> Iterator[sqlite3.Connection]:
        try:
            if not self._ready:
                self._create()
            db = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
            try:
                if not self._ready:
                    self._prepare(db)
                    self._ready = True
                yield db
            finally:
                db.close()
        except (sqlite3.Error, OSError) as exc:
            raise RaygentsError(
                f"cannot {action} session {session_id!r} in SQLite file {self.path!r}: {exc}"
            ) from exc

    def _create(self) -> None:
        """Create the file, if missing, readable by its owner only: SQLite would create it
        with the umask's mode, and gives its ``-wal`` and ``-shm`` files the database's."""
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600))

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Switch the file to WAL and create the tables. Switching needs the file to itself,
        and SQLite may refuse it at once ("database is locked") rather than wait while other
        connections open the same new file: retry until ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        delay = 0.005
        while True:
            try:
                db.execute("PRAGMA journal_mode=WAL")
                for statement in _SCHEMA:
                    db.execute(statement)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _parse(self, rows: list[tuple[int, bytes]], session_id: str) -> list[Message]:
        """Stored rows as messages. Text that is not valid UTF-8 (written by hand, or a
        lone surrogate's JSON escape written by an older raygents) is replaced, with a
        warning, so that one bad row never makes a conversation unreadable."""
        where = f"session {session_id!r} in {self.path!r}"
        out = []
        for seq, raw in rows:
            try:
                out.append(Message.model_validate_json(raw))
                continue
            except (ValidationError, TypeError):
                pass  # bad text, replaced below, or a bad message, which raises below
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                log.warning(
                    "%s holds text that is not valid UTF-8 (message %d); it was replaced with "
                    "U+FFFD",
                    where,
                    seq,
                )
                text = raw.decode("utf-8", errors="replace")
            try:
                item = json.loads(text)
            except ValueError as exc:
                raise RaygentsError(
                    f"{where} holds a message raygents cannot read (message {seq}): {exc}"
                ) from exc
            out.extend(build_messages([item], f"{where} (message {seq})"))
        return out
