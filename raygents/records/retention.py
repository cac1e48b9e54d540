"""Retention: how long ended runs' records and kept results stay in the store, which runs
are past it, and removing them (the coordinator's background expiry and ``raygents gc``).

Only ended runs (completed, failed, cancelled) are ever removed, by the age of their end:
the marker's end time for a completed run, its newest record's for a failed or cancelled
one. Running, suspended, awaiting-approval and in-doubt runs, and runs whose keys, records or
completion marker cannot be read (a key not given, damage, a planted file: when they ended
is unknown), are never touched; ``scan`` lists those apart. A run's records go before its
completion marker, so a removal cut short leaves a run that is still completed (never one
that looks resumable).

Clocks: a run's end is the ``at`` the node that wrote its marker or record put there, by its
own clock (the coordinator's, for runs it saw end), and its age is the remover's clock
minus that. A writer whose clock runs ``D`` behind the remover's makes its runs look ``D``
older: they go at most ``D`` before their time. One that runs ahead makes them look younger,
and an end in the future is age 0: never past retention (nor does it hold back the expiry of
the others). Keep the nodes' clocks synchronised (NTP) to keep ``D`` to seconds.

Batch jobs' ledgers (``jobs/<job_id>/``, :mod:`raygents.records.ledger`) hold every completed
item's output, so they follow the same retention: a ledger shard goes once the run of the job
that wrote it started longer ago than the age (by the writer's clock, as above; the time is in
the shard's name). A shard can go before the item runs it lists (the job ran longer than
that): running the job again then finds those runs completed and their kept results, and
runs nothing again.
"""

from __future__ import annotations

import datetime
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from raygents.errors import UserError
from raygents.records import checkpoint, ledger, rebuild
from raygents.stores.base import Store

__all__ = [
    "DEFAULT_GC_S",
    "ENDED",
    "Expired",
    "ExpiredLedger",
    "Unreadable",
    "cutoff_of",
    "describe",
    "parse_duration",
    "remove",
    "remove_ledger",
    "retention_seconds",
    "scan",
    "scan_ledgers",
]

ENDED = ("completed", "failed", "cancelled")
"""The statuses of runs whose records and kept results retention removes."""
DEFAULT_GC_S = 7 * 86400.0
"""What ``raygents gc`` removes without ``--older-than`` or a retention: ended over 7 days ago."""
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")

Known = Callable[[str], tuple[str, float, str] | None]
"""A run's ``(status, ended_at, agent_name)`` as the caller knows it (its run table), or None
to read it from the store."""


@dataclass(frozen=True)
class Expired:
    """An ended run past retention: removed, or to be removed."""

    run_id: str
    status: str
    agent_name: str
    ended_at: float
    keys: list[str]

    def row(self) -> dict[str, Any]:
        """As ``raygents gc`` prints it (``keys``: how many)."""
        row = asdict(self)
        row["keys"] = len(self.keys)
        return row


