"""The run table: each run's entry, its dispatch epochs, session locks, waits for runs' ends,
and the bounds on ended runs and on the results kept for ``attach``. Bookkeeping only: no
Ray, no store (the coordinator reads and writes the store around it).

The table keeps every running, suspended and awaiting-approval run (they are resumable), and
the newest ``completed_kept`` completed and ``failed_kept`` failed runs; older ended runs are
forgotten, oldest first (with a retention, completed runs forgotten so are remembered in
``aging``, by their end, up to ``_AGING_MAX`` of them, for the coordinator's expiry). Results
of completed runs are kept up to ``max_count`` of them and ``max_bytes`` in all.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from raygents.errors import CheckpointError, TooManyRuns, UserError
from raygents.records import rebuild
from raygents.records.runinfo import RecordEntry, RunInfo, RunSummary, parent_of, table_status
from raygents.runtime.coordinator.admission import DEFAULT_TENANT, Admission
from raygents.runtime.link.coordinator_client import Listed

__all__ = ["KeptResults", "RunTable"]

log = logging.getLogger("raygents")

_COMPLETED_KEPT = 10_000  # completed runs in the run table, at most (the newest)
_FAILED_KEPT = 1_000  # failed runs in the run table (and their records in the store), at most
_RESULTS_KEPT = 10_000
_RESULTS_BYTES = 64 * 1024 * 1024  # estimated: the text of their outputs and messages
_AGING_MAX = 100_000  # forgotten completed runs remembered for expiry, at most
_ENDED = ("completed", "failed", "cancelled")
_IN_FLIGHT = ("running", "pending")  # (what a wait for the run's end waits on)


class KeptResults:
    """Completed runs' results for ``attach``, within a count and an estimate of their bytes;
    the oldest go first."""

    def __init__(self, max_count: int = _RESULTS_KEPT, max_bytes: int = _RESULTS_BYTES) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._results: OrderedDict[str, RunSummary] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self.size = 0
        """Estimated bytes of the results kept."""

    def __iter__(self) -> Iterator[str]:
        return iter(self._results)

    def __len__(self) -> int:
        return len(self._results)

    def get(self, run_id: str) -> RunSummary | None:
        """The run's result, or ``None``."""
        return self._results.get(run_id)

    def keep(self, run_id: str, result: RunSummary) -> None:
        """Keep a result (one too large alone is not kept), letting the oldest go."""
        self.drop(run_id)
        size = result_size(result)
        if size > self.max_bytes:
            log.info("run %s: its result (~%d bytes) is too large to keep", run_id, size)
            return
        self._results[run_id] = result
        self._sizes[run_id] = size
        self.size += size
        while len(self._results) > self.max_count or self.size > self.max_bytes:
            self.drop(next(iter(self._results)))

    def drop(self, run_id: str) -> None:
        """Let the run's result go."""
        self._results.pop(run_id, None)
        self.size -= self._sizes.pop(run_id, 0)


def result_size(result: Any) -> int:
    """A cheap estimate of a kept result's bytes: its texts, plus a little for each part."""
    if not isinstance(result, dict):
        return 256
    size = 256 + len(str(result.get("final_output") or ""))
    for message in result.get("messages") or ():
        size += 64 + len(getattr(message, "content", None) or "")
        for call in getattr(message, "tool_calls", ()):
            size += 64 + len(call.arguments)
    return size


def _ignore(run_id: str, records_go: bool) -> None:
    pass


