"""Reading the run table back from the store: each run's entry from the keys listed under
``runs/`` and its newest record (or completion marker), or the reason it cannot be read.

Nothing here raises on what the store holds: a planted, damaged or foreign key makes its run
an *unreadable* entry (status ``failed``, or ``completed`` where a completion marker says so;
``last_error`` saying why), never a coordinator that cannot start. An unreadable entry has no
time (``at`` 0): nothing may be judged by its age.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from raygents.errors import CheckpointCorrupt, CheckpointError
from raygents.ids import is_id, validate_id
from raygents.records import checkpoint, keptresult

__all__ = [
    "DONE",
    "UNKNOWN",
    "UNREADABLE",
    "Found",
    "Listing",
    "done_key",
    "group",
    "listing",
    "read",
    "unreadable",
]

log = logging.getLogger("raygents")

DONE = "done."
"""The name of a completion marker starts so: ``runs/<run_id>/done.<epoch>``."""
MAX_EPOCH = 2**31
"""Epochs named by keys above this are not raygents' (a dispatch a second for 68 years)."""
_RECORD_NAME = re.compile(r"(\d{10})(?:\.(\d+))?\.ckpt")  # the names of checkpoint.key_for
_MARK_NAME = re.compile(r"(fence|done)\.(\d{1,12})")
_STATUSES = frozenset(
    ("running", "suspended", "awaiting_approval", "in_doubt", "failed", "completed", "cancelled")
)
_ERROR_CHARS = 2000
UNKNOWN = "unknown"
"""The status of a run not read back yet (the store failed, or the rebuild is still reading)."""
UNREADABLE = "unreadable: "
"""How the ``last_error`` of a run listed because its records cannot be read starts."""


def done_key(run_id: str, epoch: int) -> str:
    """The key of the marker that says dispatch ``epoch`` of the run completed it."""
    return f"{checkpoint.run_prefix(run_id)}{DONE}{epoch}"


@dataclass
class Listing:
    """A run's keys, as listed: enough for its epoch and whether it completed, unread."""

    run_id: str
    keys: list[str] = field(default_factory=list)
    epoch: int = 0
    """The newest dispatch any key names (records, fence marks, markers)."""
    done: str | None = None
    """The newest completion marker, unless a record of a later dispatch follows it."""
    strays: list[str] = field(default_factory=list)
    """Keys that are neither records nor marks (ignored beside a readable run)."""
    problem: str | None = None
    """Why the run cannot be read at all."""

    @property
    def chain(self) -> list[str]:
        """The keys of the run's valid records, oldest first."""
        return checkpoint.chain(self.keys)

    @property
    def records(self) -> list[str]:
        """Every key but the completion markers (what a completed run's cleanup deletes)."""
        return [k for k in self.keys if not k.rpartition("/")[2].startswith(DONE)]


@dataclass(frozen=True)
class Found:
    """What a run's keys and newest record say: its entry (a ``RunInfo``'s fields), and for
    a completed run with a marker, what the marker kept of its result."""

    status: str
    agent_name: str = "?"
    turns: int = 0
    seq: int = 0
    at: float = 0.0
    error: str | None = None
    output: str | None = None
    usage: dict[str, Any] | None = None
    leftovers: bool = False
    """A completed run whose records are still there (a cleanup that did not happen)."""
    tenant: str | None = None
    """Whose quota of runs in flight the run counts against, if its record names one."""
    started_at: float | None = None
    """When the run was first dispatched, if its marker says."""
    parent: str | None = None
    """The run id of its agent-as-tool parent, if its marker or newest record names it."""

    @property
    def unreadable(self) -> bool:
        """Whether the run is listed only because its keys, records or completion marker
        cannot be read."""
        return self.error is not None and self.error.startswith(UNREADABLE)


