"""StoreSession: conversations in a raygents checkpoint store, one record per save."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from raygents.core.messages import Message
from raygents.errors import CheckpointCorrupt, CheckpointError, RaygentsError, UserError
from raygents.records import codec, storekey
from raygents.sessions import storelog
from raygents.sessions.base import (
    build_messages,
    check_compacted,
    check_input_len,
    dump_messages,
    validate_session_id,
)
from raygents.sessions.storelog import (
    MARK,
    Log,
    in_lineage,
    is_record,
    kind,
    record_key,
    seq_of,
)
from raygents.stores.base import Store
from raygents.stores.open import default_store_url, open_store

__all__ = ["StoreSession"]

_READERS = 16  # the records a load reads at once
_KEY_ENV = storekey.KEY_ENV
_MAX_WRITE_ATTEMPTS = 64
_KNOWN = 128  # sessions whose conversation a StoreSession keeps, as it last read or wrote it


@dataclass(frozen=True)
class _Listing:
    """A session's keys in the store."""

    keys: list[str]
    """Its records, oldest first."""
    seqs: frozenset[int]
    """Their numbers."""
    snapshots: list[int]
    """The numbers the snapshot marks name, oldest first (a record may be gone)."""


class StoreSession:
    """Conversations in a raygents checkpoint store (``memory://``, ``file://``, ``s3://``).

    Each save writes one new, never-overwritten record ``sessions/<session_id>/<seq:010d>.sess``
    (the codec's checked msgpack frame) holding what it changes: the messages it adds after
    the ones it keeps (a run's save keeps them all), or a compaction's summary in place of the
    messages it stands for. Now and then (after 32 records, or records as large as the
    conversation) a save writes the whole conversation instead, a snapshot, and marks it with
    an empty key ``<seq:010d>.snap`` beside it; a load lists the session, then reads the
    newest snapshot and the records after it at once (a few threads). So a save costs what it
    adds, the whole conversation only once in a while, a load about two round trips, and a
    conversation may grow past the largest record.
    A record is written as the one after the newest; when another save took that number
    first, it is computed again from the newer one, so concurrent saves never clobber each
    other, and concurrent runs' saves (``save_run``) all keep their messages, each run's in
    one piece. After a snapshot, the records before the ``keep_versions``-th newest snapshot
    are deleted. Sessions written by raygents before records (one whole conversation per
    record) load, and are saved on, as they are.

    Args:
        url: the store; ``$RAYGENTS_STORE`` or :func:`~raygents.stores.open.default_store_url` by
            default, resolved on first use or when the session is pickled, so a copy sent to
            Ray workers uses the store the sending process chose. ``memory://`` is per process.
        key: an HMAC key for the frames; ``$RAYGENTS_CHECKPOINT_KEY`` (read where used) by
            default, else a checksum; a shared store (``s3://``, or a marked ``file://``
            directory: :mod:`raygents.records.storekey`) refuses to work without one, unless
            ``$RAYGENTS_UNSIGNED_OK=1``.
        keep_versions: how many snapshots of a conversation to keep, with the records after
            them (at least 1).
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
        self._lock = threading.Lock()
        self._known: OrderedDict[str, Log] = OrderedDict()
        """What this object last read or wrote of a few sessions (their records since are
        all a read needs)."""
        if url is not None:
            self._open()  # a malformed URL fails here, in the caller's process

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self._open().url, "key": self.key, "keep_versions": self.keep_versions}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url, self.key, self.keep_versions = state["url"], state["key"], state["keep_versions"]
        self._store = None
        self._lock = threading.Lock()
        self._known = OrderedDict()

    def __repr__(self) -> str:
        return f"StoreSession({self.url!r})"

    def load(self, session_id: str) -> list[Message]:
        """The stored conversation, or ``[]`` for an unknown id.

        Raises:
            CheckpointCorrupt: a record is not a session record of this id, or one is missing.
            CheckpointError: the store failed, or saves deleted what was being read, three
                times over.
        """
        validate_session_id(session_id)
        store = self._open()
        for _ in range(3):  # a concurrent save may delete what a listing showed
            log = self._read(store, session_id, self._listing(store, session_id))
            if log is not None:
                return build_messages(log.messages, self._where(session_id))
        raise CheckpointError(
            f"cannot load session {session_id!r} from {self.url}: other saves deleted its "
            "records while they were read; try again"
        )

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the stored conversation with ``messages`` (a record of what changes)."""
        self._write(session_id, messages, None, None)

    def save_run(self, session_id: str, messages: Sequence[Message], *, input_len: int) -> None:
        """Save a run's conversation, keeping what other runs saved since it loaded (see
        :class:`Session`): a record of the run's new messages."""
        self._write(session_id, messages, check_input_len(input_len), None)

    def save_compacted(
        self, session_id: str, messages: Sequence[Message], *, compacted: tuple[int, int, int]
    ) -> None:
        """Save a compacted run's conversation, keeping what other runs saved since (see
        :class:`Session`): a record of its summary, what it stands for, and its new messages."""
        self._write(session_id, messages, None, check_compacted(compacted, len(messages)))

    def _write(
        self,
        session_id: str,
        messages: Sequence[Message],
        input_len: int | None,
        compacted: tuple[int, int, int] | None,
    ) -> None:
        """Put a record of what the save changes as the one after the newest, computed from
        the conversation up to it. Keys are never overwritten: when another save took that
        number first, start again from it."""
        validate_session_id(session_id)
        data = dump_messages(messages)
        store = self._open()
        for _ in range(_MAX_WRITE_ATTEMPTS):
            listing = self._listing(store, session_id)
            log = self._current(
                store, session_id, listing, plain=input_len is None and compacted is None
            )
            if log is None:
                continue  # a record went while we read it: newer ones exist
            payload, frame = storelog.frame(
                session_id, log, data, input_len, compacted, key=self._key()
            )
            key = record_key(session_id, log.seq + 1)
            try:
                store.put(key, frame)
            except CheckpointError:
                newest = self._listing(store, session_id).keys
                if not newest or seq_of(newest[-1]) <= log.seq:  # not a lost race: the store failed
                    raise
                continue
            seq, size = log.seq + 1, len(frame)
            if self._landed(store, session_id, seq, payload["id"]):
                if payload["kind"] == "snapshot":
                    self._mark(store, session_id, seq)
                    self._clean(store, session_id, [*log.snapshots, seq])
                    log = storelog.start(self._where(session_id), seq, payload, size)
                else:
                    log = storelog.apply(session_id, self.url, log, seq, payload, size)
                self._remember(session_id, log)
                return
            store.delete([key])  # put where a newer save had deleted an old record: void
        raise CheckpointError(
            f"cannot save session {session_id!r} in {self.url}: {_MAX_WRITE_ATTEMPTS} other "
            "saves of it won the race for a new record; try again"
        )

    def _current(
        self, store: Store, session_id: str, listing: _Listing, *, plain: bool
    ) -> Log | None:
        """The conversation a save starts from; None if a record went while it was read. A
        plain save replaces a conversation it cannot read; a run's save, which adds to it,
        raises."""
        try:
            return self._read(store, session_id, listing)
        except RaygentsError:
            self._forget(session_id)
            if not plain:
                raise
            return Log(seq=seq_of(listing.keys[-1]), readable=False)

    def _read(self, store: Store, session_id: str, listing: _Listing) -> Log | None:
        """The conversation a listing's records leave: the newest snapshot, then each record
        after it; or, where this object read or wrote the session before, what it had then
        and the records since. None if one went while it was read.

        Raises:
            CheckpointCorrupt: a record is not a session record of ``session_id``, or one
                between the newest snapshot and the newest record is missing.
        """
        keys = listing.keys
        with self._lock:
            known = self._known.get(session_id)
        chain = self._chain(store, session_id, listing, known)
        if chain is None:
            return None
        numbers = [seq for seq, _, _ in chain]
        first = numbers[0] if chain else (known.seq + 1 if known is not None else 1)
        if numbers != list(range(first, first + len(numbers))):
            raise self._gap(session_id, numbers)
        if chain and kind(chain[0][1]) == "snapshot":
            log = storelog.start(self._where(session_id), *chain[0])
            chain = chain[1:]
        elif known is not None and keys and (not chain or chain[0][1].get("base") == known.newest):
            log = known
        elif keys:
            if known is not None:  # (not built on what was known: read it all)
                self._forget(session_id)
                return self._read(store, session_id, listing)
            raise self._gap(session_id, numbers)
        else:
            log = Log()
        for seq, value, size in chain:
            log = storelog.apply(session_id, self.url, log, seq, value, size)
        self._remember(session_id, log)
        return log

    def _chain(
        self, store: Store, session_id: str, listing: _Listing, known: Log | None
    ) -> list[tuple[int, dict[str, Any], int]] | None:
        """The records a read needs, oldest first, each ``(seq, value, size)``: back from the
        newest to the newest snapshot, or to the record ``known`` ended on. The ones the
        listing shows to be needed (from the newest marked snapshot, or all those after
        ``known`` in a marked session) are read at once, the rest (sessions written before
        marks, where each record may be a whole conversation) one at a time. None if one
        went while it was read."""
        stop = known.seq if known is not None and known.seq in listing.seqs else 0
        pending = [k for k in reversed(listing.keys) if seq_of(k) > stop]
        marked = [s for s in listing.snapshots if s > stop and s in listing.seqs]
        if marked:
            batch = [k for k in pending if seq_of(k) >= max(marked)]
        else:
            batch = pending if stop and listing.snapshots else pending[:1]
        chain: list[tuple[int, dict[str, Any], int]] = []
        while batch:
            for key, data in zip(batch, self._get_all(store, batch), strict=True):
                if data is None:
                    return None
                value = self._decode(data, key, session_id)
                chain.append((seq_of(key), value, len(data)))
                if kind(value) == "snapshot":
                    chain.reverse()
                    return chain
            pending = pending[len(batch) :]
            batch = pending[:1]
        chain.reverse()
        return chain

    @staticmethod
    def _get_all(store: Store, keys: list[str]) -> list[bytes | None]:
        """The values of ``keys`` (None: gone), read concurrently (the store is
        thread-safe)."""
        if len(keys) == 1:
            return [store.get(keys[0])]
        with ThreadPoolExecutor(min(len(keys), _READERS), "raygents-session") as pool:
            return list(pool.map(store.get, keys))

    def _where(self, session_id: str) -> str:
        return f"session {session_id!r} in {self.url}"

    def _gap(self, session_id: str, numbers: list[int]) -> CheckpointCorrupt:
        return CheckpointCorrupt(
            f"session {session_id!r} in {self.url} lacks records: those read, {numbers!r}, do "
            "not follow each other back to a whole conversation",
            key=f"sessions/{session_id}/",
            reason="bad session",
        )

    def _remember(self, session_id: str, log: Log) -> None:
        """Keep ``log`` as what this object last knew of the session (a few sessions)."""
        with self._lock:
            self._known.pop(session_id, None)
            self._known[session_id] = log
            while len(self._known) > _KNOWN:
                self._known.popitem(last=False)

    def _forget(self, session_id: str) -> None:
        with self._lock:
            self._known.pop(session_id, None)

    def _landed(self, store: Store, session_id: str, seq: int, record_id: str) -> bool:
        """Whether record ``seq`` (id ``record_id``), just put, is in the conversation: no
        newer record, or the next one was built on it, or a newer snapshot was. Not so when
        its key was free only because a save far ahead had deleted the record there (old
        records go after a snapshot): newer records, computed without it, exist, and it
        would be lost. (Saves that built on it may have deleted it since: a newer snapshot's
        lineage still names it.)"""
        for _ in range(3):  # a concurrent save may delete what a listing showed
            newer = [k for k in self._listing(store, session_id).keys if seq_of(k) > seq]
            if not newer:
                return True
            values = []
            for key in newer:
                data = store.get(key)
                if data is None:
                    break
                try:
                    values.append((key, self._decode(data, key, session_id)))
                except RaygentsError:
                    return False
                if seq_of(key) == seq + 1 and values[-1][1].get("base") == record_id:
                    return True
            else:
                return any(kind(v) == "snapshot" and in_lineage(v, record_id) for _, v in values)
        return False

    def _clean(self, store: Store, session_id: str, snapshots: list[int]) -> None:
        """Delete the records before the ``keep_versions``-th newest snapshot."""
        if len(snapshots) < self.keep_versions:
            return
        cutoff = snapshots[-self.keep_versions]
        listing = self._listing(store, session_id)
        marks = [record_key(session_id, seq, MARK) for seq in listing.snapshots if seq < cutoff]
        store.delete([k for k in listing.keys if seq_of(k) < cutoff] + marks)

    def _mark(self, store: Store, session_id: str, seq: int) -> None:
        """Mark record ``seq``, just put, as a snapshot; a store that fails it costs later
        loads only time (they read back to the snapshot)."""
        with contextlib.suppress(CheckpointError):
            store.mark(record_key(session_id, seq, MARK))

    def _open(self) -> Store:
        if self._store is None:
            url = self.url or os.environ.get("RAYGENTS_STORE") or default_store_url()
            self._store = open_store(url)
            self.url = self._store.url
        return self._store

    def _key(self) -> bytes | None:
        """The key the frames are signed with: the one given, else the checkpoint key.

        Raises:
            UserError: there is none and the store is shared (see
                :mod:`raygents.records.storekey`).
        """
        if self.key is not None:
            return self.key
        text = os.environ.get(_KEY_ENV)
        key = text.encode() if text else None
        storekey.require_key(self._open().url, key)
        return key

    @staticmethod
    def _listing(store: Store, session_id: str) -> _Listing:
        """The session's records and snapshot marks, from one listing."""
        prefix = f"sessions/{session_id}/"
        listed = [k for k in store.list(prefix) if "/" not in k[len(prefix) :]]
        keys = sorted(k for k in listed if seq_of(k) >= 0)
        marks = sorted(seq_of(k, MARK) for k in listed if seq_of(k, MARK) >= 0)
        return _Listing(keys=keys, seqs=frozenset(seq_of(k) for k in keys), snapshots=marks)

    def _decode(self, data: bytes, key: str, session_id: str) -> dict[str, Any]:
        value = codec.decode(data, key=self._key(), source=key)
        if not is_record(value, session_id):
            raise CheckpointCorrupt(
                f"{key!r} in {self.url} is not a raygents session record of {session_id!r}",
                key=key,
                reason="bad session",
            )
        return value
