"""Checkpoint records: deltas of a run's state, compacted now and then, and their replay.

A run's checkpoints are a sequence of records under ``runs/<run_id>/``. A *full* record holds
the whole history; a *delta* keeps the first ``keep`` messages of the history so far and
appends new ones, so bytes written per turn grow with the new messages, not with the history.
A full record is written when the history was rewritten, and when the deltas since the last
full record add up to ``FULL_RATIO`` times its size: the full records of a growing history
then sum to at most ``1 + 1/FULL_RATIO`` times the final history, and a replay reads at most
``FULL_RATIO + 1`` full-record sizes. Record bodies leave out fields at their defaults.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from raygents import codec
from raygents.envelope import RunState
from raygents.errors import CheckpointCorrupt, CheckpointError
from raygents.messages import Message

__all__ = [
    "FORMAT",
    "FULL_RATIO",
    "Record",
    "Status",
    "key_for",
    "make_record",
    "replay",
    "run_prefix",
]

FORMAT = 1
FULL_RATIO = 4
_MIN_FULL = 4096  # bytes: short histories are not worth a full record per delta
Status = Literal["running", "suspended", "awaiting_approval", "failed", "completed"]
Record = dict[str, Any]


def run_prefix(run_id: str) -> str:
    """The store prefix of a run's records."""
    return f"runs/{run_id}/"


def key_for(run_id: str, seq: int) -> str:
    """The store key of one record."""
    return f"{run_prefix(run_id)}{seq:010d}.ckpt"


def make_record(
    state: RunState, status: Status, *, cause: str | None = None, error: str | None = None
) -> tuple[RunState, Record]:
    """The next record for ``state``, and the state updated to remember it was written.

    ``state.since_full`` counts the bytes of messages in deltas since the last full record
    and ``state.full_size`` the bytes of that record's messages.
    """
    seq = state.seq + 1
    rewritten = state.recorded > len(state.messages) or state.recorded == 0
    keep = state.recorded
    append = [_message(m) for m in state.messages[keep:]]
    size = codec.packed_size(append)
    full = rewritten or state.since_full + size > FULL_RATIO * max(state.full_size, _MIN_FULL)
    if full:
        keep = 0
        append = [_message(m) for m in state.messages]
        size = codec.packed_size(append)
    new = state.evolve(
        seq=seq,
        recorded=len(state.messages),
        since_full=0 if full else state.since_full + size,
        full_size=size if full else state.full_size,
    )
    body = new.model_dump(mode="json", exclude={"messages", "run_id"}, exclude_defaults=True)
    body["agent_name"] = new.agent_name
    record: Record = {
        "format": FORMAT,
        "run_id": state.run_id,
        "seq": seq,
        "kind": "full" if full else "delta",
        "status": status,
        "keep": keep,
        "append": append,
        "state": body,
        "at": time.time(),
    }
    if cause is not None:
        record["cause"] = cause
    if error is not None:
        record["error"] = error
    return new, record


def _message(m: Message) -> dict[str, Any]:
    return m.model_dump(mode="json", exclude_defaults=True)


def encode(record: Record, *, key: bytes | None = None) -> bytes:
    """A record as checkpoint bytes."""
    return codec.encode(record, key=key)


def decode(
    data: bytes,
    *,
    key: bytes | None = None,
    source: str | None = None,
    max_bytes: int = 10 * 1024 * 1024,
) -> Record:
    """Checkpoint bytes as a record; damaged bytes raise :class:`CheckpointCorrupt`."""
    value = codec.decode(data, key=key, source=source, max_bytes=max_bytes)
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        found = value.get("format") if isinstance(value, dict) else type(value).__name__
        raise CheckpointCorrupt(
            f"checkpoint {source or ''} has record format {found!r}; this raygents reads {FORMAT}",
            key=source,
            reason="record format",
        )
    return value


def replay(records: Sequence[Record]) -> tuple[RunState, Record]:
    """Rebuild the newest state from a run's records (oldest first); returns it and the last record.

    Raises:
        CheckpointError: the records do not form a chain starting at a full record.
    """
    if not records:
        raise CheckpointError("no checkpoint records to replay")
    ordered = sorted(records, key=lambda r: int(r["seq"]))
    start = max((i for i, r in enumerate(ordered) if r["kind"] == "full"), default=None)
    if start is None:
        raise CheckpointError(f"run {ordered[0]['run_id']!r} has no full checkpoint record")
    messages: list[Message] = []
    try:
        for expected, record in enumerate(ordered[start:], start=int(ordered[start]["seq"])):
            if int(record["seq"]) != expected:
                raise CheckpointError(
                    f"checkpoint record {expected} of run {record['run_id']!r} is missing"
                )
            messages = messages[: int(record["keep"])] + [
                Message.model_validate(m) for m in record["append"]
            ]
        last = ordered[-1]
        body = {"run_id": last["run_id"], **last["state"], "messages": messages}
        state = RunState.model_validate(body)
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointCorrupt(
            f"checkpoint records of run {ordered[-1].get('run_id')!r} "
            f"do not form a valid state: {exc}",
            reason="invalid state",
        ) from None
    return state, last


def obsolete(keys: Iterable[str], records: Sequence[Record]) -> list[str]:
    """Keys of records older than the newest full record (safe to delete)."""
    fulls = [int(r["seq"]) for r in records if r["kind"] == "full"]
    if not fulls:
        return []
    newest = max(fulls)
    return [k for k in keys if int(k.rsplit("/", 1)[-1].split(".")[0]) < newest]
