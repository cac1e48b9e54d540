"""Sessions: conversations kept between runs, loaded at a run's start and saved on success.

A session stores one conversation per session id. The runtime loads it before a run (the
messages are prepended to the input); a run holds its session id while it runs (a resumed run
takes it again), so runs on one conversation take turns. When a run completes, its
conversation is saved: through ``save_run`` where the session has it, which stores the
conversation as it is now followed by the run's messages after the history it loaded (a run
that suspended keeps what another run saved meanwhile; see :class:`Session`), else through
``save``, which replaces the conversation. Three implementations ship, each with ``save_run``:

- :class:`MemorySession`: shared by every process of the Ray cluster, gone with the cluster;
- :class:`SQLiteSession`: durable on one machine (a SQLite file);
- :class:`StoreSession`: durable in a checkpoint store (``file://``, ``s3://``).

Messages are stored as JSON-mode dicts (``Message.model_dump(mode="json")``), checked to load
back as :class:`~raygents.messages.Message` before they are stored; text that is not valid
UTF-8 (lone surrogates) is stored with U+FFFD in its place, and found so in stored data it is
replaced with a warning. Session ids follow the store's key-segment rules everywhere, so a
conversation can move between implementations.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import ValidationError

from raygents import codec
from raygents.errors import CheckpointCorrupt, CheckpointError, RaygentsError, UserError
from raygents.ids import validate_id
from raygents.messages import Message
from raygents.store import Store, default_store_url, open_store

__all__ = [
    "MemorySession",
    "SQLiteSession",
    "Session",
    "StoreSession",
    "load_session",
    "save_session",
    "validate_session_id",
]

log = logging.getLogger(__name__)

_SURROGATE = re.compile("[\ud800-\udfff]")
_FIELDS = set(Message.model_fields)
_T = TypeVar("_T")


@runtime_checkable
class Session(Protocol):
    """Where conversations live between runs, keyed by session id.

    Either method may be ``async def``; the runtime awaits what they return, and runs plain
    (blocking) methods in a worker thread so they never stall an agent actor's event loop.
    Implementations must pickle: agents carry their session to Ray actors.

    A session may also have ``save_run(session_id, messages, *, input_len)`` (found with
    ``hasattr``; sync or async), which the runtime then uses to save a completed run:
    ``messages`` is the run's conversation, whose first ``input_len`` messages were its input
    (the history it loaded from the session, then what it was given). It must store the
    current conversation followed by the run's messages after the history it loaded, in one
    atomic step, so that a run that suspended and resumed keeps what another run on the
    session saved in between (the shipped sessions do). Without it the runtime calls
    ``save``, which replaces the conversation.
    """

    def load(self, session_id: str) -> list[Message] | Awaitable[list[Message]]:
        """The stored conversation, oldest first; ``[]`` for an unknown id."""
        ...

    def save(self, session_id: str, messages: list[Message]) -> Awaitable[None] | None:
        """Replace the stored conversation with ``messages``."""
        ...


def validate_session_id(session_id: str) -> str:
    """Check a session id and return it.

    A session id is 1 to 128 ASCII characters: letters, digits, ``.``, ``_`` and ``-``,
    starting with a letter, digit or ``_``, without ``..`` (a store key segment).

    Raises:
        UserError: the id is not a str or breaks a rule.
    """
    return validate_id(session_id, "session id")


async def load_session(session: Session, session_id: str) -> list[Message]:
    """Load a conversation through any session, sync or async (for the runtime).

    Each message comes back a plain, checked :class:`Message` (a subclass's extra fields and
    lone surrogates would break the run's checkpoints).

    Raises:
        RaygentsError: the session failed (other errors are wrapped, naming the session and
            the id) or returned something that is not a list of valid messages.
    """
    validate_session_id(session_id)
    messages = await _call(session, "load", session_id)
    if messages is None:
        return []
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise RaygentsError(f"{session!r}.load returned {type(messages).__name__}, not a list")
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise RaygentsError(
                f"{session!r}.load returned a {type(message).__name__} in its list, not a Message"
            )
        try:  # a subclass or an unchecked message must not reach the run's checkpoints
            out.append(_plain(message))
        except (ValidationError, TypeError) as exc:
            raise RaygentsError(
                f"{session!r}.load returned a message raygents cannot use (message {index}, "
                f"{_shown(message)}): {_first_error(exc)}"
            ) from None
    return out


async def save_session(
    session: Session, session_id: str, messages: Sequence[Message], *, input_len: int | None = None
) -> None:
    """Save a conversation through any session, sync or async (for the runtime).

    With ``input_len`` (a completed run's: its first ``input_len`` messages were its input,
    loaded history included), through the session's ``save_run`` if it has one (see
    :class:`Session`), which keeps what other runs saved since; else through ``save``.

    Raises:
        RaygentsError: the session failed; other errors are wrapped, naming the session and id.
    """
    validate_session_id(session_id)
    if input_len is not None and callable(getattr(session, "save_run", None)):
        await _call(session, "save_run", session_id, list(messages), input_len=input_len)
    else:
        await _call(session, "save", session_id, list(messages))


async def _call(session: Session, method: str, *args: Any, **kwargs: Any) -> Any:
    function = getattr(session, method)
    try:
        if inspect.iscoroutinefunction(function):
            return await function(*args, **kwargs)
        out = await asyncio.to_thread(function, *args, **kwargs)
        return await out if inspect.isawaitable(out) else out
    except RaygentsError:
        raise
    except Exception as exc:  # user code: keep foreign exception types out of the run
        raise RaygentsError(
            f"cannot {method} session {args[0]!r} with {session!r}: {type(exc).__name__}: {exc}"
        ) from exc


def _dirty(value: Any) -> bool:
    """Whether ``value`` (JSON-mode data) holds a lone surrogate in its text."""
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_dirty(k) or _dirty(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_dirty(v) for v in value)
    return False


def _scrub(value: Any) -> Any:
    """``value`` (JSON-mode data) with every lone surrogate in its text replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def _plain(message: Message) -> Message:
    """``message`` as a plain, checked :class:`Message`: a subclass's extra fields would make
    every later load fail, and lone surrogates (which cannot be encoded as UTF-8) become
    U+FFFD.

    Raises:
        ValidationError: the message is not a valid Message (it was built unchecked).
    """
    data = message.model_dump(mode="json", include=_FIELDS, warnings=False)
    return Message.model_validate(_scrub(data) if _dirty(data) else data)


