"""Checkpoint records: deltas of a run's state, compacted now and then, and their replay.

A run's checkpoints are a sequence of records under ``runs/<run_id>/``. A *full* record holds
the whole history; a *delta* keeps the first ``keep`` messages of the history so far and
appends new ones, so bytes written per turn grow with the new messages, not with the history.
A full record is written when the history was rewritten, and when the deltas since the last
full record add up to ``FULL_RATIO`` times its size: the full records of a growing history
then sum to at most ``1 + 1/FULL_RATIO`` times the final history, and a replay reads at most
``FULL_RATIO + 1`` full-record sizes. A record's run-state body leaves out fields at their
defaults and what a replay derives; a delta's holds only the fields that changed.

Every record says where it lives: its run id and seq (and its dispatch's epoch, in the body)
are inside the checked (with a key, signed) payload. A record read from a key of another run,
seq or epoch, or replayed into another run's chain, is refused as ``misplaced``: records
cannot be moved between runs or rolled back onto a later seq. Deltas written before records
carried their run id are accepted where their key and the chain's full record bind them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

from raygents.core.envelope import RunState
from raygents.core.messages import Message
from raygents.errors import CheckpointCorrupt, CheckpointError
from raygents.records import codec

__all__ = [
    "FORMAT",
    "FULL_RATIO",
    "Body",
    "Record",
    "Status",
    "chain",
    "fence_key",
    "key_for",
    "make_record",
    "next_record",
    "parse_key",
    "replay",
    "restore",
    "run_prefix",
    "states",
]

FORMAT = 1
JOURNAL_FORMAT = 2
"""The format of a delta record that adds journal entries (``journal_add``): older readers,
which know only ``FORMAT``, refuse it instead of missing the entries."""
_READS = (FORMAT, JOURNAL_FORMAT)
FULL_RATIO = 4
_MIN_FULL = 4096  # bytes: short histories are not worth a full record per delta
# Run state fields a replay derives from the records themselves, so bodies leave them out.
_DERIVED = {"messages", "run_id", "seq", "recorded", "since_full", "full_size"}
Status = Literal[
    "running", "suspended", "awaiting_approval", "in_doubt", "failed", "completed", "cancelled"
]
Record = dict[str, Any]
Body = dict[str, Any]
_NONE = object()
_ALWAYS = ("agent_name", "turns", "epoch", "tenant")
"""Body fields every record carries (the run table is rebuilt from each run's newest record)."""


def run_prefix(run_id: str) -> str:
    """The store prefix of a run's records."""
    return f"runs/{run_id}/"


def key_for(run_id: str, seq: int, epoch: int = 0) -> str:
    """The store key of one record, written by dispatch ``epoch`` of the run.

    Two copies of a run (a stale one and the one dispatched after it) never write the same
    key: the epoch is part of the name (``0000000007.3.ckpt``; epoch 0, ``0000000007.ckpt``).
    """
    middle = f".{epoch}" if epoch else ""
    return f"{run_prefix(run_id)}{seq:010d}{middle}.ckpt"


def fence_key(run_id: str, epoch: int) -> str:
    """The store key that marks that the run was dispatched with ``epoch``: a copy of an
    earlier dispatch that finds it stops writing."""
    return f"{run_prefix(run_id)}fence.{epoch}"


_RECORD_KEY = re.compile(r"runs/([^/]+)/(\d{10})(?:\.(\d+))?\.ckpt")


def parse_key(key: str) -> tuple[str, int, int] | None:
    """The run id, seq and epoch that a record key ``runs/<run_id>/<seq>[.<epoch>].ckpt``
    names (the run id one segment), or None for any other key."""
    match = _RECORD_KEY.fullmatch(key)
    if match is None:
        return None
    return match[1], int(match[2]), int(match[3] or 0)


def chain(keys: Iterable[str], run_id: str | None = None) -> list[str]:
    """The keys of a run's valid records, oldest first.

    A record written by dispatch ``e`` at seq ``s`` is void when a later dispatch wrote a
    record at ``s`` or before: the later dispatch did not build on it (a fenced copy's last
    write). The chain is the valid records up to the first seq without one. Keys that are not
    records (fence marks), and keys that are not directly in one run's folder
    (``runs/<run_id>/``, or only ``run_id``'s when given), are left out: records planted in
    ``runs/victim/x/`` never join run ``victim``'s chain.
    """
    found: dict[int, dict[int, str]] = {}
    for key in keys:
        parsed = parse_key(key)
        if parsed is not None and (run_id is None or parsed[0] == run_id):
            found.setdefault(parsed[1], {})[parsed[2]] = key
    kept: list[str] = []
    newest = -1
    expected = min(found, default=0)
    for seq in sorted(found):
        if seq != expected:
            break
        by_epoch = found[seq]
        newest = max(newest, *by_epoch)
        if newest not in by_epoch:
            break
        kept.append(by_epoch[newest])
        expected = seq + 1
    return kept


def make_record(
    state: RunState, status: Status, *, cause: str | None = None, error: str | None = None
) -> tuple[RunState, Record]:
    """The next record for ``state``, and the state updated to remember it was written."""
    new, record, _ = next_record(state, status, None, cause=cause, error=error)
    return new, record


def next_record(
    state: RunState,
    status: Status,
    previous: Body | None,
    *,
    cause: str | None = None,
    error: str | None = None,
) -> tuple[RunState, Record, Body]:
    """The next record for ``state``, the state updated to remember it was written, and the
    record's run-state body.

    ``previous`` is the body of the run's previous record, if the caller kept it: a delta
    record then holds only the fields that changed (``changes``, and ``unset`` for fields back
    at their defaults; always the agent, turns and epoch) instead of the whole body
    (``state``). ``state.since_full`` counts the bytes of messages in deltas since the last
    full record and ``state.full_size`` the bytes of that record's messages.
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
    body: Body = new.model_dump(mode="json", exclude=_DERIVED | {"journal"}, exclude_defaults=True)
    body["agent_name"] = new.agent_name
    known: dict[str, Any] = previous.get("journal", {}) if previous is not None else {}
    if new.journal:  # entries never change: only new ones are dumped
        body["journal"] = {
            call_id: known[call_id] if call_id in known else _result(result)
            for call_id, result in new.journal.items()
        }
    record: Record = {
        "format": FORMAT,
        "run_id": state.run_id,
        "seq": seq,
        "kind": "full" if full else "delta",
        "status": status,
        "keep": keep,
        "append": append,
        "at": time.time(),
    }
    if full or previous is None:
        record["state"] = body
    else:
        journal = body.get("journal", {})
        grows = bool(known) and len(journal) > len(known) and known.keys() <= journal.keys()
        record["changes"] = {
            k: v
            for k, v in body.items()
            if k in _ALWAYS or (previous.get(k, _NONE) != v and not (grows and k == "journal"))
        }
        if grows:  # a batch's journal records carry its new entries only, not all of them
            record["format"] = JOURNAL_FORMAT
            record["journal_add"] = {k: v for k, v in journal.items() if k not in known}
        unset = [k for k in previous if k not in body]
        if unset:
            record["unset"] = unset
    if cause is not None:
        record["cause"] = cause
    if error is not None:
        record["error"] = error
    return new, record, body


def _message(m: Message) -> dict[str, Any]:
    return m.model_dump(mode="json", exclude_defaults=True)


def _result(result: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(mode="json", exclude_defaults=True)
    return dumped


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
    """Checkpoint bytes as a record.

    When ``source`` is a record key (``runs/<run_id>/<seq>[.<epoch>].ckpt``), the record must
    say it belongs there: its run id (when it carries one: deltas written before records
    carried it do not), seq and epoch (when the key names one: keys written before they named
    epochs hold records of epoch 1) must be the key's.

    Raises:
        CheckpointCorrupt: the bytes are damaged, unsigned or signed with another key (see
            :func:`raygents.records.codec.decode`), of an unknown record format ("record format"),
            not a record ("invalid record"), or found under another run's, seq's or epoch's
            key ("misplaced").
    """
    value = codec.decode(data, key=key, source=source, max_bytes=max_bytes)
    if not isinstance(value, dict) or value.get("format") not in _READS:
        found = value.get("format") if isinstance(value, dict) else type(value).__name__
        raise CheckpointCorrupt(
            f"checkpoint {source or ''} has record format {found!r}; this raygents reads "
            + " and ".join(map(str, _READS)),
            key=source,
            reason="record format",
        )
    seq, run_id = value.get("seq"), value.get("run_id", "")
    if type(seq) is not int or seq < 1 or type(run_id) is not str:
        raise CheckpointCorrupt(
            f"checkpoint {source or ''} is not a valid record: seq {seq!r}, run id {run_id!r}",
            key=source,
            reason="invalid record",
        )
    if source is not None and source.startswith(_RUNS):
        _check_place(value, source)
    return value


_RUNS = "runs/"


def _check_place(record: Record, source: str) -> None:
    """Refuse a record read from a record key that is not its own."""
    place = parse_key(source)
    if place is None:
        if source.endswith(".ckpt"):  # e.g. runs/victim/x/0000000001.ckpt
            run_part = source[len(_RUNS) :].rpartition("/")[0]
            raise CheckpointCorrupt(
                f"checkpoint {source!r} is in folder {run_part!r}, which is not a valid run id "
                "(one segment): no raygents run writes there",
                key=source,
                reason="misplaced",
            )
        return
    # (records written before keys named their epoch: epoch 1 under a key without one)
    own = (record.get("run_id") or place[0], record["seq"], _epoch(record) if place[2] else 0)
    if own != place:
        raise CheckpointCorrupt(
            f"checkpoint {source!r} belongs to run {own[0]!r}, seq {own[1]}, epoch {own[2]}, "
            f"not to run {place[0]!r}, seq {place[1]}, epoch {place[2]}: it was moved or "
            "copied there; remove it, or restore the run's records from a backup",
            key=source,
            reason="misplaced",
        )


def _epoch(record: Record) -> int:
    """The epoch of the dispatch that wrote ``record`` (0 when its body leaves it out)."""
    body = record.get("state")
    if not isinstance(body, dict):
        body = record.get("changes")
    epoch = body.get("epoch", 0) if isinstance(body, dict) else 0
    return epoch if type(epoch) is int else -1


def restore(
    blobs: Iterable[bytes], *, run_id: str, key: bytes | None = None
) -> tuple[RunState, Record]:
    """Decode a run's stored records (oldest first) and replay them as run ``run_id``'s.

    Raises:
        CheckpointCorrupt: a record is damaged, or belongs to another run ("misplaced").
        CheckpointError: the records do not form a chain starting at a full record.
    """
    source = run_prefix(run_id)
    return replay([decode(b, key=key, source=source) for b in blobs], run_id=run_id)


def replay(records: Sequence[Record], *, run_id: str | None = None) -> tuple[RunState, Record]:
    """Rebuild the newest state from a run's records (oldest first); returns it and the last record.

    Every record that names its run must name the same one (``run_id`` when given; the full
    record's otherwise), and epochs never go back along the chain.

    Raises:
        CheckpointCorrupt: a record belongs to another run, or comes from an earlier dispatch
            than the record before it ("misplaced").
        CheckpointError: the records do not form a chain starting at a full record.
    """
    if not records:
        raise CheckpointError("no checkpoint records to replay")
    ordered = sorted(records, key=lambda r: int(r["seq"]))
    start = max((i for i, r in enumerate(ordered) if r["kind"] == "full"), default=None)
    *_, newest = _states(ordered, start, run_id, every=False)
    return newest


def states(records: Sequence[Record], *, run_id: str) -> Iterator[tuple[RunState, Record]]:
    """The state after each of a run's records (oldest first, from its first full record),
    in one pass: what :func:`replay` of each prefix would give.

    Raises:
        CheckpointCorrupt, CheckpointError: as :func:`replay`.
    """
    ordered = sorted(records, key=lambda r: int(r["seq"]))
    start = next((i for i, r in enumerate(ordered) if r["kind"] == "full"), None)
    return _states(ordered, start, run_id, every=True)


def _states(
    ordered: Sequence[Record], start: int | None, run_id: str | None, *, every: bool
) -> Iterator[tuple[RunState, Record]]:
    """Replay ``ordered[start:]`` (``start``: a full record's index), yielding the state after
    each record (``every``) or after the last one only."""
    found = next((r["run_id"] for r in ordered if r.get("run_id")), "?")
    if start is None:
        raise CheckpointError(f"run {run_id or found!r} has no full checkpoint record")
    run_id = run_id or ordered[start].get("run_id") or found
    chained = ordered[start:]
    _check_chain(chained, run_id)
    messages: list[Message] = []
    sizes: list[int] = []
    body: Body = {}
    try:
        for expected, record in enumerate(chained, start=int(chained[0]["seq"])):
            if int(record["seq"]) != expected:
                raise CheckpointError(f"checkpoint record {expected} of run {run_id!r} is missing")
            messages = messages[: int(record["keep"])] + [
                Message.model_validate(m) for m in record["append"]
            ]
            sizes.append(codec.packed_size(record["append"]))
            if record["kind"] == "full":  # (the deltas after it count from it)
                sizes = sizes[-1:]
            if "state" in record:
                body = dict(record["state"])
            else:
                body.update(record["changes"])
                for name in record.get("unset", ()):
                    body.pop(name, None)
                if "journal_add" in record:
                    body["journal"] = {**body.get("journal", {}), **record["journal_add"]}
            if every or record is chained[-1]:
                yield _state(body, record, run_id, messages, sizes), record
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointCorrupt(
            f"checkpoint records of run {run_id!r} do not form a valid state: {exc}",
            reason="invalid state",
        ) from None


def _state(
    body: Body, record: Record, run_id: str, messages: list[Message], sizes: list[int]
) -> RunState:
    derived = {
        "run_id": run_id,
        "seq": int(record["seq"]),
        "recorded": len(messages),
        "full_size": sizes[0],
        "since_full": sum(sizes[1:]),
        "messages": messages,
    }
    return RunState.model_validate({**body, **derived})


def _check_chain(records: Sequence[Record], run_id: str) -> None:
    """Refuse a chain holding another run's record, or going back to an earlier epoch."""
    epoch = 0
    for record in records:
        owner = record.get("run_id", run_id)
        if owner != run_id:
            raise CheckpointCorrupt(
                f"checkpoint record {record['seq']} in the chain of run {run_id!r} belongs to "
                f"run {owner!r}: it was moved or copied there",
                run_id=run_id,
                reason="misplaced",
            )
        if _epoch(record) < epoch:
            raise CheckpointCorrupt(
                f"checkpoint record {record['seq']} of run {run_id!r} was written by dispatch "
                f"epoch {_epoch(record)}, earlier than the epoch of the record before it "
                f"({epoch}): it was moved or copied there",
                run_id=run_id,
                reason="misplaced",
            )
        epoch = _epoch(record)
