"""Store clean-up behind the coordinator's other work: completed runs' markers and records,
fenced copies' writes, forgotten failed runs' records, and ended runs past retention.

A completed run's records are deleted at its end (unless ``init(keep_history=True)``: then
they stay, until retention or ``gc``), after its completion marker
(``runs/<run_id>/done.<epoch>``, kept) that stops it from being claimed again and keeps its
result (:mod:`~raygents.records.keptresult`; its agent actor stored it before the run's
outcome left; the clean-up writes it if it is missing: in a ``memory://`` store only for a run
with records). A failed run keeps its records while it is in the run table, so it can be
resumed, and they are deleted when it is forgotten; a suspended or awaiting-approval run's
records are never deleted here. With a retention (``init(retention=)``), ended runs' records
and kept results go once they ended longer ago than that (:mod:`~raygents.records.retention`):
a few hundred runs per look, a look every minute at most, in the clean-up's thread; batch
jobs' ledger shards go with them, by the start of the run of the job that wrote them.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from raygents.errors import CheckpointError
from raygents.records import checkpoint, codec, rebuild, retention
from raygents.runtime.coordinator.runtable import RunTable
from raygents.stores.base import Store
from raygents.stores.file import FileStore
from raygents.stores.s3 import S3Store

__all__ = ["Chore", "Cleaner"]

log = logging.getLogger("raygents")

Chore = tuple[str, str, Any]
"""``("done", run_id, marker)`` (a completed run: its marker, then its records go),
``("void", run_id, key)`` (a fenced copy's write), ``("drop", run_id, None)`` (a forgotten
failed run's records go) and ``("expire", run_id, None)`` (an ended run past retention: its
records and kept result go)."""
_EXPIRE_BATCH = 500  # runs past retention queued per look, at most
_BATCH = 256  # chores done in one hop to the clean-up thread, at most
_EXPIRE_EVERY_S = 60.0  # looks for runs past retention, at most this far apart


_ENDS = {
    "done": ("completed",),
    "drop": ("failed", "cancelled"),
    "expire": retention.ENDED,
}
"""The statuses a run may have for each chore (another: its id was taken again)."""


class Cleaner:
    """Runs chores one at a time in a thread of its own, in the order they came; a chore
    whose run's id was taken again meanwhile is skipped. Chores that come before an event
    loop runs (at start-up) wait for :meth:`start`."""

    def __init__(
        self,
        store: Store,
        table: RunTable,
        key: bytes | None,
        retention_s: float | None = None,
    ) -> None:
        self.store = store
        self.table = table
        self.key = key
        self.retention_s = retention_s
        self.durable = isinstance(store, (FileStore, S3Store))
        """Whether every completed run gets a marker (for its kept result), records or not."""
        self.keep_history = False
        """Completed runs keep their records (``init(keep_history=True)``)."""
        self._expiring: set[str] = set()
        """Runs queued for expiry, not removed yet."""
        if retention_s is not None:
            table.aging = table.aging if table.aging is not None else []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="raygents-clean")
        self._queue: asyncio.Queue[Chore] | None = None
        self._task: asyncio.Task[None] | None = None
        self._expiry: asyncio.Task[None] | None = None
        self._later: list[Chore] = []

    def add(self, chore: Chore) -> None:
        """Queue a chore."""
        self._later.append(chore)
        self.start()

    def start(self) -> None:
        """Queue the chores that came before the event loop ran (on the event loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._task = loop.create_task(self._clean())
            if self.retention_s is not None:
                self._expiry = loop.create_task(self._expire_loop(self.retention_s))
        for chore in self._later:
            self._queue.put_nowait(chore)
        self._later.clear()

    async def _clean(self) -> None:
        """Take the chores queued by now (up to ``_BATCH``) and do them in one go in the
        clean-up's thread: one hop to the thread per chore could not keep up with thousands
        of runs ending a second, and the queue would grow without bound."""
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            while len(batch) < _BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            jobs = [job for job in map(self._job, batch) if job is not None]
            failed = await loop.run_in_executor(self._thread, _do, jobs)
            for kind, run_id, _ in batch:
                if kind == "expire":
                    if run_id not in failed and run_id in self._expiring:
                        self.table.drop(run_id)
                    self._expiring.discard(run_id)

    def _job(self, chore: Chore) -> tuple[str, Any, tuple[Any, ...]] | None:
        """What a chore does in the clean-up's thread, or None when its run's id was taken
        again meanwhile."""
        kind, run_id, arg = chore
        info = self.table.get(run_id)
        status = None if info is None else info.status
        if kind != "void" and status is not None and status not in _ENDS.get(kind, ()):
            if kind == "expire":
                self._expiring.discard(run_id)
            return None
        if kind == "done":
            return run_id, self._finished_run, (run_id, arg)
        if kind == "void":
            return run_id, self._delete_void, (run_id, arg, status == "completed")
        if kind == "expire":
            return run_id, self._expire, (run_id,)
        return run_id, self._delete_records, (run_id,)

    async def _expire_loop(self, retention_s: float) -> None:
        """Queue ended runs past retention, a bounded batch per look, until stopped."""
        every = min(max(retention_s / 4, 1.0), _EXPIRE_EVERY_S)
        loop = asyncio.get_running_loop()
        while True:
            cutoff = time.time() - retention_s
            try:
                self.expire_due(cutoff)
                await loop.run_in_executor(self._thread, self.expire_ledgers, cutoff)
            except Exception:  # (a bug, or the store's failure, must not stop the clean-up)
                log.exception("the expiry of runs past retention failed")
            await asyncio.sleep(every)

    async def gc(self, older_than_s: float, dry_run: bool) -> list[dict[str, Any]]:
        """``Coordinator.gc`` once the run table is read: a row for each run whose records
        went (or would go), each run kept because it cannot be read, and each batch job's
        expired ledger."""
        table, store = self.table, self.store

        def known(run_id: str) -> tuple[str, float, str] | None:
            info = table.get(run_id)
            if info is None or run_id in table.unread or run_id in table.unreadable:
                return None  # (read from the store: an unreadable run is listed, never aged)
            return info.status, info.updated_at, info.agent_name

        cutoff = retention.cutoff_of(older_than_s)
        loop = asyncio.get_running_loop()
        found, unreadable = await loop.run_in_executor(
            None, retention.scan, store, self.key, cutoff, known
        )
        rows = [u.row() for u in unreadable]
        for expired in found:
            info = table.get(expired.run_id)
            if info is not None and info.status not in retention.ENDED:
                continue  # (resumed meanwhile)
            row = expired.row()
            if not dry_run:
                try:
                    await loop.run_in_executor(
                        None, retention.remove, store, expired.run_id, expired.keys
                    )
                except CheckpointError as exc:
                    row["error"] = str(exc)
                else:
                    table.drop(expired.run_id)
            rows.append(row)
        ledgers = await loop.run_in_executor(None, retention.scan_ledgers, store, cutoff)
        for ledger in ledgers:
            row = ledger.row()
            if not dry_run:
                try:
                    await loop.run_in_executor(None, retention.remove_ledger, store, ledger)
                except CheckpointError as exc:
                    row["error"] = str(exc)
            rows.append(row)
        return rows

    def expire_ledgers(self, cutoff: float) -> None:
        """Delete batch jobs' ledger shards written by runs of a job that started before
        ``cutoff`` (in the clean-up's thread): they hold the items' outputs."""
        for expired in retention.scan_ledgers(self.store, cutoff):
            retention.remove_ledger(self.store, expired)

    def expire_due(self, cutoff: float) -> int:
        """Queue up to ``_EXPIRE_BATCH`` ended runs that ended before ``cutoff`` (from the
        run table, then those it forgot); returns how many were queued."""
        room = _EXPIRE_BATCH - len(self._expiring)
        due = [r for r in self.table.expired(cutoff, room) if r not in self._expiring]
        aging = self.table.aging
        while aging and len(due) < room and aging[0][0] < cutoff:
            run_id = heapq.heappop(aging)[1]
            if run_id not in self.table.runs and run_id not in self._expiring:
                due.append(run_id)
        for run_id in due:
            self._expiring.add(run_id)
            self.add(("expire", run_id, None))
        return len(due)

    def _finished_run(self, run_id: str, done: dict[str, Any]) -> None:
        """A completed run: mark it done in the store (create-only), then delete its records
        (unless :attr:`keep_history`).
        The marker goes first, so a crash or a failed delete leaves records that no claim
        runs again. A run without records needs a marker only for its kept result (in a
        durable store)."""
        prefix = checkpoint.run_prefix(run_id)
        keys = self.store.list(prefix)
        listed = rebuild.listing(run_id, keys)
        if listed.chain or (self.durable and listed.done is None):
            epoch = max(int(done["epoch"]), listed.epoch)
            done_key = rebuild.done_key(run_id, epoch)
            if done_key not in keys:
                try:
                    self.store.put(done_key, codec.encode({**done, "epoch": epoch}, key=self.key))
                except CheckpointError as exc:  # its records still go: nothing to run again
                    log.warning("run %s: cannot store its completion marker: %s", run_id, exc)
        doomed = [] if self.keep_history else listed.records
        if doomed:
            self.store.delete(doomed)
        elif not keys:  # (its agent actor made it a folder, and its marker was not stored)
            self.store.remove_empty_dir(prefix)

    def _delete_void(self, run_id: str, void: str, done: bool) -> None:
        """Delete ``void``, a fenced copy's write, if no valid record builds on it (every
        record, if the run completed; never a completion marker)."""
        keys = rebuild.listing(run_id, self.store.list(checkpoint.run_prefix(run_id))).records
        if not done or self.keep_history:
            keys = [void] if void in keys and void not in checkpoint.chain(keys) else []
        if keys:
            self.store.delete(keys)

    def _expire(self, run_id: str) -> None:
        """Delete an ended run's records and kept result (it is past retention)."""
        retention.remove(self.store, run_id, self.store.list(checkpoint.run_prefix(run_id)))

    def _delete_records(self, run_id: str) -> None:
        """Delete a forgotten failed run's records (never a completion marker)."""
        keys = rebuild.listing(run_id, self.store.list(checkpoint.run_prefix(run_id))).records
        if keys:
            self.store.delete(keys)


def _do(jobs: list[tuple[str, Any, tuple[Any, ...]]]) -> set[str]:
    """Do chores (in the clean-up's thread); the runs whose chore failed."""
    failed = set()
    for run_id, fn, args in jobs:
        try:
            fn(*args)
        except Exception as exc:  # (the store's or a planted key's)
            log.warning("cannot delete the checkpoints of run %s: %s", run_id, exc)
            failed.add(run_id)
    return failed
