"""A run's history: one ``Checkpoint`` per durable record (or its completion marker), and the
run's state as any of them left it, read from the records recovery reads.

A run's records are deltas over its newest full record before them, so the state at a seq is
the replay of the chain up to that seq. A completed run keeps only its completion marker
(:mod:`~raygents.records.keptresult`): its history is one ``final`` checkpoint, the state its
kept result holds (its final messages, as many as the marker kept).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from raygents.core.contextdata import StoredContext
from raygents.core.envelope import RunState
from raygents.core.messages import Message
from raygents.errors import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    RunNotFound,
    excerpt,
)
from raygents.records import checkpoint, keptresult

__all__ = ["Checkpoint", "History", "checkpoints", "load", "reason_of"]

_LAST = 120
"""How much of the newest message a checkpoint quotes."""
_STOPS = {
    "suspended": "suspend",
    "awaiting_approval": "interrupt",
    "failed": "failed",
    "cancelled": "cancelled",
    "completed": "final",
}


@dataclass(frozen=True)
class Checkpoint:
    """One durable checkpoint of a run (see :func:`raygents.history`)."""

    seq: int
    """Its sequence number: ``fork(run_id, at=seq)`` starts from it."""
    turn: int
    """The run's model turns by then."""
    agent_name: str
    """The agent active at it."""
    at: datetime
    """When it was written (UTC)."""
    reason: str
    """Why it was written: ``"input"`` (new input, before a model turn), ``"intent"`` (a
    model asked for tool calls, before they ran), ``"journal"`` (calls of a batch finished,
    others still running), ``"results"`` (a batch's results), ``"turn"`` (a model reply with
    no calls), ``"handoff"``, ``"suspend"``, ``"interrupt"`` (awaiting approval),
    ``"failed"``, ``"cancelled"``, ``"final"`` (a completed run's kept result); another
    stop's status as it is."""
    messages: int
    """How many messages the conversation had."""
    last: str
    """An excerpt of the newest message (``role: text``, or the tools it calls)."""


def _last(messages: Sequence[Message]) -> str:
    if not messages:
        return ""
    m = messages[-1]
    calls = ", ".join(c.name for c in m.tool_calls)
    text = f"calls {calls}" if calls else m.content or ""
    return excerpt(f"{m.role}: {' '.join(text.split())}", _LAST)


def reason_of(record: Mapping[str, Any], state: RunState, before: RunState | None) -> str:
    """Why ``record`` was written, from what it holds: its stop status, else how its state
    differs from the one before it."""
    status = str(record.get("status") or "running")
    if status != "running":
        return _STOPS.get(status, status)
    if before is not None and state.agent_name != before.agent_name:
        return "handoff"
    newest = state.messages[-1] if state.messages else None
    if newest is None or newest.role in ("user", "system"):
        return "input"
    if newest is not None and newest.tool_calls:
        return "journal" if state.journal else "intent"
    if newest is not None and newest.role == "tool":
        return "results"
    return "turn"


def _at(value: Any) -> datetime:
    seconds = float(value) if isinstance(value, (int, float)) else 0.0
    return datetime.fromtimestamp(seconds, UTC)


