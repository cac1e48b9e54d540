"""BatchHandle: a batch job running, one agent over many inputs, each input a run whose
id comes from the job id and the input's index, so that running a job again continues it.

A job has no coordinator of its own: what it did is in the checkpoint store, in its items'
runs and in its ledger of completed items (``jobs/<job_id>/``). Running a job again skips
the items the ledger holds (:mod:`raygents.batch.earlier`), resumes the suspended ones from
their checkpoints, follows those running elsewhere, and starts the rest afresh
(:mod:`raygents.batch.runs`), claiming their run ids in groups: one coordinator call per
group, not per item. :mod:`raygents.batch.start` checks a job's arguments and starts it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from raygents.batch.earlier import EarlierRuns, OnChange
from raygents.batch.fingerprint import input_fingerprint
from raygents.batch.items import (
    BatchItem,
    BatchResult,
    BatchStatus,
    batch_run_id,
    error_message,
    item_from_json,
    length_of,
)
from raygents.batch.output import Shards
from raygents.batch.progress import BatchProgress, Display
from raygents.batch.runs import GroupedStarts, JobRuns
from raygents.core.jobbudget import JobBudget
from raygents.core.messages import Usage
from raygents.errors import (
    RaygentsError,
    RunInDoubt,
    RunInterrupted,
    SuspendedError,
    TooManyRuns,
)

if TYPE_CHECKING:
    from raygents.runtime.driver.handle import RunHandle

__all__ = [
    "BatchHandle",
    "BatchItem",
    "BatchProgress",
    "BatchResult",
    "BatchStatus",
    "batch_run_id",
]

log = logging.getLogger("raygents")

_LAUNCHERS = 4  # threads that start groups of items, resume or look up runs (round trips)
_TICK_S = 1.0  # how often the progress display is refreshed without an item ending
_FLUSH_S = 2.0  # how often the ledger (and output in a store) puts what it has
_SLOT_WAIT_S = (0.05, 1.0)  # an item's first and longest wait for a slot of its tenant


class BatchHandle:
    """A batch job in progress (from :func:`~raygents.batch.start.start_batch`)."""

    def __init__(
        self,
        runs: JobRuns,
        inputs: Iterable[Any],
        concurrency: int,
        sink: Shards | None,
        max_failures: int | None,
        *,
        on_change: OnChange = "error",
        graph_fp: str = "",
        budget: JobBudget | None = None,
    ) -> None:
        self.job_id = runs.job_id
        self._budget = budget or JobBudget()
        self._graph_fp = graph_fp
        self._earlier = EarlierRuns(runs.job_id, on_change=on_change, budget=self._budget)
        self._fps: dict[int, tuple[str, str]] = {}  # (of the items running: for their lines)
        self._runs = runs
        self._inputs = inputs
        self._total = length_of(inputs)
        self._concurrency = concurrency
        self._sink = sink
        self._max_failures = max_failures
        self._lock = threading.Condition()
        self._items: list[BatchItem] = []  # in completion order (without an output)
        self._counts = dict.fromkeys(("completed", "failed", "suspended", "interrupted"), 0)
        self._skipped = 0
        self._usage = Usage()
        self._running: dict[str, RunHandle | None] = {}
        self._started_at = time.monotonic()
        self._stopped: str | None = None
        self._error: BaseException | None = None
        self._ended = False
        self._ledger: Shards | None = None
        self._unsaved: list[dict[str, Any]] = []  # ledger lines whose output is not durable yet
        self._output_error: RaygentsError | None = None
        self._flushed_at = time.monotonic()
        self._display: Display = Display()
        self._stoppers: set[Callable[[], None]] = set()
        self._thread = threading.Thread(target=self._main, name=f"batch-{self.job_id}", daemon=True)

    def _start(self, display: Display, stoppers: set[Callable[[], None]] | None = None) -> None:
        """Start the job's thread, showing its progress on ``display`` (once, from
        :func:`~raygents.batch.start.start_batch`); while it runs, ``stoppers`` (the
        runtime's: what a SIGTERM of the driver stops first) holds its :meth:`suspend`."""
        self._display = display
        self._stoppers = stoppers if stoppers is not None else set()
        self._stoppers.add(self.suspend)
        self._thread.start()

    # --- the public face ----------------------------------------------------------------
    def results(self) -> Iterator[BatchItem]:
        """The items as they end, in completion order, until the job ends (with ``output``,
        read back from the shards this run of the job wrote)."""
        if self._sink is not None:
            yield from self._read_back()
            return
        seen = 0
        while True:
            with self._lock:
                while seen == len(self._items) and not self._ended:
                    self._lock.wait()
                fresh, ended = self._items[seen:], self._ended
            yield from fresh
            seen += len(fresh)
            if ended and not fresh:
                return

    def progress(self) -> BatchProgress:
        """Where the job stands now."""
        with self._lock:
            counts, running = dict(self._counts), len(self._running)
            usage, elapsed = self._usage, time.monotonic() - self._started_at
        ended = sum(counts.values())
        pending = None if self._total is None else max(0, self._total - ended - running)
        if self._ended and pending is not None:
            pending = 0 if self._stopped is None else pending
        rate = ended / elapsed if elapsed > 0 else 0.0
        eta = None if pending is None or rate == 0 else (pending + running) / rate
        return BatchProgress(
            done=counts["completed"],
            failed=counts["failed"],
            stopped=counts["suspended"] + counts["interrupted"],
            running=running,
            pending=pending,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            runs_per_s=rate,
            eta_s=eta,
        )

    def done(self) -> bool:
        """Whether every item the job started has ended."""
        return self._ended

    def result(self, timeout_s: float | None = None) -> BatchResult:
        """Wait for the job to end and return its result.

        Raises:
            TimeoutError: it did not end within ``timeout_s`` (it goes on).
            RaygentsError: the job could not go on (its inputs raised, or Ray failed).
        """
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"batch {self.job_id!r} did not end within {timeout_s} s")
        if self._error is not None:
            raise self._error
        with self._lock:
            items = tuple(sorted(self._items, key=lambda item: item.index))
            counts = self._counts
            return BatchResult(
                job_id=self.job_id,
                items=items,
                completed=counts["completed"],
                skipped=self._skipped,
                failed=counts["failed"],
                suspended=counts["suspended"],
                interrupted=counts["interrupted"],
                usage=self._usage,
                output=None if self._sink is None else self._sink.url,
                stopped=self._stopped,
            )

    def suspend(self, reason: str = "suspended") -> None:
        """Stop the job: no more items start, and those in flight suspend with checkpoints
        (running the job again resumes them). ``result()`` then says ``stopped``."""
        with self._lock:
            if self._stopped is None:
                self._stopped = reason
            handles = [h for h in self._running.values() if h is not None]
        for handle in handles:
            handle.suspend()

    # --- the job's thread ---------------------------------------------------------------
    def _main(self) -> None:
        atexit.register(self._flush)  # (a driver that exits on SIGTERM keeps its ledger)
        try:
            asyncio.run(self._drive())
        except BaseException as exc:
            self._error = exc if isinstance(exc, RaygentsError) else _wrapped(self.job_id, exc)
        finally:
            atexit.unregister(self._flush)
            self._stoppers.discard(self.suspend)
            self._close()
            with self._lock:
                self._ended = True
                self._lock.notify_all()
            self._display.close(self.progress())

    async def _drive(self) -> None:
        loop = asyncio.get_running_loop()
        pool = concurrent.futures.ThreadPoolExecutor(_LAUNCHERS, f"batch-{self.job_id}")
        self._starts = GroupedStarts(self._runs, loop, pool)
        try:
            await loop.run_in_executor(pool, self._read_job)
            ticker = loop.create_task(self._tick(loop, pool))
            try:
                await self._feed(loop, pool)
            finally:
                ticker.cancel()
        finally:
            pool.shutdown(wait=False)

    def _read_job(self) -> None:
        """What earlier runs of the job did: what its output and its ledger of completed
        items hold (:meth:`EarlierRuns.read`), and the statuses the coordinator knows of its
        runs."""
        from raygents.runtime.driver.client import current
        from raygents.stores.open import open_store

        rt = current()
        key = rt.directory.cached_settings().key  # (the coordinator's: it signs the records)
        store = open_store(rt.settings.store)
        self._ledger = self._earlier.read(store, key, self._sink, self._total)
        self._runs.read()
        reached = self._budget.reached()  # (by earlier runs of the job)
        if reached is not None:
            self.suspend(reached)

    async def _feed(
        self, loop: asyncio.AbstractEventLoop, pool: concurrent.futures.Executor
    ) -> None:
        """Start items as slots free up, reading the inputs only when a slot is free; items
        the ledger holds end at once."""
        slots = asyncio.Semaphore(self._concurrency)
        tasks: set[asyncio.Task[None]] = set()
        inputs = iter(self._inputs)
        try:
            for index in itertools.count():
                await slots.acquire()
                if self._stopped is not None:
                    break
                try:
                    item = await loop.run_in_executor(pool, next, inputs, _END)
                except Exception as exc:
                    raise RaygentsError(
                        f"batch {self.job_id!r}: its inputs raised at index {index}: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                if item is _END:
                    break
                run_id = self._run_id(index, item)
                if run_id is None:
                    slots.release()
                    continue
                task = loop.create_task(self._one(loop, pool, index, run_id, item))
                tasks.add(task)
                task.add_done_callback(_ended_with(tasks, slots))
        finally:
            if tasks:
                await asyncio.wait(set(tasks))

    def _run_id(self, index: int, raw: Any) -> str | None:
        """The run id of item ``index``, or None when an earlier run of the job completed it
        with the same input and graph: it then ends at once (see :meth:`EarlierRuns.run_id`)."""
        fps = (input_fingerprint(self._runs.input_of(raw)), self._graph_fp)
        self._fps[index] = fps
        found = self._earlier.run_id(index, fps)
        if isinstance(found, str):
            return found
        self._end(found, logged=True)
        return None

    async def _tick(
        self, loop: asyncio.AbstractEventLoop, pool: concurrent.futures.Executor
    ) -> None:
        """Show progress and flush, every tick; a failed flush is logged and tried again on
        the next tick (what it had not put stays for it)."""
        while True:
            self._display.show(self.progress())
            if time.monotonic() - self._flushed_at >= _FLUSH_S:
                try:
                    await loop.run_in_executor(pool, self._flush)
                except Exception as exc:
                    self._flushed_at = 0.0  # (due again at the next tick)
                    log.warning(
                        "batch %r: flushing its ledger or output failed, trying again: %s",
                        self.job_id,
                        error_message(exc),
                    )
            await asyncio.sleep(_TICK_S)

    def _flush(self) -> None:
        """Make the output durable (synced to disk, or put), then put the ledger lines of the
        items it holds: an item is recorded as completed only once its output is durable.

        Raises:
            RaygentsError: the output could not be made durable (its lines and their ledger
                lines stay for the next flush), or the ledger could not be put.
        """
        self._flushed_at = time.monotonic()
        with self._lock:
            saving, self._unsaved = self._unsaved, []
        if self._sink is not None:
            try:
                self._sink.flush()
            except Exception as exc:
                with self._lock:
                    self._unsaved[:0] = saving
                raise self._unwritable(exc) from exc
        if self._ledger is not None:
            for line in saving:  # (a put that fails keeps the line written: the flush says)
                with contextlib.suppress(RaygentsError):
                    self._ledger.write(line)
            self._ledger.flush()

    def _close(self) -> None:
        """Flush what is left and close the output and the ledger; a failure is the job's
        error (the items whose output it could not make durable are not in the ledger)."""
        self._error = self._error or self._output_error
        try:
            self._flush()
        except Exception as exc:  # (the output's error from _flush, or the ledger's)
            failed = exc if isinstance(exc, RaygentsError) else _wrapped(self.job_id, exc)
            self._error = self._error or failed
            return
        for shards in (self._sink, self._ledger):
            try:
                if shards is not None:
                    shards.close()
            except Exception as exc:
                self._error = self._error or _wrapped(self.job_id, exc)

    def _unwritable(self, exc: BaseException) -> RaygentsError:
        """The job's error when its output cannot be written."""
        assert self._sink is not None
        return RaygentsError(
            f"batch {self.job_id!r}: its output could not be written to {self._sink.url}: "
            f"{error_message(exc)}; the job stopped, and items whose output is not there are "
            "not recorded as completed: run the job again once the output can be written "
            "(their runs' results are kept)"
        )

    async def _one(
        self,
        loop: asyncio.AbstractEventLoop,
        pool: concurrent.futures.Executor,
        index: int,
        run_id: str,
        raw: Any,
    ) -> None:
        with self._lock:
            self._running[run_id] = None
        try:
            item = await self._run_item(loop, pool, index, run_id, raw)
        finally:
            with self._lock:
                self._running.pop(run_id, None)
        self._end(item)

    async def _run_item(
        self,
        loop: asyncio.AbstractEventLoop,
        pool: concurrent.futures.Executor,
        index: int,
        run_id: str,
        raw: Any,
    ) -> BatchItem:
        skipped = False
        try:
            handle, skipped = await self._launch(loop, pool, run_id, raw)
            with self._lock:
                self._running[run_id] = handle
                stopping = self._stopped is not None
            if stopping:
                handle.suspend()
            result = await handle
        except SuspendedError as exc:
            return BatchItem(index, run_id, "suspended", error=error_message(exc))
        except (RunInterrupted, RunInDoubt) as exc:  # (it waits for a person)
            return BatchItem(index, run_id, "interrupted", error=error_message(exc))
        except Exception as exc:
            return BatchItem(index, run_id, "failed", error=error_message(exc))
        return BatchItem(
            index,
            run_id,
            "completed",
            output=result.output_text,
            usage=result.usage,
            skipped=skipped,
        )

    async def _launch(
        self,
        loop: asyncio.AbstractEventLoop,
        pool: concurrent.futures.Executor,
        run_id: str,
        raw: Any,
    ) -> tuple[RunHandle, bool]:
        """Start, resume or follow an item's run, waiting for a slot of its tenant while
        ``max_concurrent_runs`` refuses it (the wait doubles up to a second).

        Raises:
            SuspendedError: the job stopped while the item waited for a slot.
        """
        status = self._runs.status(run_id)
        wait, longest = _SLOT_WAIT_S
        while True:
            try:
                if status in (None, "failed"):
                    return await self._starts.start(run_id, raw)
                return await loop.run_in_executor(pool, self._runs.launch, run_id, raw)
            except TooManyRuns:
                if self._stopped is not None:
                    raise SuspendedError(
                        "the job stopped while the item waited for a slot of its tenant",
                        run_id=run_id,
                    ) from None
            await asyncio.sleep(wait)
            wait = min(wait * 2, longest)

    def _end(self, item: BatchItem, logged: bool = False) -> None:
        """Count an item that ended, keep or write it, and stop the job past max_failures
        (or when its output cannot be written: the item then counts as failed).

        A completed item goes to the ledger at once without an output (the ledger is the
        output); with one, only once its line there is durable (:meth:`_flush`)."""
        saved = item.status == "completed" and not logged and self._ledger is not None
        fps = self._fps.pop(item.index, None)
        entry = item.to_json()
        if fps is not None:  # (what a later run of the job compares its inputs with)
            entry.update(input_fp=fps[0], graph_fp=fps[1])
        if saved and self._sink is None:
            assert self._ledger is not None
            self._ledger.write(entry)
        written = self._earlier.in_output(item)
        unwritable: RaygentsError | None = None
        with self._lock:
            if self._sink is not None and not written:
                line = item.to_json()
                try:
                    self._sink.write(line)
                except Exception as exc:
                    unwritable = self._unwritable(exc)
                    self._output_error = self._output_error or unwritable
                    error = f"its output could not be written: {error_message(exc)}"
                    item = replace(item, status="failed", error=error, skipped=False)
                else:
                    if saved:
                        self._unsaved.append(entry)
            elif self._sink is None:
                self._items.append(item)
            self._count(item, logged)
            stop = self._limit_reached()
            self._lock.notify_all()
        if unwritable is not None:
            self.suspend(f"output: {unwritable.message}")
        elif stop is not None:
            self.suspend(stop)
        self._display.show(self.progress())

    def _count(self, item: BatchItem, logged: bool) -> None:
        """Count an item that ended, and what it spent (called with the lock held)."""
        self._counts[item.status] += 1
        if item.skipped:
            self._skipped += 1
        elif item.usage is not None:
            self._usage = self._usage + item.usage
        if not logged:  # (the ledger's items were counted as the job read it)
            self._budget.add(item.usage)

    def _limit_reached(self) -> str | None:
        """Why the job must stop now: more items failed than ``max_failures``, or the items
        spent its budget; None if neither (called with the lock held)."""
        failed = self._counts["failed"]
        if self._max_failures is not None and failed > self._max_failures:
            return f"max_failures: {failed} items failed"
        return self._budget.reached()

    def _read_back(self) -> Iterator[BatchItem]:
        """Follow the shards this run of the job writes, until it ends."""
        assert self._sink is not None
        seen: dict[str, int] = {}
        while True:
            ended = self._ended
            fresh = False
            for name in list(self._sink.written):
                for line in self._sink.lines(name, seen.get(name, 0)):
                    seen[name] = seen.get(name, 0) + 1
                    fresh = True
                    if line:
                        yield item_from_json(line)
            if ended and not fresh:
                return
            if not fresh:
                with self._lock:
                    self._lock.wait(_TICK_S)


_END = object()


def _ended_with(tasks: set[asyncio.Task[None]], slots: asyncio.Semaphore) -> Any:
    """A done callback that forgets an item's task and frees its slot."""

    def ended(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        slots.release()

    return ended


def _wrapped(job_id: str, exc: BaseException) -> RaygentsError:
    return RaygentsError(f"batch {job_id!r} failed: {type(exc).__name__}: {exc}")