class RunTable:
    """Runs by id, with their dispatch epochs, sessions and waiters.

    Args:
        on_forget: called as ``on_forget(run_id, records_go)`` for each ended run forgotten
            beyond the caps; ``records_go``: it failed (and was readable), so its records in
            the store go too.
    """

    def __init__(
        self,
        on_forget: Callable[[str, bool], None] = _ignore,
        max_concurrent_runs: int | None = None,
    ) -> None:
        self.runs: dict[str, RunInfo] = {}
        self.admission = Admission(max_concurrent_runs)
        """Runs in flight per tenant: a claim past the limit raises ``TooManyRuns``."""
        self.epochs: dict[str, int] = {}
        """Each run's newest dispatch."""
        self.ended: dict[str, int] = {}
        """Runs whose dispatch (this epoch) stored a stopping record: it writes no more."""
        self.sessions: dict[str, str] = {}
        """Session id -> the run holding it."""
        self.unread: dict[str, rebuild.Listing] = {}
        """Runs listed in the store at start-up whose newest record is not read yet."""
        self.unreadable: set[str] = set()
        """Runs in the table (as failed) only because their keys or records cannot be read."""
        self.results = KeptResults()
        self.completed_kept = _COMPLETED_KEPT
        self.failed_kept = _FAILED_KEPT
        self.forgot = False
        """Whether ended runs were forgotten: a claim of an unknown id then looks in the store."""
        self.aging: list[tuple[float, str]] | None = None
        """With a retention: ``(ended_at, run_id)`` of completed runs forgotten beyond the caps
        (their kept results stay in the store), a heap with the oldest end first (a run
        forgotten early may end later than one forgotten after it: a writer's clock ahead);
        never a run whose marker cannot be read (its end is not known)."""
        self._on_forget = on_forget
        self._done: dict[str, asyncio.Event] = {}
        self._completed: dict[str, None] = {}
        self._failed: dict[str, None] = {}
        """Completed and failed runs, in the order they ended (forgotten oldest first)."""

    def get(self, run_id: str) -> RunInfo | None:
        """The run's entry, or ``None``."""
        return self.runs.get(run_id)

    # --- entries ------------------------------------------------------------------------
    def update(self, info: RunInfo) -> None:
        """Enter news of a run (its attempts never go down; its owner, parent and event count
        stay unless named; when it started stays)."""
        old = self.runs.get(info.run_id)
        if old is not None:
            info = replace(
                info,
                attempts=max(info.attempts, old.attempts),
                owner=info.owner or old.owner,
                tenant=info.tenant or old.tenant,
                started_at=old.started_at if old.started_at is not None else info.started_at,
                parent=info.parent or old.parent,
                group_id=info.group_id or old.group_id,
                trace_id=info.trace_id or old.trace_id,
                events=info.events or old.events,
                updated_at=time.time(),
            )
        else:
            if self.unread:  # news of a run not read yet: newer than its records
                self.unread.pop(info.run_id, None)
            info = replace(info, updated_at=time.time())
        self.runs[info.run_id] = info
        if info.status not in _IN_FLIGHT:
            self.admission.release(info.run_id)
        if old is None or old.status != info.status:
            self._track(info)

    def note(self, run_id: str, seq: int, info: RecordEntry) -> None:
        """Enter a record's ``(status, agent, turns, last error)`` as the run's entry."""
        status, agent_name, turns, error = info
        entry = RunInfo(run_id, table_status(status), agent_name, turns, last_error=error, seq=seq)
        self.update(entry)

    def enter(
        self, info: RunInfo, *, unreadable: bool = False, result: RunSummary | None = None
    ) -> None:
        """Put a run read back from the store in the table (``result``: a completed run's)."""
        if unreadable:
            self.unreadable.add(info.run_id)
        self.runs[info.run_id] = info
        if result is not None:
            self.results.keep(info.run_id, result)
        self._track(info)

    def listing(
        self, status: str | None, complete: bool, where: Listed | None = None
    ) -> list[RunInfo]:
        """Runs in the table, oldest update first, optionally of one status; unless
        ``complete``, runs not read yet are listed as ``"unknown"`` when every status, or
        ``"unknown"``, is asked for. ``where`` narrows it (see :class:`Listed`)."""
        found = [r for r in self.runs.values() if status is None or r.status == status]
        if where is not None:
            found = [r for r in found if where.takes(r)]
        else:
            found.sort(key=lambda r: r.updated_at)
        if not complete and status in (None, rebuild.UNKNOWN):
            found += [
                RunInfo(
                    run_id,
                    "unknown",
                    "?",
                    updated_at=0.0,
                    last_error="not read yet: the coordinator is still reading the run table "
                    "back from the store (it restarted), or the store failed; ask again",
                )
                for run_id in list(self.unread)
                if where is None or where.takes_unread(run_id)
            ]
        if where is not None:
            found = heapq.nlargest(where.newest, found, key=lambda r: r.updated_at)[::-1]
        return found

    # --- dispatches ---------------------------------------------------------------------
    def claim(
        self,
        run_id: str,
        owner: str,
        agent_name: str,
        force: bool = False,
        tenant: str | None = None,
        group: tuple[str | None, str] | None = None,
    ) -> tuple[RunInfo | None, int]:
        """Dispatch a run for ``owner``: ``(None, epoch)`` with a new epoch, or the entry of
        another owner running it and 0 (unless ``force``). ``group``: the ``(group_id,
        trace_id)`` of the ``trace()`` block it was started in.

        A run (not ``force``: an agent-as-tool child is part of its parent's) takes one of
        its tenant's slots of runs in flight, kept from an earlier claim of the same run.

        Raises:
            TooManyRuns: the tenant has no slot left; nothing changed.
        """
        info = self.runs.get(run_id)
        busy = info is not None and info.status == "running" and info.owner not in (None, owner)
        if busy and not force:
            return info, 0
        tenant = tenant or (info.tenant if info is not None else None)
        quota, limit = tenant or DEFAULT_TENANT, self.admission.limit
        if not force and limit is not None and not self.admission.admit(run_id, quota):
            raise TooManyRuns(tenant=quota, limit=limit, run_id=run_id)
        epoch = self.epochs.get(run_id, 0) + 1
        self.epochs[run_id] = epoch
        # (an entry without a dispatch comes from a record that arrived before this claim)
        attempts = (info.attempts + 1) if info is not None and epoch > 1 else 1
        self.update(
            RunInfo(
                run_id,
                "running",
                agent_name,
                info.turns if info else 0,
                attempts,
                owner=owner,
                seq=info.seq if info else 0,
                tenant=tenant,
                started_at=time.time(),  # (an earlier dispatch's time stays: see update)
                group_id=group[0] if group else None,
                trace_id=group[1] if group else None,
            )
        )
        return None, epoch

    def adopt(self, run_id: str) -> None:
        """Name the parent of a claimed agent-as-tool child run, found by its id among the
        runs in the table (its parent is running: it claims its children)."""
        info = self.runs.get(run_id)
        if info is None or info.parent is not None:
            return
        parent = parent_of(run_id, self.runs)
        if parent is not None:
            self.runs[run_id] = replace(info, parent=parent)

    def unclaim(self, run_id: str, before: RunInfo | None) -> None:
        """Put back a run's entry as it was before a claim its driver did not go on with."""
        if before is None or before.status not in _IN_FLIGHT:
            self.admission.release(run_id)
        if before is None:
            self.runs.pop(run_id, None)
            self._untrack(run_id)
        else:
            self.runs[run_id] = before
            self._track(before)

    def fence(self, run_id: str, seq: int, epoch: int, key: str) -> None:
        """Refuse a record of an earlier dispatch than the run's newest.

        Raises:
            CheckpointError: the record's copy of the run is fenced.
        """
        current = self.epochs.get(run_id, 0)
        if epoch < current:
            raise CheckpointError(
                f"run {run_id!r}: checkpoint {seq} comes from dispatch {epoch}, but the run was "
                f"dispatched again ({current}); this copy of the run is fenced",
                run_id=run_id,
                key=key,
            )

    def refuse_completed(self, run_id: str) -> None:
        """Raise if the run completed.

        Raises:
            UserError: it did: a completed run is never run again.
        """
        info = self.runs.get(run_id)
        if info is not None and info.status == "completed":
            raise UserError(
                f"run {run_id!r} already completed, and a completed run is never run again; "
                f"attach({run_id!r}) gives its result while the coordinator keeps it. Start "
                "a new run (with another run_id) to go on from its output",
                run_id=run_id,
            )

    # --- ends, sessions and waits --------------------------------------------------------
    def finish(self, info: RunInfo, result: RunSummary | None = None) -> None:
        """Record a run's end: its sessions are released, its result kept, its waiters woken."""
        self.update(info)
        for session_id, holder in list(self.sessions.items()):
            if holder == info.run_id:
                del self.sessions[session_id]
        if result is not None:
            self.results.keep(info.run_id, result)
        event = self._done.pop(info.run_id, None)
        if event is not None:
            event.set()
        if info.status == "completed":
            self.ended.pop(info.run_id, None)

    def lock_session(self, session_id: str, run_id: str) -> str | None:
        """Take a session for a run; returns the run holding it if another one does."""
        holder = self.sessions.get(session_id)
        if holder is not None and holder != run_id:
            info = self.runs.get(holder)
            if info is not None and info.status in _IN_FLIGHT:
                return holder
        self.sessions[session_id] = run_id
        return None

    async def wait(self, run_id: str) -> tuple[RunInfo | None, RunSummary | None]:
        """Wait until a running run ends; its final entry and result (if kept)."""
        info = self.runs.get(run_id)
        if info is not None and info.status in _IN_FLIGHT:
            event = self._done.setdefault(run_id, asyncio.Event())
            await event.wait()
        return self.runs.get(run_id), self.results.get(run_id)

    # --- bounds -------------------------------------------------------------------------
    def _track(self, info: RunInfo) -> None:
        """Follow the order in which runs end; forget the oldest ended runs beyond the caps."""
        run_id = info.run_id
        self._untrack(run_id, keep_unreadable=info.status in _ENDED)
        if info.status not in _ENDED:
            return
        ended = self._completed if info.status == "completed" else self._failed
        ended[run_id] = None
        cap = self.completed_kept if ended is self._completed else self.failed_kept
        if len(ended) > cap + cap // 10:  # (a batch at a time: each sorts them)
            self._prune(ended, cap)

    def _untrack(self, run_id: str, keep_unreadable: bool = False) -> None:
        self._completed.pop(run_id, None)
        self._failed.pop(run_id, None)
        if not keep_unreadable:
            self.unreadable.discard(run_id)

    def _prune(self, ended: dict[str, None], cap: int) -> None:
        """Forget the oldest of ``ended`` beyond ``cap``; a forgotten failed run's records go
        (an unreadable one's stay: they are not raygents' to judge)."""
        oldest = sorted(ended, key=lambda r: self.runs[r].updated_at if r in self.runs else 0.0)
        for run_id in oldest[: len(ended) - cap]:
            del ended[run_id]
            info = self.runs.pop(run_id, None)
            self.epochs.pop(run_id, None)
            self.ended.pop(run_id, None)
            self.results.drop(run_id)
            failed = info is not None and info.status in ("failed", "cancelled")
            aging = self.aging
            if (
                info is not None
                and not failed
                and run_id not in self.unreadable  # (its end is not known)
                and aging is not None
                and len(aging) < _AGING_MAX
            ):
                heapq.heappush(aging, (info.updated_at, run_id))
            self._on_forget(run_id, failed and run_id not in self.unreadable)
            self.unreadable.discard(run_id)
        self.forgot = True

    # --- retention ----------------------------------------------------------------------
    def expired(self, cutoff: float, limit: int) -> list[str]:
        """Up to ``limit`` ended runs (readable ones) that ended before ``cutoff``."""
        found: list[str] = []
        for ended in (self._completed, self._failed):
            for run_id in ended:
                info = self.runs.get(run_id)
                if info is None or info.updated_at >= cutoff or run_id in self.unreadable:
                    continue
                found.append(run_id)
                if len(found) >= limit:
                    return found
        return found

    def drop(self, run_id: str) -> None:
        """Forget an ended run whose records and kept result are gone from the store."""
        info = self.runs.get(run_id)
        if info is None or info.status not in _ENDED:
            return
        del self.runs[run_id]
        self.epochs.pop(run_id, None)
        self.ended.pop(run_id, None)
        self.results.drop(run_id)
        self._untrack(run_id)
        self.forgot = True  # (a claim of its id looks in the store, in case a key stayed)
        self._on_forget(run_id, False)  # (its hot records go; its stored ones are gone)
