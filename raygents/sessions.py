"""Sessions: conversations kept between runs, loaded at a run's start and saved on success.

A session stores one conversation per session id. The runtime loads it before a run (the
messages are prepended to the input) and, when the run completes, saves the run's whole
conversation in its place. Three implementations ship:

- :class:`MemorySession`: shared by every process of the Ray cluster, gone with the cluster;
- :class:`SQLiteSession`: durable on one machine (a SQLite file);
- :class:`StoreSession`: durable in a checkpoint store (``file://``, ``s3://``).

Messages are stored as JSON-mode dicts (``Message.model_dump(mode="json")``). Session ids follow
the store's key-segment rules everywhere, so a conversation can move between implementations.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from raygents import codec
from raygents.errors import CheckpointCorrupt, CheckpointError, RaygentsError, UserError
from raygents.messages import Message
from raygents.store import MAX_SEGMENT_LENGTH, Store, default_store_url, open_store

__all__ = [
    "MemorySession",
    "SQLiteSession",
    "Session",
    "StoreSession",
    "load_session",
    "save_session",
    "validate_session_id",
]

_SESSION_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*", re.ASCII)


@runtime_checkable
class Session(Protocol):
    """Where conversations live between runs, keyed by session id.

    Either method may be ``async def``; the runtime awaits what they return, and runs plain
    (blocking) methods in a worker thread so they never stall an agent actor's event loop.
    Implementations must pickle: agents carry their session to Ray actors.
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
    if type(session_id) is not str:
        raise UserError(f"a session id must be a str, not {type(session_id).__name__}")
    if (
        len(session_id) > MAX_SEGMENT_LENGTH
        or not _SESSION_ID.fullmatch(session_id)
        or ".." in session_id
    ):
        shown = session_id if len(session_id) <= 80 else session_id[:60] + "..."
        raise UserError(
            f"invalid session id {shown!r}: use 1 to {MAX_SEGMENT_LENGTH} ASCII letters, digits, "
            "'.', '_' or '-', starting with a letter, digit or '_', without '..'"
        )
    return session_id


async def load_session(session: Session, session_id: str) -> list[Message]:
    """Load a conversation through any session, sync or async (for the runtime).

    Raises:
        RaygentsError: the session failed (other errors are wrapped, naming the session and
            the id) or returned something that is not a list of messages.
    """
    validate_session_id(session_id)
    messages = await _call(session, "load", session_id)
    if messages is None:
        return []
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise RaygentsError(f"{session!r}.load returned {type(messages).__name__}, not a list")
    for message in messages:
        if not isinstance(message, Message):
            raise RaygentsError(
                f"{session!r}.load returned a {type(message).__name__} in its list, not a Message"
            )
    return list(messages)


async def save_session(session: Session, session_id: str, messages: Sequence[Message]) -> None:
    """Save a conversation through any session, sync or async (for the runtime).

    Raises:
        RaygentsError: the session failed; other errors are wrapped, naming the session and id.
    """
    validate_session_id(session_id)
    await _call(session, "save", session_id, list(messages))


async def _call(session: Session, method: str, *args: Any) -> Any:
    function = getattr(session, method)
    try:
        if inspect.iscoroutinefunction(function):
            return await function(*args)
        out = await asyncio.to_thread(function, *args)
        return await out if inspect.isawaitable(out) else out
    except RaygentsError:
        raise
    except Exception as exc:  # user code: keep foreign exception types out of the run
        raise RaygentsError(
            f"cannot {method} session {args[0]!r} with {session!r}: {type(exc).__name__}: {exc}"
        ) from exc


def _dump(messages: Sequence[Message]) -> list[dict[str, Any]]:
    if isinstance(messages, str) or not isinstance(messages, Sequence):
        raise UserError(f"a session saves a list of messages, not {type(messages).__name__}")
    out = []
    for message in messages:
        if not isinstance(message, Message):
            raise UserError(f"a session saves Message objects, not {type(message).__name__}")
        out.append(message.model_dump(mode="json"))
    return out


def _build(data: Sequence[Any], where: str) -> list[Message]:
    try:  # Message has a custom __init__, which pydantic calls: bad data may raise TypeError
        return [Message.model_validate(item) for item in data]
    except (ValidationError, TypeError) as exc:
        raise RaygentsError(f"{where} holds a message raygents cannot read: {exc}") from exc


# --- memory ----------------------------------------------------------------------------------

_LOCAL: dict[str, dict[str, list[dict[str, Any]]]] = {}
_LOCAL_LOCK = threading.Lock()