def unreadable(run_id: str, why: str) -> Found:
    """The entry of a run whose keys or records cannot be read, saying why and what to do."""
    text = (
        f"{UNREADABLE}{why}; raygents cannot resume it: inspect or remove "
        f"{checkpoint.run_prefix(run_id)!r} in the store"
    )
    return Found("failed", error=_short_text(text))


def group(keys: Iterable[str]) -> dict[str, Listing]:
    """The keys listed under ``runs/``, by run, in the order listed."""
    by_run: dict[str, list[str]] = {}
    for key in keys:
        run_id = key.split("/")[1] if key.count("/") >= 1 else ""
        by_run.setdefault(run_id, []).append(key)
    return {run_id: listing(run_id, run_keys) for run_id, run_keys in by_run.items()}


def listing(run_id: str, keys: list[str]) -> Listing:
    """One run's keys, sorted out (see :class:`Listing`); reads nothing."""
    found = Listing(run_id, keys)
    try:
        validate_id(run_id, "run id")
    except Exception as exc:
        found.problem = f"its run id is not valid ({exc}): no raygents run writes there"
        return found
    newest_record = 0
    done = -1
    prefix = checkpoint.run_prefix(run_id)
    for key in keys:
        name = key[len(prefix) :] if key.startswith(prefix) else ""
        record = _RECORD_NAME.fullmatch(name)
        mark = _MARK_NAME.fullmatch(name)
        epoch = int(record[2] or 0) if record else int(mark[2]) if mark else -1
        if epoch < 0 or epoch > MAX_EPOCH:
            found.strays.append(key)
            continue
        found.epoch = max(found.epoch, epoch)
        if record:
            newest_record = max(newest_record, epoch)
        elif mark and mark[1] == "done" and epoch > done:
            done = epoch
            found.done = key
    if found.done is not None and newest_record > done:
        found.done = None  # dispatched again after it completed
    if found.strays:
        log.warning(
            "run %s: ignoring keys no raygents run writes: %s", run_id, _short(found.strays)
        )
    return found


def read(store: Any, listed: Listing, key: bytes | None) -> Found | None:
    """A run's entry from its listing and its newest record or marker (blocking: one or two
    store reads); ``None`` for a run with nothing to list (fence marks only). Never raises."""
    where = "its keys"
    try:
        if listed.problem is not None:
            return unreadable(listed.run_id, listed.problem)
        if listed.done is not None:
            return _marked(store, listed, key)
        chain = listed.chain
        if not chain:
            if not listed.strays:
                return None
            return unreadable(
                listed.run_id, f"it has no checkpoint record, only {_short(listed.strays)}"
            )
        newest = chain[-1]
        where = f"its newest record {newest!r}"
        data = store.get(newest)
        if data is None:
            return unreadable(listed.run_id, f"{where} went while it was read")
        record = checkpoint.decode(data, key=key, source=newest)
        return _entry(listed.run_id, newest, record)
    except CheckpointError as exc:
        if isinstance(exc, CheckpointCorrupt):
            return unreadable(listed.run_id, f"{where} cannot be read: {exc}")
        log.warning("cannot read run %s back from the store (yet): %s", listed.run_id, exc)
        return Found(UNKNOWN, error=_short_text(f"the store failed: {exc}"))  # (tried again)
    except Exception as exc:
        return unreadable(listed.run_id, f"{where} cannot be read: {type(exc).__name__}: {exc}")