def _plains(messages: Sequence[Message]) -> list[Message]:
    """Messages as a session stores them: each a plain, checked Message (see :func:`_plain`).

    Raises:
        UserError: ``messages`` is not a list of messages, or one would not load back.
    """
    if isinstance(messages, str) or not isinstance(messages, Sequence):
        raise UserError(f"a session saves a list of messages, not {type(messages).__name__}")
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise UserError(f"a session saves Message objects, not {type(message).__name__}")
        try:  # Message has a custom __init__, which pydantic calls: bad data may raise TypeError
            out.append(_plain(message))
        except (ValidationError, TypeError) as exc:
            raise UserError(
                f"message {index} cannot be stored in a session, it would not load back "
                f"({_shown(message)}): {_first_error(exc)}; save valid Message objects"
            ) from None
    return out


def _dump(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as the JSON-mode dicts a session stores (see :func:`_plains`)."""
    return [m.model_dump(mode="json") for m in _plains(messages)]


def _shown(message: Message) -> str:
    shown = repr(message.model_dump(mode="json", include=_FIELDS, warnings=False))
    return shown if len(shown) <= 200 else shown[:200] + "..."


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError) and exc.errors():
        error = exc.errors()[0]
        return f"{'.'.join(map(str, error['loc'])) or 'message'}: {error['msg']}"
    return str(exc)[:200]


def _build(data: Sequence[Any], where: str) -> list[Message]:
    """Stored JSON-mode dicts as messages; bad text is replaced, with a warning."""
    clean = list(data)
    if _dirty(clean):
        log.warning("%s holds text that is not valid UTF-8; it was replaced with U+FFFD", where)
        clean = _scrub(clean)
    try:  # Message has a custom __init__, which pydantic calls: bad data may raise TypeError
        return [Message.model_validate(item) for item in clean]
    except (ValidationError, TypeError) as exc:
        raise RaygentsError(f"{where} holds a message raygents cannot read: {exc}") from exc


def _check_input_len(input_len: Any) -> int:
    if type(input_len) is not int or input_len < 0:
        raise UserError(f"input_len must be an int >= 0, got {input_len!r}")
    return input_len


def _merge(
    current: list[_T], marks: Sequence[int], messages: list[_T], input_len: int | None
) -> tuple[list[_T], list[int]]:
    """The conversation a save leaves, and its marks.

    A mark is the length of a conversation once stored whose messages still begin the stored
    conversation; the history a run loaded is one of them (or empty). A plain save
    (``input_len`` None) replaces the conversation. A run's save (``save_run``) appends the
    run's messages after the history it loaded: the longest mark that begins ``messages``
    within its input. Marks, not the longest common prefix, because another run may have
    begun with the same input (two runs that both asked "continue").
    """
    common = _common(current, messages)
    if input_len is None:
        new, kept = messages, common
    else:
        limit = min(common, input_len)
        loaded = max(b for b in (0, len(current), *marks) if b <= limit)
        new, kept = current + messages[loaded:], len(current)
    out = {b for b in (*marks, len(current)) if 0 < b <= kept}
    if new:
        out.add(len(new))
    return new, sorted(out)


def _common(one: Sequence[Any], two: Sequence[Any]) -> int:
    """The length of the longest common prefix of two lists."""
    n = 0
    for a, b in zip(one, two, strict=False):
        if a != b:
            break
        n += 1
    return n


# --- memory ----------------------------------------------------------------------------------


class _ConversationTable:
    """The conversations of one MemorySession: session id -> JSON-mode messages, and their
    marks (see :func:`_merge`). A Ray actor's state, or (without Ray) this process's."""

    def __init__(
        self,
        data: dict[str, list[dict[str, Any]]] | None = None,
        marks: dict[str, list[int]] | None = None,
    ) -> None:
        self.data = {} if data is None else data
        self.marks = {} if marks is None else marks

    def load(self, session_id: str) -> list[dict[str, Any]]:
        return self.data.get(session_id, [])

    def save(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        self.write(session_id, messages, None)

    def write(self, session_id: str, messages: list[dict[str, Any]], input_len: int | None) -> None:
        """Save (``input_len`` None) or save a run's conversation (see :func:`_merge`)."""
        current = self.data.get(session_id, [])
        new, marks = _merge(current, self.marks.get(session_id, ()), messages, input_len)
        self.data[session_id], self.marks[session_id] = new, marks

    def merge(
        self, data: dict[str, list[dict[str, Any]]], marks: dict[str, list[int]] | None = None
    ) -> None:
        """Take conversations saved before Ray was up (those the actor has win)."""
        for session_id, messages in data.items():
            if session_id not in self.data:
                self.data[session_id] = messages
                self.marks[session_id] = (marks or {}).get(session_id, [])


_LOCAL: dict[str, dict[str, list[dict[str, Any]]]] = {}
_LOCAL_MARKS: dict[str, dict[str, list[int]]] = {}
_LOCAL_LOCK = threading.Lock()


class MemorySession:
    """Conversations in memory, shared by every actor and task of the Ray cluster.

    Each instance is backed by one named Ray actor (``num_cpus=0``, detached, in the
    ``raygents`` namespace), created on first use; only the actor's name travels when the
    session is pickled, so every copy sees the same conversations. Nothing survives the
    cluster. Without Ray initialised, it keeps conversations in this process (copies in the
    same process share them), and hands them to the actor once Ray is up.

    With Ray, ``load`` and ``save`` block on the actor (``ray.get``); in async code call them
    through :func:`load_session` / :func:`save_session`, which use a worker thread.
    """

    def __init__(self) -> None:
        self.name = f"raygents-session-{uuid.uuid4().hex}"
        self._actor: Any = None

    def __getstate__(self) -> dict[str, Any]:
        if self.name in _LOCAL:  # saved before Ray was up: hand the data to the actor first
            self._table()
        return {"name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.name = state["name"]
        self._actor = None

    def __repr__(self) -> str:
        return f"MemorySession({self.name!r})"

    def load(self, session_id: str) -> list[Message]:
        """The stored conversation (a fresh copy), or ``[]`` for an unknown id."""
        validate_session_id(session_id)
        actor = self._table()
        if actor is None:
            with _LOCAL_LOCK:
                data = list(_LOCAL.get(self.name, {}).get(session_id, []))
        else:
            import ray

            data = ray.get(actor.load.remote(session_id))
        return _build(data, f"memory session {session_id!r}")

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the stored conversation with a copy of ``messages``."""
        self._write(session_id, messages, None)

    def save_run(self, session_id: str, messages: Sequence[Message], *, input_len: int) -> None:
        """Save a run's conversation, keeping what other runs saved since it loaded (see
        :class:`Session`)."""
        self._write(session_id, messages, _check_input_len(input_len))

    def _write(self, session_id: str, messages: Sequence[Message], input_len: int | None) -> None:
        validate_session_id(session_id)
        data = _dump(messages)
        actor = self._table()
        if actor is None:
            with _LOCAL_LOCK:
                table = _ConversationTable(
                    _LOCAL.setdefault(self.name, {}), _LOCAL_MARKS.setdefault(self.name, {})
                )
                table.write(session_id, data, input_len)
        else:
            import ray

            ray.get(actor.write.remote(session_id, data, input_len))

    def close(self) -> None:
        """Forget every conversation and stop the backing actor (a later use starts afresh)."""
        with _LOCAL_LOCK:
            _LOCAL.pop(self.name, None)
            _LOCAL_MARKS.pop(self.name, None)
        actor = self._table()
        if actor is not None:
            import ray

            ray.kill(actor)
        self._actor = None

    def _table(self) -> Any:
        """The backing actor, or ``None`` when Ray is not initialised in this process."""
        import ray  # only when used: ``import raygents`` must not import Ray's runtime

        if not ray.is_initialized():
            return None
        if self._actor is None:
            self._actor = (
                ray.remote(_ConversationTable)
                .options(
                    name=self.name,
                    namespace="raygents",
                    get_if_exists=True,
                    num_cpus=0,
                    lifetime="detached",
                )
                .remote()
            )
            with _LOCAL_LOCK:
                local = _LOCAL.pop(self.name, None)
                marks = _LOCAL_MARKS.pop(self.name, None)
            if local:
                ray.get(self._actor.merge.remote(local, marks))
        return self._actor


# --- SQLite ----------------------------------------------------------------------------------

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
        self._write(session_id, messages, _check_input_len(input_len))

    def _write(self, session_id: str, messages: Sequence[Message], input_len: int | None) -> None:
        validate_session_id(session_id)
        plain = _plains(messages)
        with self._connect("save", session_id) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._replace(db, session_id, plain, input_len)
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
    ) -> None:
        """Write the conversation a save leaves (inside the caller's transaction): only the
        rows that change."""
        rows = self._rows(db, session_id)
        try:
            current: list[Message] | None = self._parse(rows, session_id)
        except RaygentsError:
            if input_len is not None:  # a run's save adds to what is there: it must read it
                raise
            current = None  # a plain save replaces what cannot be read
        marks = [
            row[0]
            for row in db.execute(
                "SELECT length FROM raygents_session_marks WHERE session_id = ?", (session_id,)
            )
        ]
        new, new_marks = _merge(current or [], marks, messages, input_len)
        keep = _common(current, new) if current is not None else 0
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
            out.extend(_build([item], f"{where} (message {seq})"))
        return out


# --- checkpoint store --------------------------------------------------------------------------

_FORMAT = "raygents.session"
_SUFFIX = ".sess"
_KEY_ENV = "RAYGENTS_CHECKPOINT_KEY"
_MAX_WRITE_ATTEMPTS = 64
_LINEAGE = 64  # ids of the versions a version was built on that it records, newest last


class StoreSession:
    """Conversations in a raygents checkpoint store (``memory://``, ``file://``, ``s3://``).

    Each save writes a new, never-overwritten key ``sessions/<session_id>/<seq:010d>.sess``
    (the codec's checked msgpack frame); a load reads the newest. After a successful save,
    versions beyond the newest ``keep_versions`` are deleted. A save is computed from the
    newest version and written as the next; when another save took that number first, it is
    computed again from the newer one, so concurrent saves never clobber each other's keys,
    and concurrent runs' saves (``save_run``) all keep their messages.

    Args:
        url: the store; ``$RAYGENTS_STORE`` or :func:`~raygents.store.default_store_url` by
            default, resolved on first use or when the session is pickled, so a copy sent to
            Ray workers uses the store the sending process chose. ``memory://`` is per process.
        key: an HMAC key for the frames; ``$RAYGENTS_CHECKPOINT_KEY`` (read where used) by
            default, else a checksum.
        keep_versions: how many versions of a conversation to keep (at least 1).
    """

    def __init__(
        self, url: str | None = None, *, key: bytes | None = None, keep_versions: int = 2
    ) -> None:
        if url is not None and type(url) is not str:
            raise UserError(f"a store URL must be a str, not {type(url).__name__}")
        if type(keep_versions) is not int or keep_versions < 1:
            raise UserError(f"keep_versions must be an int >= 1, got {keep_versions!r}")
        self.url = url
        self.key = key
        self.keep_versions = keep_versions
        self._store: Store | None = None
        if url is not None:
            self._open()  # a malformed URL fails here, in the caller's process

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self._open().url, "key": self.key, "keep_versions": self.keep_versions}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url, self.key, self.keep_versions = state["url"], state["key"], state["keep_versions"]
        self._store = None

    def __repr__(self) -> str:
        return f"StoreSession({self.url!r})"

    def load(self, session_id: str) -> list[Message]:
        """The newest stored conversation, or ``[]`` for an unknown id."""
        validate_session_id(session_id)
        store = self._open()
        for _ in range(3):  # a concurrent save may delete what a listing showed
            for key in reversed(self._versions(store, session_id)):
                data = store.get(key)
                if data is not None:
                    value = self._decode(data, key, session_id)
                    return _build(value["messages"], f"session {key!r} in {self.url}")
        return []

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Write ``messages`` as the conversation's next version, then drop old versions."""
        self._write(session_id, messages, None)

    def save_run(self, session_id: str, messages: Sequence[Message], *, input_len: int) -> None:
        """Save a run's conversation as the next version, keeping what other runs saved since
        it loaded (see :class:`Session`); then drop old versions."""
        self._write(session_id, messages, _check_input_len(input_len))

    def _write(self, session_id: str, messages: Sequence[Message], input_len: int | None) -> None:
        validate_session_id(session_id)
        data = _dump(messages)
        store = self._open()
        seq = self._put_next(store, session_id, data, input_len)
        old = [k for k in self._versions(store, session_id) if _seq(k) <= seq - self.keep_versions]
        store.delete(old)

    def _put_next(
        self, store: Store, session_id: str, data: list[dict[str, Any]], input_len: int | None
    ) -> int:
        """Put the conversation the save leaves (see :func:`_merge`) under the version after
        the newest, the one it was computed from; return its number. Keys are never
        overwritten: when another save took that version first, start again from it."""
        for _ in range(_MAX_WRITE_ATTEMPTS):
            versions = self._versions(store, session_id)
            current, marks, seq, lineage = self._newest(store, session_id, versions, input_len)
            if seq < 0:
                continue  # the newest version went while we read it: a newer one exists
            new, new_marks = _merge(current, marks, data, input_len)
            payload: dict[str, Any] = {"format": _FORMAT, "session_id": session_id, "messages": new}
            if new_marks:
                payload["marks"] = new_marks
            payload["id"] = uuid.uuid4().hex
            if lineage:
                payload["base"], payload["lineage"] = lineage[-1], lineage[-_LINEAGE:]
            key = f"sessions/{session_id}/{seq + 1:010d}{_SUFFIX}"
            frame = codec.encode(payload, key=self._key(), source=f"sessions/{session_id}")
            try:
                store.put(key, frame)
            except CheckpointError:
                newest = self._versions(store, session_id)
                if not newest or _seq(newest[-1]) <= seq:  # not a lost race: the store failed
                    raise
                continue
            if self._built_on(store, session_id, seq + 1, payload["id"]):
                return seq + 1
            store.delete([key])  # put where a newer save had deleted an old version: void
        raise CheckpointError(
            f"cannot save session {session_id!r} in {self.url}: {_MAX_WRITE_ATTEMPTS} other "
            "saves of it won the race for a new version; try again"
        )

    def _built_on(self, store: Store, session_id: str, seq: int, version_id: str) -> bool:
        """Whether version ``seq`` (id ``version_id``), just put, is the newest or in the
        lineage of the newest. Not so when its key was free only because a save far ahead
        had deleted the version there (old versions go): newer versions, computed without
        it, exist, and it would be lost. (Saves that built on it may have deleted it since:
        the newest version's lineage still names it.)"""
        for _ in range(3):  # a concurrent save may delete what a listing showed
            newer = [k for k in self._versions(store, session_id) if _seq(k) > seq]
            if not newer:
                return True
            data = store.get(newer[-1])
            if data is None:
                continue
            try:
                value = self._decode(data, newer[-1], session_id)
            except RaygentsError:
                return False
            lineage = value.get("lineage")
            if isinstance(lineage, list) and version_id in lineage:
                return True
            return bool(
                _seq(newer[0]) == seq + 1
                and newer[0] == newer[-1]
                and value.get("base") == version_id
            )
        return False

    def _newest(
        self, store: Store, session_id: str, versions: list[str], input_len: int | None
    ) -> tuple[list[dict[str, Any]], list[int], int, list[str]]:
        """The newest version's messages (canonical JSON-mode dicts), marks, number and
        lineage (the ids of the versions it was built on, oldest first, then its own: what a
        version built on it records); the number is -1 if that version is gone. A plain save
        replaces a version it cannot read; a run's save, which adds to it, raises."""
        if not versions:
            return [], [], 0, []
        data = store.get(versions[-1])
        if data is None:
            return [], [], -1, []
        try:
            value = self._decode(data, versions[-1], session_id)
            messages = _build(value["messages"], f"session {versions[-1]!r} in {self.url}")
        except RaygentsError:
            if input_len is not None:
                raise
            return [], [], _seq(versions[-1]), []
        raw = value.get("marks")
        marks = [b for b in raw if type(b) is int] if isinstance(raw, list) else []
        found, before = value.get("id"), value.get("lineage")
        lineage = [i for i in before if isinstance(i, str)] if isinstance(before, list) else []
        if isinstance(found, str):
            lineage.append(found)
        return [m.model_dump(mode="json") for m in messages], marks, _seq(versions[-1]), lineage

    def _open(self) -> Store:
        if self._store is None:
            url = self.url or os.environ.get("RAYGENTS_STORE") or default_store_url()
            self._store = open_store(url)
            self.url = self._store.url
        return self._store

    def _key(self) -> bytes | None:
        if self.key is not None:
            return self.key
        text = os.environ.get(_KEY_ENV)
        return text.encode() if text else None

    @staticmethod
    def _versions(store: Store, session_id: str) -> list[str]:
        prefix = f"sessions/{session_id}/"
        return sorted(
            key
            for key in store.list(prefix)
            if key.endswith(_SUFFIX) and "/" not in key[len(prefix) :] and _seq(key) >= 0
        )

    def _decode(self, data: bytes, key: str, session_id: str) -> dict[str, Any]:
        value = codec.decode(data, key=self._key(), source=key)
        if (
            not isinstance(value, dict)
            or value.get("format") != _FORMAT
            or value.get("session_id") != session_id
            or not isinstance(value.get("messages"), list)
        ):
            raise CheckpointCorrupt(
                f"{key!r} in {self.url} is not a raygents session of {session_id!r}",
                key=key,
                reason="bad session",
            )
        return value


def _seq(key: str) -> int:
    digits = key.rpartition("/")[2][: -len(_SUFFIX)]
    return int(digits) if digits.isdigit() and len(digits) == 10 else -1