class _ConversationTable:
    """The Ray actor behind one MemorySession: session id -> JSON-mode messages."""

    def __init__(self) -> None:
        self.data: dict[str, list[dict[str, Any]]] = {}

    def load(self, session_id: str) -> list[dict[str, Any]]:
        return self.data.get(session_id, [])

    def save(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        self.data[session_id] = messages

    def merge(self, data: dict[str, list[dict[str, Any]]]) -> None:
        for session_id, messages in data.items():
            self.data.setdefault(session_id, messages)


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
        validate_session_id(session_id)
        data = _dump(messages)
        actor = self._table()
        if actor is None:
            with _LOCAL_LOCK:
                _LOCAL.setdefault(self.name, {})[session_id] = data
        else:
            import ray

            ray.get(actor.save.remote(session_id, data))

    def close(self) -> None:
        """Forget every conversation and stop the backing actor (a later use starts afresh)."""
        with _LOCAL_LOCK:
            _LOCAL.pop(self.name, None)
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
            if local:
                ray.get(self._actor.merge.remote(local))
        return self._actor


# --- SQLite ----------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS raygents_session_messages (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID
"""


class SQLiteSession:
    """Conversations in a SQLite file: durable on one machine, safe across processes.

    Every call opens its own connection (WAL journal, busy timeout), so copies in many
    processes or threads can share the file; a save replaces a conversation in one
    transaction. It pickles as its absolute path: every process of a Ray cluster that uses it
    must see that file (one machine, or a shared filesystem with working locks).

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
            rows = db.execute(
                "SELECT message FROM raygents_session_messages WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [self._parse(row[0], session_id) for row in rows]

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the stored conversation with ``messages``, in one transaction."""
        validate_session_id(session_id)
        rows = [(session_id, seq, json.dumps(item)) for seq, item in enumerate(_dump(messages))]
        with self._connect("save", session_id) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(
                    "DELETE FROM raygents_session_messages WHERE session_id = ?", (session_id,)
                )
                db.executemany("INSERT INTO raygents_session_messages VALUES (?, ?, ?)", rows)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @contextlib.contextmanager
    def _connect(self, action: str, session_id: str) -> Iterator[sqlite3.Connection]:
        try:
            if not self._ready:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
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

    def _prepare(self, db: sqlite3.Connection) -> None:
        """Switch the file to WAL and create the table. Switching needs the file to itself,
        and SQLite may refuse it at once ("database is locked") rather than wait while other
        connections open the same new file: retry until ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        delay = 0.005
        while True:
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(_SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _parse(self, text: str, session_id: str) -> Message:
        try:
            return Message.model_validate_json(text)
        except (ValidationError, TypeError) as exc:
            raise RaygentsError(
                f"session {session_id!r} in {self.path!r} holds a message raygents cannot "
                f"read: {exc}"
            ) from exc


# --- checkpoint store --------------------------------------------------------------------------

_FORMAT = "raygents.session"
_SUFFIX = ".sess"
_KEY_ENV = "RAYGENTS_CHECKPOINT_KEY"
_MAX_WRITE_ATTEMPTS = 64


class StoreSession:
    """Conversations in a raygents checkpoint store (``memory://``, ``file://``, ``s3://``).

    Each save writes a new, never-overwritten key ``sessions/<session_id>/<seq:010d>.sess``
    (the codec's checked msgpack frame); a load reads the newest. After a successful save,
    versions beyond the newest ``keep_versions`` are deleted. Concurrent saves of one id never
    clobber each other's keys; the one with the higher sequence number wins.

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
                    return self._decode(data, key, session_id)
        return []

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Write ``messages`` as the conversation's next version, then drop old versions."""
        validate_session_id(session_id)
        payload = {"format": _FORMAT, "session_id": session_id, "messages": _dump(messages)}
        data = codec.encode(payload, key=self._key(), source=f"sessions/{session_id}")
        store = self._open()
        seq = self._put_next(store, session_id, data)
        old = [k for k in self._versions(store, session_id) if _seq(k) <= seq - self.keep_versions]
        store.delete(old)

    def _put_next(self, store: Store, session_id: str, data: bytes) -> int:
        """Put ``data`` under the next free version of the conversation; return its number."""
        for _ in range(_MAX_WRITE_ATTEMPTS):
            versions = self._versions(store, session_id)
            seq = _seq(versions[-1]) + 1 if versions else 1
            try:
                store.put(f"sessions/{session_id}/{seq:010d}{_SUFFIX}", data)
                return seq
            except CheckpointError:
                newest = self._versions(store, session_id)
                if not newest or _seq(newest[-1]) < seq:  # not a lost race: the store failed
                    raise
        raise CheckpointError(
            f"cannot save session {session_id!r} in {self.url}: {_MAX_WRITE_ATTEMPTS} other "
            "saves of it won the race for a new version; try again"
        )

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

    def _decode(self, data: bytes, key: str, session_id: str) -> list[Message]:
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
        return _build(value["messages"], f"session {key!r} in {self.url}")


def _seq(key: str) -> int:
    digits = key.rpartition("/")[2][: -len(_SUFFIX)]
    return int(digits) if digits.isdigit() and len(digits) == 10 else -1
