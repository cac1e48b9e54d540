"""The session log of a StoreSession: its records, pure (no store I/O).

A conversation in a store is a chain of records ``sessions/<session_id>/<seq:010d>.sess``:
now and then a snapshot (the whole conversation), and after it records of what each save
changed. This module builds the record a save writes on a conversation (:func:`record`,
:func:`frame`), replays records into a conversation (:func:`start`, :func:`apply`), and
checks that a decoded value is a well-formed record (:func:`is_record`). Reading and
writing the records is :mod:`raygents.sessions.store`'s.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any, TypeGuard

from raygents.errors import CheckpointCorrupt, CheckpointTooLarge
from raygents.records import codec
from raygents.sessions.base import (
    build_messages,
    compacted_edit,
    fallback_tail,
    recompact,
    save_edit,
    splice,
)

__all__ = [
    "MARK",
    "Log",
    "apply",
    "frame",
    "in_lineage",
    "is_record",
    "kind",
    "record",
    "record_key",
    "seq_of",
    "start",
]

_FORMAT = "raygents.session"
_SUFFIX = ".sess"
MARK = ".snap"
"""An empty key ``<seq:010d>.snap`` beside a snapshot's record says it is one, so that a
load finds the newest snapshot in the listing and reads it and the records after it at once.
A hint: a load checks the record, and reads back one record at a time where there is none."""
_SNAPSHOT_EVERY = 32
"""A save writes the whole conversation once this many records follow the newest snapshot
(a load reads them all), or once they are as large as it."""
_LINEAGE = 256  # ids of the records a snapshot was built on that it records, newest last
_SNAPSHOTS = 16  # numbers of the earlier snapshots a snapshot records


@dataclass
class Log:
    """A conversation as its records since the newest snapshot leave it."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    """Canonical JSON-mode messages (as :func:`~raygents.sessions.base.dump_messages` makes
    them)."""
    marks: list[int] = field(default_factory=list)
    seq: int = 0
    """The newest record's number (0: none)."""
    newest: str | None = None
    """The newest record's id."""
    lineage: list[str] = field(default_factory=list)
    """The ids of the records the conversation was built on, oldest first."""
    snapshots: list[int] = field(default_factory=list)
    """The numbers of the snapshots, oldest first: the newest is the one read."""
    since: int = 0
    """Records after the newest snapshot."""
    since_bytes: int = 0
    snapshot_bytes: int = 0
    readable: bool = True


# --- building the record of a save --------------------------------------------------------
def frame(
    session_id: str,
    log: Log,
    data: list[dict[str, Any]],
    input_len: int | None,
    compacted: tuple[int, int, int] | None,
    *,
    key: bytes | None,
) -> tuple[dict[str, Any], bytes]:
    """The record of a save on ``log`` and its frame, signed with ``key``: a conversation too
    large for one record gets no snapshot (its loads read the records since the last one
    that fit).

    Raises:
        CheckpointTooLarge: what the save adds does not fit in one record.
    """
    delta, snapshot = record(session_id, log, data, input_len, compacted)
    source = f"sessions/{session_id}"
    if snapshot is not None:
        try:
            return snapshot, codec.encode(snapshot, key=key, source=source)
        except CheckpointTooLarge:
            if delta is None:
                raise
    assert delta is not None  # (one of the two is always given)
    return delta, codec.encode(delta, key=key, source=source)