@dataclass(frozen=True)
class History:
    """A run's decoded records (oldest first, the chain recovery replays) and its completion
    marker, if it has one."""

    run_id: str
    records: Sequence[checkpoint.Record]
    marker: Mapping[str, Any] | None = None

    def checkpoints(self) -> list[Checkpoint]:
        """Every durable checkpoint, oldest first (see :func:`checkpoints`)."""
        return checkpoints(self)

    def seqs(self) -> list[int]:
        """The seqs a fork may start from."""
        return [c.seq for c in self.checkpoints()]

    def state_at(self, seq: int | None = None) -> RunState:
        """The run's state at checkpoint ``seq`` (default: its newest).

        Raises:
            CheckpointNotFound: the run has no checkpoint ``seq``.
            CheckpointError: its records do not replay.
        """
        newest = self.records[-1]["seq"] if self.records else None
        if self.marker is not None and (seq is None or seq == self._final_seq()):
            return self._final_state()
        if newest is not None and (seq is None or seq == newest):
            return checkpoint.replay(self.records, run_id=self.run_id)[0]
        if seq is not None and any(r["seq"] == seq for r in self.records):
            upto = [r for r in self.records if int(r["seq"]) <= seq]
            return checkpoint.replay(upto, run_id=self.run_id)[0]
        kept = ""
        if self.marker is not None and not self.records:
            kept = (
                "; a completed run keeps its final state only, unless raygents.init("
                "keep_history=True) kept its records"
            )
        raise CheckpointNotFound(
            f"run {self.run_id!r} has no checkpoint {seq!r} (it has {self.seqs()!r}; see "
            f"raygents.history){kept}",
            run_id=self.run_id,
            seq=seq,
        )

    def _final_seq(self) -> int:
        marker = self.marker or {}
        seq = marker.get("seq")
        newest = int(self.records[-1]["seq"]) if self.records else 0
        return seq if type(seq) is int and seq > newest else newest + 1

    def _final_state(self) -> RunState:
        """The state a completed run's marker keeps: its final messages and agent, the agent
        it started on and whether a handoff rewrote its history (a marker written before
        they were kept names no start agent: ``start_agent`` is then ``""``)."""
        marker = self.marker or {}
        kept = keptresult.summary(marker)
        messages = tuple(kept["messages"]) if kept is not None else ()
        name = kept["agent_name"] if kept is not None else str(marker.get("agent_name") or "?")
        turns = marker.get("turns")
        try:
            context = (
                StoredContext.model_validate(kept["context"])
                if kept and "context" in kept
                else None
            )
        except ValueError:  # (a context of a newer raygents: the fork gives its own)
            context = None
        return RunState(
            run_id=self.run_id,
            agent_name=name,
            messages=messages,
            input_len=kept["input_count"] if kept is not None else 0,
            turns=turns if type(turns) is int and turns >= 0 else 0,
            seq=self._final_seq(),
            context=context,
            start_agent=kept.get("start_agent", "") if kept is not None else "",
            rewritten=kept.get("rewritten", False) if kept is not None else False,
        )


def load(
    run_id: str, blobs: Sequence[bytes], marker: bytes | None, *, key: bytes | None
) -> History:
    """A run's history from its stored records (oldest first) and completion marker, checked
    as recovery checks them (integrity, key, place).

    Raises:
        RunNotFound: there is nothing of the run.
        CheckpointCorrupt: a record or the marker is damaged, or not this run's.
    """
    if not blobs and marker is None:
        raise RunNotFound(
            f"no checkpoint of run {run_id!r} is kept (an unknown run, or one past retention)",
            run_id=run_id,
        )
    source = checkpoint.run_prefix(run_id)
    records = [checkpoint.decode(b, key=key, source=source) for b in blobs]
    done = None
    if marker is not None:
        try:
            done = keptresult.read_marker(marker, key=key, run_id=run_id, source=f"{source}done")
        except ValueError as exc:
            raise CheckpointCorrupt(
                f"the completion marker of run {run_id!r} is not its own: {exc}",
                run_id=run_id,
                reason="misplaced",
            ) from None
    if done is not None and records and not _replays(records, run_id):
        records = []
    return History(run_id, records, done)


def _replays(records: Sequence[checkpoint.Record], run_id: str) -> bool:
    """Whether a completed run's records still form its chain. Its clean-up deletes them
    once its marker is stored, and a read in between finds part of them: its history is then
    its marker's final state, as after the clean-up.

    Raises:
        CheckpointCorrupt: a record is damaged.
    """
    try:
        checkpoint.replay(records, run_id=run_id)
    except CheckpointCorrupt:
        raise
    except CheckpointError:
        return False
    return True


def checkpoints(history: History) -> list[Checkpoint]:
    """Every durable checkpoint of a run, oldest first: one per record of its chain, and a
    ``final`` one for its completion marker (a completed run's records are gone by then).

    Raises:
        CheckpointError: its records do not replay.
    """
    found: list[Checkpoint] = []
    before: RunState | None = None
    if history.records:
        for state, record in checkpoint.states(history.records, run_id=history.run_id):
            found.append(_entry(record, state, before))
            before = state
    if history.marker is not None:
        final = history._final_state()
        entry = _entry({"status": "completed", "at": history.marker.get("at")}, final, before)
        found.append(entry)
    return found


def _entry(record: Mapping[str, Any], state: RunState, before: RunState | None) -> Checkpoint:
    return Checkpoint(
        seq=state.seq,
        turn=state.turns,
        agent_name=state.agent_name,
        at=_at(record.get("at")),
        reason=reason_of(record, state, before),
        messages=len(state.messages),
        last=_last(state.messages),
    )
