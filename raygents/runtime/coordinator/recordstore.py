"""The coordinator's side of the checkpoint store: record writes (through, or behind with a
bounded backlog), hot copies, reads of runs' records, and the run table read back from the
store at start-up (:mod:`raygents.records.rebuild` is the pure part).

Store I/O runs in threads, never on the event loop: reads get threads of their own, so they
never queue behind writes.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray

from raygents.errors import CheckpointError
from raygents.records import checkpoint, keptresult, rebuild
from raygents.records.runinfo import (
    Note,
    RecordEntry,
    RunInfo,
    RunSummary,
    table_status,
)
from raygents.runtime.coordinator.cleanup import Cleaner
from raygents.runtime.coordinator.hotrecords import HotRecords
from raygents.runtime.coordinator.runtable import RunTable
from raygents.stores.base import Store

__all__ = ["Note", "RecordStore"]

log = logging.getLogger("raygents")

_ASYNC_BACKLOG = 1_000
_INLINE = 100 * 1024  # Ray's own limit for objects kept in their owner's memory
_REBUILD_INLINE_RUNS = 1_000  # a start-up reads at most this many runs before it returns,
_REBUILD_INLINE_S = 1.0  # and for at most this long; the rest are read behind
_REBUILD_THREADS = 8
_LIST_WAIT_S = 10.0


class RecordStore:
    """Writes and reads runs' records for the coordinator, keeping ``table`` and ``hot`` in
    step with the store; queues clean-up on ``cleaner``.

    Args:
        durability: ``sync``, ``async`` (writes that are not ``durable`` go behind) or ``exit``.
        direct: agent actors write to the store themselves (running runs' records in
            ``sync`` and ``async`` mode, completed runs' markers).
    """

    def __init__(
        self,
        store: Store,
        table: RunTable,
        hot: HotRecords,
        cleaner: Cleaner,
        *,
        key: bytes | None,
        durability: str,
        direct: bool,
    ) -> None:
        self.store = store
        self.table = table
        self.hot = hot
        self.cleaner = cleaner
        self.key = key
        self.durability = durability
        self.direct = direct
        self.list_wait_s = _LIST_WAIT_S
        """How long a listing of the run table waits for a rebuild still reading."""
        self.rebuild_error: str | None = None
        """Why the store could not be listed at start-up (the table then starts empty)."""
        self._reads = ThreadPoolExecutor(4, thread_name_prefix="raygents-read")
        self._backlog: asyncio.Queue[tuple[str, bytes]] | None = None
        self._rebuilt: queue.SimpleQueue[tuple[str, rebuild.Found | None]] = queue.SimpleQueue()
        self._rebuild_done = threading.Event()

    # --- writes -------------------------------------------------------------------------
    async def save(
        self,
        run_id: str,
        seq: int,
        data: bytes,
        info: RecordEntry,
        durable: bool,
        epoch: int,
        full: bool,
    ) -> None:
        """Store one record and enter ``info`` in the table (see ``Coordinator.save``)."""
        key = checkpoint.key_for(run_id, seq, epoch)
        self.table.fence(run_id, seq, epoch, key)
        self.table.note(run_id, seq, info)
        if durable and info[0] != "running":
            self.table.ended[run_id] = epoch
        if self.durability == "async" and not durable:
            self.keep_hot(run_id, seq, epoch, data, full)
            await self._enqueue(key, data)
            return
        try:
            await asyncio.to_thread(self.store.put, key, data)
        except BaseException:
            self.hot.drop(run_id)  # no longer the same chain as the store's
            raise
        self.keep_hot(run_id, seq, epoch, data, full)

    def noted(self, notes: list[Note]) -> None:
        """Enter records agent actors wrote themselves; those of a fenced dispatch change
        nothing, and go if void."""
        for run_id, seq, epoch, data, info, full in notes:
            if epoch < self.table.epochs.get(run_id, 0):
                self.discard(run_id, checkpoint.key_for(run_id, seq, epoch))
                continue
            old = self.table.get(run_id)
            if old is None or old.seq < seq:
                self.table.note(run_id, seq, info)
            elif old.status == "completed":
                continue  # a report that came after the run's end: its records are going
            self.keep_hot(run_id, seq, epoch, data, full, told=True)

    def discard(self, run_id: str, key: str) -> None:
        """Delete a fenced copy's write ``key`` unless the run's valid records build on it."""
        self.cleaner.add(("void", run_id, key))

    def keep_hot(
        self, run_id: str, seq: int, epoch: int, data: bytes, full: bool, told: bool = False
    ) -> None:
        """Keep a record hot: small ones in this process (as Ray keeps small objects with
        their owner anyway), large ones in the object store."""
        if not self.hot.takes(run_id, full):
            return  # its chain starts in the store
        blob = data if len(data) < _INLINE else ray.put(data)
        self.hot.keep(run_id, seq, epoch, blob, len(data), full, told)

    def ended(self, info: RunInfo, result: RunSummary | None = None) -> None:
        """A run ended: a completed run's hot records go and its clean-up is queued; a
        stopped run's are parked."""
        if info.status == "completed":
            self.hot.drop(info.run_id)
            self.cleaner.add(("done", info.run_id, self.marker(info, result)))
        else:
            self.hot.park(info.run_id)

    def marker(self, info: RunInfo, result: RunSummary | None = None) -> dict[str, Any]:
        """The completion marker of a run, for its dispatch in the table."""
        return keptresult.done_marker(info, self.table.epochs.get(info.run_id, 0), result)

    async def mark_fence(self, run_id: str, epoch: int) -> None:
        """Create the fence mark of a run's dispatch ``epoch`` (failures are logged: its
        records still void a fenced copy's)."""
        mark = checkpoint.fence_key(run_id, epoch)
        try:
            await asyncio.get_running_loop().run_in_executor(self._reads, self.store.mark, mark)
        except CheckpointError as exc:
            log.warning("cannot mark run %s's dispatch %d in the store: %s", run_id, epoch, exc)

    async def _enqueue(self, key: str, data: bytes) -> None:
        if self._backlog is None:
            self._backlog = asyncio.Queue(_ASYNC_BACKLOG)
            asyncio.get_running_loop().create_task(self._drain())
        await self._backlog.put((key, data))

    async def _drain(self) -> None:
        assert self._backlog is not None
        while True:
            key, data = await self._backlog.get()
            try:
                await asyncio.to_thread(self.store.put, key, data)
            except CheckpointError as exc:
                log.error("write-behind checkpoint %s failed: %s", key, exc)
                self.hot.drop(key.split("/")[1])  # the store's chain has a gap now
            finally:
                self._backlog.task_done()

    # --- reads --------------------------------------------------------------------------
    async def load(self, run_id: str, stopped: bool | None) -> tuple[list[bytes], str | None]:
        """The run's records (see ``Coordinator.load``), and its completion marker if the
        store was read and has one."""
        chain = self.hot.get(run_id)
        if stopped is None:
            info = self.table.get(run_id)
            stopped = info is None or info.status != "running"
        if chain is not None and not chain.told and (stopped or not self.direct):
            return [b if isinstance(b, bytes) else await b for b in chain.blobs()], None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reads, self.read_marked_run, run_id)

    def read_run(self, run_id: str) -> list[bytes]:
        """A run's valid stored records, oldest first (blocking)."""
        return self.read_marked_run(run_id)[0]

    async def kept_result(self, run_id: str) -> RunSummary | None:
        """A completed run's result as its marker in the store keeps it, or None."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reads, self.read_kept, run_id)

    def read_kept(self, run_id: str) -> RunSummary | None:
        """:meth:`kept_result` (blocking); a marker that cannot be read gives None (logged)."""
        listed = rebuild.listing(run_id, self.store.list(checkpoint.run_prefix(run_id)))
        if listed.done is None:
            return None
        try:
            data = self.store.get(listed.done)
            if data is None:
                return None
            marker = keptresult.read_marker(data, key=self.key, run_id=run_id, source=listed.done)
        except (CheckpointError, ValueError) as exc:
            log.warning("run %s: its kept result cannot be read: %s", run_id, exc)
            return None
        return keptresult.summary(marker)

    def read_marked_run(self, run_id: str) -> tuple[list[bytes], str | None]:
        """:meth:`read_run`, and the run's completion marker if it has one (an agent-as-tool
        parent resumes a child whose records a crash kept, marked or not)."""
        listed = rebuild.listing(run_id, self.store.list(checkpoint.run_prefix(run_id)))
        found = (self.store.get(key) for key in listed.chain)
        return [data for data in found if data is not None], listed.done

    def read_history(self, run_id: str) -> tuple[list[bytes], bytes | None]:
        """A run's valid stored records, oldest first, and its completion marker's bytes if
        it has one (blocking): what ``raygents.history`` reads."""
        blobs, done = self.read_marked_run(run_id)
        marker = self.store.get(done) if done is not None else None
        return blobs, marker

    # --- the run table, read back from the store ---------------------------------------
    def rebuild_table(self) -> None:
        """Rebuild the run table from the store, run by run; never raises.

        One listing gives every run's epoch and whether it completed; then each run's newest
        record (or completion marker) is read, here for up to ``_REBUILD_INLINE_RUNS`` runs
        and ``_REBUILD_INLINE_S``, and the rest in a background thread with
        ``_REBUILD_THREADS`` reads at a time (a run asked for meanwhile is read on demand). A
        run whose keys or records cannot be read is listed as failed, saying why.
        """
        try:
            keys = self.store.list("runs/")
        except Exception as exc:
            log.error("cannot list checkpoints to rebuild the run table: %s", exc)
            self.rebuild_error = f"{type(exc).__name__}: {exc}"
            self._rebuild_done.set()
            return
        unread = self.table.unread
        for run_id, listed in rebuild.group(keys).items():
            if listed.epoch:
                self.table.epochs[run_id] = listed.epoch
            unread[run_id] = listed
        deadline = time.monotonic() + _REBUILD_INLINE_S
        for count, listed in enumerate(list(unread.values())):
            if count >= _REBUILD_INLINE_RUNS or time.monotonic() > deadline:
                break
            del unread[listed.run_id]
            self._settle(listed, rebuild.read(self.store, listed, self.key))
        rest = list(unread.values())
        if not rest:
            self._rebuild_done.set()
            return
        log.info("reading %d more runs' records behind the start-up", len(rest))
        reader = threading.Thread(
            target=self._read_rest, args=(rest,), name="raygents-rebuild", daemon=True
        )
        reader.start()

    def _read_rest(self, rest: list[rebuild.Listing]) -> None:
        """Read runs the start-up left (a background thread): each lands in ``_rebuilt``."""
        try:

            def read(listed: rebuild.Listing) -> tuple[str, rebuild.Found | None]:
                if listed.run_id not in self.table.unread:  # read on demand meanwhile
                    return listed.run_id, None
                return listed.run_id, rebuild.read(self.store, listed, self.key)

            with ThreadPoolExecutor(
                _REBUILD_THREADS, thread_name_prefix="raygents-rebuild"
            ) as pool:
                for found in pool.map(read, rest):
                    self._rebuilt.put(found)
        except Exception:  # runs not read stay so: each is read when asked for
            log.exception("the background rebuild of the run table stopped")
        finally:
            self._rebuild_done.set()

    def absorb(self) -> None:
        """Enter the runs the background rebuild has read since (on the event loop), and
        queue the clean-up the start-up found."""
        while True:
            try:
                run_id, found = self._rebuilt.get_nowait()
            except queue.Empty:
                break
            listed = self.table.unread.pop(run_id, None)
            if listed is not None:  # (nothing newer came meanwhile)
                self._settle(listed, found)
        self.cleaner.start()

    def _settle(self, listed: rebuild.Listing, found: rebuild.Found | None) -> None:
        """Put a run read back from the store in the table, or keep it unread if the store
        failed (it is read again when asked for)."""
        if found is not None and found.status == rebuild.UNKNOWN:
            self.table.unread[listed.run_id] = listed
        elif found is not None:
            self._enter(listed.run_id, found)

    def _enter(self, run_id: str, found: rebuild.Found) -> None:
        info = RunInfo(
            run_id,
            table_status(found.status),
            found.agent_name,
            found.turns,
            updated_at=found.at or time.time(),
            last_error=found.error,
            seq=found.seq,
            tenant=found.tenant,
            started_at=found.started_at,
            parent=found.parent,
        )
        if found.unreadable:
            log.error("run %s is listed as %s: %s", run_id, found.status, found.error)
        self.table.enter(info, unreadable=found.unreadable)  # (results are read when asked)
        leftover = found.leftovers and not self.cleaner.keep_history
        if found.status == "completed" and leftover and not found.unreadable:
            self.cleaner.add(("done", run_id, self.marker(info)))  # its clean-up did not happen

    async def known(self, run_id: str, look: bool = False) -> None:
        """Make sure the table has what the store says of ``run_id``: read it now if the
        rebuild has not yet, or (``look``) if the table may have forgotten it."""
        self.absorb()
        table = self.table
        if run_id in table.runs:
            return
        loop = asyncio.get_running_loop()
        listed = table.unread.get(run_id)
        if listed is None:
            if not (look and table.forgot):
                return
            prefix = checkpoint.run_prefix(run_id)
            keys = await loop.run_in_executor(self._reads, self.store.list, prefix)
            if not keys or run_id in table.runs or run_id in table.unread:
                return
            listed = table.unread[run_id] = rebuild.listing(run_id, keys)
            table.epochs[run_id] = max(table.epochs.get(run_id, 0), listed.epoch)
        found = await loop.run_in_executor(self._reads, rebuild.read, self.store, listed, self.key)
        if table.unread.pop(run_id, None) is not None:
            self._settle(listed, found)

    async def rebuilt(self, timeout_s: float = 0.0) -> bool:
        """Whether the table holds every run the store listed at start-up, waiting up to
        ``timeout_s`` for a rebuild still reading."""
        if not self._rebuild_done.is_set() and timeout_s > 0:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._rebuild_done.wait, timeout_s)
        self.absorb()
        return not self.table.unread
