"""Store clean-up behind the coordinator's other work: completed runs' markers and records,
fenced copies' writes, forgotten failed runs' records.

Retention: a completed run's records are deleted at its end, after a small completion marker
(``runs/<run_id>/done.<epoch>``, kept) that stops it from being claimed again (its agent actor
stored it before the run's outcome left; the clean-up writes it if it is missing); a failed run
keeps its records while it is in the run table, so it can be resumed, and they are deleted
when it is forgotten; a suspended or awaiting-approval run's records are never deleted here.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from raygents import checkpoint, codec
from raygents.errors import CheckpointError
from raygents.runtime import rebuild
from raygents.runtime.runtable import RunTable
from raygents.store import FileStore, Store

__all__ = ["Chore", "Cleaner"]

log = logging.getLogger("raygents")

Chore = tuple[str, str, Any]
"""``("done", run_id, marker)`` (a completed run: its marker, then its records go),
``("void", run_id, key)`` (a fenced copy's write) and ``("drop", run_id, None)`` (a forgotten
failed run's records go)."""


class Cleaner:
    """Runs chores one at a time in a thread of its own, in the order they came; a chore
    whose run's id was taken again meanwhile is skipped. Chores that come before an event
    loop runs (at start-up) wait for :meth:`start`."""

    def __init__(self, store: Store, table: RunTable, key: bytes | None) -> None:
        self.store = store
        self.table = table
        self.key = key
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="raygents-clean")
        self._queue: asyncio.Queue[Chore] | None = None
        self._task: asyncio.Task[None] | None = None
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
        for chore in self._later:
            self._queue.put_nowait(chore)
        self._later.clear()

    async def _clean(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            kind, run_id, arg = await self._queue.get()
            info = self.table.get(run_id)
            status = None if info is None else info.status
            ended = ("completed",) if kind == "done" else ("failed", "cancelled")
            if kind != "void" and status is not None and status not in ended:
                continue  # its id was taken again meanwhile
            if kind == "done":
                args: tuple[Any, ...] = (self._finished_run, run_id, arg)
            elif kind == "void":
                args = (self._delete_void, run_id, arg, status == "completed")
            else:
                args = (self._delete_records, run_id)
            try:
                await loop.run_in_executor(self._thread, *args)
            except Exception as exc:  # (the store's or a planted key's)
                log.warning("cannot delete the checkpoints of run %s: %s", run_id, exc)

    def _finished_run(self, run_id: str, done: dict[str, Any]) -> None:
        """A completed run: mark it done in the store (create-only), then delete its records.
        The marker goes first, so a crash or a failed delete leaves records that no claim
        runs again. A run without records needs no marker."""
        prefix = checkpoint.run_prefix(run_id)
        keys = self.store.list(prefix)
        listed = rebuild.listing(run_id, keys)
        if listed.chain:
            epoch = max(int(done["epoch"]), listed.epoch)
            done_key = rebuild.done_key(run_id, epoch)
            if done_key not in keys:
                try:
                    self.store.put(done_key, codec.encode({**done, "epoch": epoch}, key=self.key))
                except CheckpointError as exc:  # its records still go: nothing to run again
                    log.warning("run %s: cannot store its completion marker: %s", run_id, exc)
        doomed = listed.records
        if doomed:
            self.store.delete(doomed)
        elif not keys and isinstance(self.store, FileStore):  # its agent actor made it a folder
            self.store.remove_empty_dir(prefix)

    def _delete_void(self, run_id: str, void: str, done: bool) -> None:
        """Delete ``void``, a fenced copy's write, if no valid record builds on it (every
        record, if the run completed; never a completion marker)."""
        keys = rebuild.listing(run_id, self.store.list(checkpoint.run_prefix(run_id))).records
        if not done:
            keys = [void] if void in keys and void not in checkpoint.chain(keys) else []
        if keys:
            self.store.delete(keys)

    def _delete_records(self, run_id: str) -> None:
        """Delete a forgotten failed run's records (never a completion marker)."""
        keys = rebuild.listing(run_id, self.store.list(checkpoint.run_prefix(run_id))).records
        if keys:
            self.store.delete(keys)