def record(
    session_id: str,
    log: Log,
    data: list[dict[str, Any]],
    input_len: int | None,
    compacted: tuple[int, int, int] | None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The records a save of ``data`` on ``log`` may write: ``(delta, snapshot)``, what it
    changes and the whole result; the delta is None where there is nothing to build it on,
    the snapshot None where the delta is enough (see :data:`_SNAPSHOT_EVERY`)."""
    current, marks = log.messages, log.marks
    edit = None if compacted is None else compacted_edit(current, marks, data, compacted)
    body: dict[str, Any]
    if edit is not None:
        upto, summary, tail = edit
        new, new_marks = recompact(current, marks, upto, summary, tail)
        body = {"kind": "compact", "upto": upto, "summary": summary, "messages": tail}
    else:
        if compacted is not None:
            keep, tail = len(current), fallback_tail(data, compacted)
        else:
            keep, tail = save_edit(current, marks, data, input_len)
        new, new_marks = splice(current, marks, keep, tail)
        body = {"kind": "save", "keep": keep, "messages": tail}
    head = {"format": _FORMAT, "session_id": session_id, "id": uuid.uuid4().hex[:16]}
    if log.newest is not None:
        head["base"] = log.newest
    delta = {**head, **body}
    size = len(codec.encode(delta))
    on_log = bool(log.readable and log.seq)
    if on_log and log.since + 1 < _SNAPSHOT_EVERY and log.since_bytes + size < log.snapshot_bytes:
        return delta, None
    return delta if on_log else None, {
        **head,
        "kind": "snapshot",
        "messages": new,
        "marks": new_marks,
        "lineage": log.lineage[-_LINEAGE:],
        "snapshots": log.snapshots[-_SNAPSHOTS:],
    }


# --- replaying records --------------------------------------------------------------------
def start(where: str, seq: int, snapshot: dict[str, Any], size: int) -> Log:
    """The conversation snapshot ``seq`` holds (``size``: its frame's bytes; ``where``
    names the session in errors).

    Raises:
        RaygentsError: a message in it cannot be read.
    """
    newest = _text(snapshot.get("id"))
    lineage = [i for i in _list(snapshot.get("lineage")) if isinstance(i, str)]
    return Log(
        messages=_canonical(snapshot["messages"], where),
        marks=_ints(snapshot.get("marks")),
        seq=seq,
        newest=newest,
        lineage=lineage if newest is None else [*lineage, newest],
        snapshots=[*_ints(snapshot.get("snapshots")), seq],
        snapshot_bytes=size,
    )


def apply(
    session_id: str, url: str | None, log: Log, seq: int, value: dict[str, Any], size: int
) -> Log:
    """The conversation after record ``seq`` (not a snapshot) of session ``session_id`` in
    the store at ``url``, a new :class:`Log`.

    Raises:
        CheckpointCorrupt: the record keeps more messages than ``log`` has.
        RaygentsError: a message in it cannot be read.
    """
    where = f"session {session_id!r} in {url}"
    messages = _canonical(value["messages"], where)
    if value.get("keep", value.get("upto", 0)) > len(log.messages):
        key = record_key(session_id, seq)
        raise CheckpointCorrupt(
            f"{key!r} in {url} keeps more messages than the {len(log.messages)} before it",
            key=key,
            reason="bad session",
        )
    if value["kind"] == "compact":
        summary = _canonical(value["summary"], where)
        new, marks = recompact(log.messages, log.marks, value["upto"], summary, messages)
    else:
        new, marks = splice(log.messages, log.marks, value["keep"], messages)
    newest = _text(value.get("id"))
    lineage = log.lineage if newest is None else [*log.lineage, newest][-2 * _LINEAGE :]
    return replace(
        log,
        messages=new,
        marks=marks,
        seq=seq,
        newest=newest,
        lineage=lineage,
        since=log.since + 1,
        since_bytes=log.since_bytes + size,
    )


# --- reading a record ---------------------------------------------------------------------
def is_record(value: Any, session_id: str) -> TypeGuard[dict[str, Any]]:
    """Whether a decoded value is a well-formed session record of ``session_id``."""
    return (
        isinstance(value, dict)
        and value.get("format") == _FORMAT
        and value.get("session_id") == session_id
        and _well_formed(value)
    )


def kind(value: dict[str, Any]) -> str:
    """A record's kind: a record without one is a whole conversation, as raygents wrote
    every record before records held changes (a snapshot)."""
    found = value.get("kind", "snapshot")
    return found if isinstance(found, str) else ""


def in_lineage(value: dict[str, Any], record_id: str) -> bool:
    """Whether record ``record_id`` is among those a snapshot ``value`` was built on."""
    return record_id in _list(value.get("lineage"))


def _well_formed(value: dict[str, Any]) -> bool:
    """Whether a record has the fields its kind needs, of the right types."""
    if not isinstance(value.get("messages"), list):
        return False
    found = kind(value)
    if found == "snapshot":
        return True
    if found == "save":
        return _count(value.get("keep"))
    return (
        found == "compact" and _count(value.get("upto")) and isinstance(value.get("summary"), list)
    )


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _ints(value: Any) -> list[int]:
    return [b for b in _list(value) if type(b) is int]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _canonical(data: list[Any], where: str) -> list[dict[str, Any]]:
    """Stored messages as the canonical JSON-mode dicts a save compares and writes."""
    return [m.model_dump(mode="json") for m in build_messages(data, where)]


# --- the records' keys --------------------------------------------------------------------
def record_key(session_id: str, seq: int, suffix: str = _SUFFIX) -> str:
    """The key of record ``seq`` of a session (with ``suffix=MARK``, of its snapshot mark)."""
    return f"sessions/{session_id}/{seq:010d}{suffix}"


def seq_of(key: str, suffix: str = _SUFFIX) -> int:
    """The number in a record's key (or, with ``suffix=MARK``, a mark's); -1 for another."""
    name = key.rpartition("/")[2]
    digits = name[: -len(suffix)]
    return int(digits) if name.endswith(suffix) and digits.isdigit() and len(digits) == 10 else -1
