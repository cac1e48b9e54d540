"""StoreSession: conversations in a raygents checkpoint store."""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

from raygents.core.messages import Message
from raygents.errors import CheckpointCorrupt, CheckpointError, RaygentsError, UserError
from raygents.records import codec, storekey
from raygents.sessions.base import (
    build_messages,
    check_input_len,
    dump_messages,
    merge_save,
    validate_session_id,
)
from raygents.stores.base import Store
from raygents.stores.open import default_store_url, open_store

__all__ = ["StoreSession"]

_FORMAT = "raygents.session"
_SUFFIX = ".sess"
_KEY_ENV = storekey.KEY_ENV
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
        url: the store; ``$RAYGENTS_STORE`` or :func:`~raygents.stores.open.default_store_url` by
            default, resolved on first use or when the session is pickled, so a copy sent to
            Ray workers uses the store the sending process chose. ``memory://`` is per process.
        key: an HMAC key for the frames; ``$RAYGENTS_CHECKPOINT_KEY`` (read where used) by
            default, else a checksum; a shared store (``s3://``, or a marked ``file://``
            directory: :mod:`raygents.records.storekey`) refuses to work without one, unless
            ``$RAYGENTS_UNSIGNED_OK=1``.
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
                    return build_messages(value["messages"], f"session {key!r} in {self.url}")
        return []

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Write ``messages`` as the conversation's next version, then drop old versions."""
        self._write(session_id, messages, None)

    def save_run(self, session_id: str, messages: Sequence[Message], *, input_len: int) -> None:
        """Save a run's conversation as the next version, keeping what other runs saved since
        it loaded (see :class:`Session`); then drop old versions."""
        self._write(session_id, messages, check_input_len(input_len))

    def _write(self, session_id: str, messages: Sequence[Message], input_len: int | None) -> None:
        validate_session_id(session_id)
        data = dump_messages(messages)
        store = self._open()
        seq = self._put_next(store, session_id, data, input_len)
        old = [k for k in self._versions(store, session_id) if _seq(k) <= seq - self.keep_versions]
        store.delete(old)

    def _put_next(
        self, store: Store, session_id: str, data: list[dict[str, Any]], input_len: int | None
    ) -> int:
        """Put the conversation the save leaves (see :func:`merge_save`) under the version after
        the newest, the one it was computed from; return its number. Keys are never
        overwritten: when another save took that version first, start again from it."""
        for _ in range(_MAX_WRITE_ATTEMPTS):
            versions = self._versions(store, session_id)
            current, marks, seq, lineage = self._newest(store, session_id, versions, input_len)
            if seq < 0:
                continue  # the newest version went while we read it: a newer one exists
            new, new_marks = merge_save(current, marks, data, input_len)
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
            messages = build_messages(value["messages"], f"session {versions[-1]!r} in {self.url}")
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