def _marked(store: Any, listed: Listing, key: bytes | None) -> Found:
    """A completed run's entry from its marker. A marker that cannot be read still says the
    run completed (its name does), so the entry keeps the status, but it is unreadable: when
    the run ended and what it left are unknown (retention never removes it)."""
    assert listed.done is not None
    leftovers = bool(listed.records)
    try:
        data = store.get(listed.done)
        if data is None:
            raise CheckpointCorrupt("it went while it was read")
        marker = keptresult.read_marker(
            data or b"", key=key, run_id=listed.run_id, source=listed.done
        )
        output = marker.get("output")
        return Found(
            "completed",
            agent_name=_text(marker, "agent_name", "?"),
            turns=_count(marker, "turns"),
            seq=_count(marker, "seq"),
            at=keptresult.ended_at(marker) or time.time(),
            output=output if isinstance(output, str) else None,
            usage=keptresult.usage_of(marker),
            leftovers=leftovers,
            started_at=keptresult.started_at(marker),
            parent=keptresult.parent(marker),
        )
    except CheckpointError as exc:
        if not isinstance(exc, CheckpointCorrupt):
            log.warning("cannot read run %s back from the store (yet): %s", listed.run_id, exc)
            return Found(UNKNOWN, error=_short_text(f"the store failed: {exc}"))
        why = f"{exc}"
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
    log.warning("run %s completed, but its marker cannot be read: %s", listed.run_id, why)
    entry = unreadable(
        listed.run_id,
        f"it completed, but its completion marker {listed.done!r} cannot be read: {why}",
    )
    return replace(entry, status="completed", leftovers=leftovers)


def _entry(run_id: str, key: str, record: dict[str, Any]) -> Found:
    """The entry a record gives, its fields checked: a wrong one makes the run unreadable."""
    name = _RECORD_NAME.fullmatch(key.rpartition("/")[2])
    assert name is not None
    status = record.get("status")
    if not isinstance(status, str) or status not in _STATUSES:
        return _bad(run_id, key, f"has status {_short(status)}, not one of {sorted(_STATUSES)}")
    seq = record.get("seq")
    if type(seq) is not int or seq != int(name[1]):
        return _bad(run_id, key, f"has seq {_short(seq)}, but its key names seq {int(name[1])}")
    if "run_id" in record and record["run_id"] != run_id:
        return _bad(run_id, key, f"has run_id {_short(record['run_id'])}, not {run_id!r}")
    state = record.get("state", record.get("changes"))
    if not isinstance(state, dict):
        return _bad(run_id, key, f"has state {_short(state)}, not a mapping")
    error = record.get("error")
    if error is not None and not isinstance(error, str):
        return _bad(run_id, key, f"has error {_short(error)}, not text")
    at = record.get("at", 0.0)
    if type(at) not in (int, float) or not math.isfinite(at):
        return _bad(run_id, key, f"has at {_short(at)}, not a time")
    agent_name = state.get("agent_name")
    if not isinstance(agent_name, str) or not agent_name:
        return _bad(run_id, key, f"has agent_name {_short(agent_name)}, not a name")
    for field_name in ("turns", "epoch"):
        value = state.get(field_name, 0)
        if type(value) is not int or not 0 <= value <= MAX_EPOCH:
            return _bad(run_id, key, f"has {field_name} {_short(value)}, not a count")
    if status == "running":  # whoever drove it is gone: leave it resumable
        status = "suspended"
        error = "its driver or the coordinator stopped while it ran; resume it"
    tenant = state.get("tenant")
    parent = state.get("parent_run_id")  # (a full record's: a delta names what changed)
    return Found(
        status,
        agent_name=agent_name,
        turns=state.get("turns", 0),
        seq=seq,
        at=float(at) or time.time(),
        error=None if error is None else _short_text(error),
        tenant=tenant if isinstance(tenant, str) and is_id(tenant) else None,
        parent=parent if isinstance(parent, str) and is_id(parent) else None,
    )


def _bad(run_id: str, key: str, what: str) -> Found:
    return unreadable(run_id, f"its newest record {key!r} {what}")


def _text(marker: dict[str, Any], name: str, default: str) -> str:
    value = marker.get(name)
    return value if isinstance(value, str) and value else default


def _count(marker: dict[str, Any], name: str) -> int:
    value = marker.get(name)
    return value if type(value) is int and value >= 0 else 0


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text)} characters)"


def _short_text(text: str) -> str:
    return text if len(text) <= _ERROR_CHARS else text[:_ERROR_CHARS] + "..."
