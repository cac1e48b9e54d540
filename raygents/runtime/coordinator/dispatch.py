"""Dispatching runs: a claim under a new epoch (with the store's fence mark where agent actors
write records themselves), a stopped run's claim with its records, and the cancel of stopped
runs (a ``cancelled`` record stored under a dispatch of its own)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from raygents.errors import CheckpointError
from raygents.records import checkpoint
from raygents.records.runinfo import RunInfo
from raygents.runtime.coordinator.cleanup import Cleaner
from raygents.runtime.coordinator.leases import LeaseBook
from raygents.runtime.coordinator.recordstore import RecordStore
from raygents.runtime.coordinator.runtable import RunTable

__all__ = ["STOPPED", "Dispatcher", "running_dispatch"]

STOPPED = ("suspended", "awaiting_approval", "in_doubt")
_CANCELLER = "raygents:cancel"  # (the owner of the dispatch that stores a stopped run's cancel)
_CANCELLED = "run cancelled"


class Dispatcher:
    """The coordinator's dispatches of runs (see ``Coordinator.claim``).

    Args:
        table: the run table.
        records: the store side.
        cleaner: the store's clean-up (a completed run's records found at a claim go).
        leases: the leases of dispatches (a fence waits for the earlier ones to lapse).
        direct: whether agent actors write records to the store themselves.
        key: the records' signing key.
        finish: records a run's end (as ``Coordinator.finish``).
    """

    def __init__(
        self,
        table: RunTable,
        records: RecordStore,
        cleaner: Cleaner,
        leases: LeaseBook,
        direct: bool,
        key: bytes | None,
        finish: Callable[[RunInfo], None],
    ) -> None:
        self.table = table
        self.records = records
        self.cleaner = cleaner
        self.leases = leases
        self.direct = direct
        self.key = key
        self._finish = finish

    async def dispatch(
        self,
        run_id: str,
        owner: str,
        agent_name: str,
        force: bool = False,
        tenant: str | None = None,
        group: tuple[str | None, str] | None = None,
    ) -> tuple[RunInfo | None, int]:
        """``Coordinator.claim`` of a run whose entry is known (the table has what the store
        says)."""
        info = self.table.get(run_id)
        if not force and info is not None and info.status == "completed":
            return info, 0  # (a completed run is never run again)
        taken, epoch = self.table.claim(run_id, owner, agent_name, force, tenant, group)
        if taken is not None:
            return taken, epoch
        ended = self.table.ended.pop(run_id, None) == epoch - 1 and not force
        if epoch > 1 and self.direct and not ended:  # (no copy of an ended dispatch writes)
            await self.fence(run_id, epoch)
        self.leases.dispatched(run_id)
        return taken, epoch

    async def fence(self, run_id: str, epoch: int) -> None:
        """Fence a run's earlier dispatches: once every lease they hold has lapsed, the
        store gets dispatch ``epoch``'s mark (see :mod:`~raygents.runtime.coordinator.leases`)."""
        lapse = self.leases.lapse_in(run_id)
        if lapse > 0:
            await asyncio.sleep(lapse)
        await self.records.mark_fence(run_id, epoch)

    async def claim_and_load(
        self, run_id: str, owner: str
    ) -> tuple[RunInfo | None, int, list[bytes], RunInfo | None]:
        """``Coordinator.claim_and_load``: a stopped run's dispatch and its records."""
        table = self.table
        await self.records.known(run_id, look=True)
        table.refuse_completed(run_id)
        before = table.get(run_id)
        name = before.agent_name if before is not None else "?"
        taken, epoch = await self.dispatch(run_id, owner, name)  # (in its tenant's slot)
        if taken is not None:
            return taken, 0, [], before
        stopped = before is None or before.status != "running"
        blobs, done = await self.records.load(run_id, stopped)
        if done is not None:  # it completed, and its records were not all deleted
            table.unclaim(run_id, before)
            table.update(
                replace(before, status="completed", last_error=None)
                if before is not None
                else RunInfo(run_id, "completed", "?")
            )
            self.cleaner.add(("done", run_id, self.records.marker(table.runs[run_id])))
            table.refuse_completed(run_id)
        if not blobs:
            table.unclaim(run_id, before)
            return None, 0, [], before
        return None, epoch, blobs, before

    async def cancel_stopped(self, info: RunInfo) -> None:
        """Cancel a stopped run and its stopped agent-as-tool descendants, deepest first (see
        ``Coordinator.cancel``)."""
        for child in self._stopped_children(info.run_id):
            await self._cancel_stopped(child)
        await self._cancel_stopped(info)

    def _stopped_children(self, run_id: str) -> list[RunInfo]:
        """The stopped agent-as-tool descendants of a run, deepest first."""
        found: list[RunInfo] = []
        parents = [run_id]
        while parents:
            parent = parents.pop()
            for info in list(self.table.runs.values()):
                if info.parent == parent and info.status in STOPPED:
                    found.append(info)
                    parents.append(info.run_id)
        return found[::-1]

    async def _cancel_stopped(self, info: RunInfo) -> None:
        """Store a ``cancelled`` record after a stopped run's newest one and end it."""
        run_id, key = info.run_id, self.key
        taken, epoch = self.table.claim(run_id, _CANCELLER, info.agent_name, force=True)
        assert taken is None  # (force: a stopped run is never someone else's)
        try:
            if epoch > 1 and self.direct:
                await self.fence(run_id, epoch)
            blobs, _ = await self.records.load(run_id, True)
            if not blobs:
                raise CheckpointError(f"run {run_id!r} has no records to cancel", run_id=run_id)
            state, _ = checkpoint.restore(blobs, run_id=run_id, key=key)
            state, record = checkpoint.make_record(
                state.evolve(epoch=epoch, pending=()), "cancelled", error=_CANCELLED
            )
            data = checkpoint.encode(record, key=key)
            entry = ("cancelled", state.agent_name, state.turns, _CANCELLED)
            full = record["kind"] == "full"
            await self.records.save(run_id, state.seq, data, entry, True, epoch, full)
        except BaseException:
            self.table.unclaim(run_id, info)
            raise
        ended = replace(info, status="cancelled", last_error=_CANCELLED, seq=state.seq, owner=None)
        self._finish(ended)


def running_dispatch(table: RunTable) -> Callable[[str, int], bool]:
    """Whether ``(run_id, epoch)`` is its running run's newest dispatch (what a lease is
    granted to)."""

    def running(run_id: str, epoch: int) -> bool:
        info = table.get(run_id)
        return info is not None and info.status == "running" and table.epochs.get(run_id) == epoch

    return running