@dataclass(frozen=True)
class Unreadable:
    """A run whose keys, records or completion marker cannot be read (or the store failed
    to give them): kept, whatever its age, and listed so that a person looks at it."""

    run_id: str
    status: str
    why: str
    keys: list[str]

    def row(self) -> dict[str, Any]:
        """As ``raygents gc`` prints it (``keys``: how many; ``unreadable``: why)."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "unreadable": self.why,
            "keys": len(self.keys),
        }


@dataclass(frozen=True)
class ExpiredLedger:
    """The shards of a batch job's ledger written by runs of the job that started before the
    cutoff: removed, or to be removed."""

    job_id: str
    written_at: float
    """When the newest of them was started."""
    keys: list[str]

    def row(self) -> dict[str, Any]:
        """As ``raygents gc`` prints it (``keys``: how many)."""
        return {"job_id": self.job_id, "written_at": self.written_at, "keys": len(self.keys)}


def retention_seconds(value: Any) -> float | None:
    """``init(retention=)`` in seconds: a ``timedelta`` or a number of seconds, or None
    (keep until ``raygents gc``).

    Raises:
        UserError: it is neither, or not a positive finite time.
    """
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise UserError(
            f"retention must be a datetime.timedelta or a number of seconds (or None to keep "
            f"ended runs until raygents gc), got {value!r}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise UserError(f"retention must be a positive, finite time, got {value!r}")
    return seconds


def parse_duration(text: str) -> float:
    """Seconds of a duration such as ``7d``, ``12h``, ``30m``, ``45s``, ``2w`` or ``90`` (s).

    Raises:
        ValueError: it is not one.
    """
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None:
        raise ValueError(
            f"expected a duration such as 7d, 12h, 30m, 45s or 2w (a number with a unit s, m, "
            f"h, d or w; seconds without one), got {text!r}"
        )
    return float(found[1]) * _UNITS[found[2] or "s"]


def describe(seconds: float) -> str:
    """A duration in its largest whole unit (``7d``), else in seconds."""
    for unit in ("w", "d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def scan(
    store: Store, key: bytes | None, cutoff: float, known: Known | None = None
) -> tuple[list[Expired], list[Unreadable]]:
    """The ended runs in ``store`` that ended before ``cutoff`` (a ``time.time()``), oldest
    first, and the runs that cannot be read (never expired: when they ended is unknown)
    (blocking: one listing, and one read of each run ``known`` does not know)."""
    found: list[Expired] = []
    unknown: list[Unreadable] = []
    for run_id, listed in rebuild.group(store.list("runs/")).items():
        entry = known(run_id) if known is not None else None
        if entry is None:
            read = rebuild.read(store, listed, key)
            if read is not None and (read.unreadable or read.status == rebuild.UNKNOWN):
                unknown.append(Unreadable(run_id, read.status, read.error or "", listed.keys))
                continue
            if read is None or read.status not in ENDED:
                continue
            entry = (read.status, read.at, read.agent_name)
        status, ended_at, agent_name = entry
        if status in ENDED and ended_at < cutoff:  # (cutoff <= now: an end to come is age 0)
            found.append(Expired(run_id, status, agent_name, ended_at, listed.keys))
    found.sort(key=lambda e: e.ended_at)
    return found, unknown


def remove(store: Store, run_id: str, keys: list[str]) -> None:
    """Delete a run's ``keys``: its records and marks first, its completion marker last."""
    if not keys:
        return
    markers = [k for k in keys if k.rpartition("/")[2].startswith(rebuild.DONE)]
    rest = [k for k in keys if k not in markers]
    if rest:
        store.delete(rest)
    if markers:
        store.delete(markers)
    store.remove_empty_dir(checkpoint.run_prefix(run_id))


def scan_ledgers(store: Store, cutoff: float) -> list[ExpiredLedger]:
    """The batch jobs' ledger shards in ``store`` written by runs of a job that started
    before ``cutoff``, by job (blocking: one listing). Keys under ``jobs/`` that are not a
    job's shard (another name, another job's name in a job's folder) are left alone."""
    found: dict[str, tuple[float, list[str]]] = {}
    for key in store.list(f"{ledger.LEDGER}/"):
        parts = key.split("/")
        if len(parts) != 3:
            continue
        match = ledger.SHARD.fullmatch(parts[2])
        if match is None or match[1] != parts[1]:
            continue
        written = ledger.written_at(parts[2])
        if written is None or written >= cutoff:
            continue
        newest, keys = found.get(parts[1], (0.0, []))
        keys.append(key)
        found[parts[1]] = (max(newest, written), keys)
    expired = [ExpiredLedger(job, at, keys) for job, (at, keys) in found.items()]
    return sorted(expired, key=lambda e: e.written_at)


def remove_ledger(store: Store, expired: ExpiredLedger) -> None:
    """Delete the shards of ``expired`` (and the job's folder, once empty)."""
    store.delete(expired.keys)
    store.remove_empty_dir(ledger.prefix(expired.job_id))


def cutoff_of(older_than_s: float) -> float:
    """The end time before which a run is older than ``older_than_s``: never later than
    now, so that an end to come is never past it."""
    return time.time() - max(0.0, older_than_s)
