"""RecordWriter: an agent actor's checkpoint records, put in the store itself or by the coordinator.

Records of running runs go straight from the agent actor to the store: an S3 store from any
node, a file store on its own node (reported to the coordinator in batches, see
:mod:`~raygents.runtime.actor.reports`), on the event loop (small file puts) or in worker threads.
With a ``memory://`` store, and for the records that stop a run, the coordinator stores them.
A run's records chain: each is put after the run's previous one.

Only a record that gates something is checked against fencing after its put (see
:func:`_fenced`): in ``sync`` mode the intent of a tool batch, which its tools wait for. A
batch's result record, the journal records of its slow calls and every ``async`` record are
put alone (one request): nothing waits on their checks, a fenced copy is stopped at its next
checked record or refused its completion marker, and the coordinator voids the reports of an
earlier dispatch by their epoch. While the run's lease holds (see
:mod:`~raygents.runtime.actor.leases`), a checked record is put alone too, and so is a
completed run's marker: no later dispatch can have marked the store yet.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import ray

from raygents.core.envelope import Outcome, RunState
from raygents.core.events import RunEvent
from raygents.errors import CheckpointError, UserError
from raygents.records import checkpoint, codec, rebuild
from raygents.records.keptresult import done_marker
from raygents.records.runinfo import RecordEntry, ended_info, run_summary
from raygents.runtime.actor.leases import Leases, clock
from raygents.runtime.actor.reports import Reports
from raygents.runtime.link.directory import Directory
from raygents.stores.base import Store
from raygents.stores.file import FileStore
from raygents.stores.open import open_store
from raygents.telemetry import metrics

__all__ = ["RecordWriter"]

log = logging.getLogger("raygents")

Emit = Callable[[RunEvent], None]
Written = Callable[[RunState, checkpoint.Status, Emit | None], Awaitable[None]]
"""Called once a record a run waited for is written (the ``checkpoint`` event and hook)."""
_WRITE_BEHIND = 32  # write-behind records of one run in flight before the run waits for them
# Once two of the last three puts on the event loop took longer than this (a slow disk, a
# network filesystem; not one stall of a shared disk), the actor's puts go to worker threads
# for _SLOW_PUTS_S, so that a slow store does not stall the other runs on the actor's loop.
_INLINE_PUT_MAX_S = 0.005
_SLOW_PUTS_S = 10.0
_LEASE_WAIT_S = 0.05
"""How long a put whose run asked for its lease beside it waits for the answer, once the put
returned, before it looks in the store instead."""


class RecordWriter:
    """The checkpoint records of the runs on one agent actor.

    Args:
        directory: the actor's directory (settings, the coordinator's client).
        written: see :data:`Written`.
    """

    def __init__(self, directory: Directory, written: Written) -> None:
        self.directory = directory
        self.reports = Reports(directory.client.noted)
        self._written = written
        self._store: Store | None = None
        self._store_known = False
        self._bodies: dict[str, tuple[int, checkpoint.Body]] = {}
        """The run-state body of each active run's newest record, by run (for deltas)."""
        self._newest: dict[str, RunState] = {}
        """Each active run's state as its newest record wrote it (a failure record follows it)."""
        self._checked: dict[str, str] = {}
        """The key of each active run's newest checked record written here: the record the
        next checked one looks for (an unchecked one may have landed after a deletion)."""
        self._tails: dict[str, asyncio.Future[Any]] = {}
        """The newest record each run wrote to the store itself, by run (writes chain)."""
        self._unsettled: dict[str, list[Any]] = {}
        """Write-behind (``async`` mode) checkpoint writes not yet acknowledged, by run."""
        self._threaded_puts = 0
        """Puts running in worker threads now."""
        self._put_this_turn = False
        """Whether a put ran on the event loop in this turn of it."""
        self._threads_until = 0.0
        """Puts go to threads until then (``time.monotonic()``): those on the loop were slow."""
        self._slow_inline_puts: deque[bool] = deque(maxlen=3)
        """Whether each of the last puts on the loop was slow."""
        self._dir_maker: concurrent.futures.ThreadPoolExecutor | None = None
        self._made_dirs: dict[str, concurrent.futures.Future[None]] = {}
        """Directories of fresh runs being made (:meth:`make_run_dir`), by run."""
        self._leases: Leases | None = None

    # --- the store ----------------------------------------------------------------------
    def store(self) -> Store | None:
        """The store, if this actor writes to it itself (running runs' records in ``sync`` and
        ``async`` mode, completed runs' markers in every mode): an S3 store, or a file store
        on this node (the coordinator says so in its settings). ``async`` records go to
        worker threads: the run never waits for them."""
        if not self._store_known:
            settings = self.directory.cached_settings()
            if settings.direct:
                store = open_store(settings.store)
                if not isinstance(store, FileStore) or settings.node == _node_id():
                    self._store = store
            self._store_known = True
        return self._store

    def check_node(self, agent_name: str) -> None:
        """Refuse to run on a node that cannot reach the store's records.

        Raises:
            UserError: the store is a ``file://`` directory on the coordinator's node and
                this actor is on another one: its records would be written (or looked for)
                on a machine that recovery never reads.
        """
        settings = self.directory.cached_settings()
        if not settings.store.startswith("file://") or not settings.node:
            return
        here = _node_id()
        if settings.node != here:
            raise UserError(
                f"agent {agent_name!r} runs on node {here[:12]}, but the checkpoint store "
                f"{settings.store} is a directory on node {settings.node[:12]} (the "
                "coordinator's): records written on one node are not found on another. Use an "
                "s3:// store when agent actors run on other nodes, or keep them on the "
                "coordinator's node"
            )

    def use_store(self, store: Store | None) -> None:
        """Write running runs' records to ``store`` (None: through the coordinator) instead
        of the one the coordinator's settings name."""
        self._store, self._store_known = store, True

    @property
    def threaded_puts(self) -> int:
        """Puts running in worker threads now."""
        return self._threaded_puts

    # --- writing ------------------------------------------------------------------------
    def write(
        self,
        state: RunState,
        status: checkpoint.Status,
        *,
        cause: str | None = None,
        error: str | None = None,
        durable: bool = False,
        checked: bool = True,
    ) -> tuple[RunState, Any]:
        """Start writing a checkpoint record; the new state and the pending write (or None).

        Sequence numbers are taken here, synchronously, so concurrent writes never collide.
        In ``exit`` mode only records of runs that stop here are written, and ``durable``
        ones (a batch's intent before its ``on_recovery="ask"`` calls start). ``checked``:
        in ``sync`` mode, a record the actor puts itself is checked against fencing after its
        put (False: a record nothing waits on, see the module's docstring; ``async``
        records never are).
        """
        settings = self.directory.cached_settings()
        if settings.durability == "exit" and status == "running" and not durable:
            return state, None
        run_id = state.run_id
        last = self._bodies.get(run_id)
        previous = last[1] if last is not None and last[0] == state.seq else None
        new, record, body = checkpoint.next_record(
            state, status, previous, cause=cause, error=error
        )
        data = checkpoint.encode(record, key=settings.key)  # (too large: no seq is taken)
        self._bodies[run_id] = (new.seq, body)
        self._newest[run_id] = new
        info: RecordEntry = (status, new.agent_name, new.turns, error)  # (travels cheaper)
        full = record["kind"] == "full"
        metrics.checkpoint_bytes(new.agent_name, len(data), full=full)
        tail = self._tails.get(run_id)
        store = self.store()
        key = checkpoint.key_for(run_id, new.seq, new.epoch)
        if store is not None and not durable:
            behind = settings.durability == "async"  # (the run does not wait for it)
            newest_checked = self._checked.get(run_id)
            if checked and not behind:
                self._checked[run_id] = key
            put = _Put(store, key, newest_checked, new, data, info, full, checked and not behind)
            small = isinstance(store, FileStore)  # (a local file; network puts go to threads)
            if not behind and (tail is None or tail.done()) and small and self._put_inline():
                write = self._put_now(put)
            else:
                write = asyncio.ensure_future(self._put(tail, put))
            self._tails[run_id] = write
            return new, write
        args = (run_id, new.seq, data, info, durable, new.epoch, full)
        if tail is None:
            return new, self.directory.client.save(*args)
        del self._tails[run_id]
        return new, asyncio.ensure_future(self._save_after(tail, args))

    async def save(
        self,
        state: RunState,
        status: checkpoint.Status,
        emit: Emit | None,
        *,
        cause: str | None = None,
        error: str | None = None,
        durable: bool = False,
        checked: bool = True,
    ) -> RunState:
        """Write a checkpoint record and wait until the coordinator has it (``checked``: see
        :meth:`write`).

        In ``async`` mode a record that need not be durable is not waited for: its write is
        acknowledged before the run's outcome goes out.
        """
        started = time.perf_counter()
        new, write = self.write(
            state, status, cause=cause, error=error, durable=durable, checked=checked
        )
        if write is None:
            return new
        if durable or self.directory.cached_settings().durability != "async":
            await write
            metrics.checkpoint_written(new.agent_name, time.perf_counter() - started)
        else:
            self._unsettled.setdefault(state.run_id, []).append(write)
            await self._settle_writes(state.run_id, keep=_WRITE_BEHIND)
        await self._written(new, status, emit)
        return new

    async def checkpointed(
        self, state: RunState, status: checkpoint.Status, emit: Emit | None
    ) -> None:
        """Tell the run a record it waited for is written (see :data:`Written`)."""
        await self._written(state, status, emit)

    def newest(self, run_id: str) -> RunState | None:
        """The run's state as the newest record written for it here wrote it."""
        return self._newest.get(run_id)

    def child_ended(self, state: RunState) -> None:
        """An agent-as-tool child run completed (see :meth:`Reports.child_ended`)."""
        self.reports.child_ended(state)

    def forget(self, run_id: str) -> None:
        """The run stopped here: drop what its next record would have followed."""
        self._bodies.pop(run_id, None)
        self._newest.pop(run_id, None)
        self._checked.pop(run_id, None)

    async def finish(self, outcome: Outcome) -> None:
        """Wait until the run's records are where its outcome needs them, before it leaves.

        A handoff's next actor may be one that cannot write itself: the coordinator must have
        the reports first. A completed run's records are deleted at its end, so its waiting
        reports are dropped (a run that stopped otherwise had every report acknowledged
        before its stop record), and its completion marker is stored first (see
        :meth:`_mark_done`). The ends of its children reach the coordinator before it.
        """
        run_id, kind = outcome.state.run_id, outcome.kind
        leasing = kind == "completed" and _leases_pay(self.store())
        renewal = self._renew(outcome.state) if leasing else None  # (for its marker)
        await self._settle_writes(run_id, keep=0)
        await self.dir_made(run_id)
        tail = self._tails.pop(run_id, None)
        if tail is not None:
            if not tail.done():
                await asyncio.wait([tail])
            if kind == "handoff":
                await self.reports.settled()
            elif kind == "completed":
                self.reports.drop(run_id)
        if kind == "completed":
            await self._mark_done(outcome, renewal)
        if self._leases is not None:
            self._leases.drop(run_id)
        if self.reports.ends_waiting:
            self.reports.send()

    async def _mark_done(self, outcome: Outcome, renewal: asyncio.Future[None] | None) -> None:
        """Store a completed run's marker (``runs/<id>/done.<epoch>``, create-only, what the
        coordinator's clean-up would write), which keeps its result (see
        :func:`~raygents.records.keptresult.done_marker`): a coordinator that crashes before
        its clean-up then still finds the run completed, and never runs it again, and the
        result outlives a restart of Ray. Its clean-up finds the marker there and keeps it.
        A run without records is marked only in a durable store (nothing would run it
        again: the marker is there for its result). Put alone while the run's lease holds
        (``renewal``: the request for it), else after a look that no later dispatch left a
        key (see :func:`_put_marker`)."""
        state = outcome.state
        store = self.store()
        settings = self.directory.cached_settings()
        if state.seq == 0 and not settings.store.startswith(_DURABLE):
            return
        done = done_marker(ended_info(state, "completed"), state.epoch, run_summary(outcome))
        try:
            data = codec.encode(done, key=settings.key)
            if store is None:  # the coordinator writes this run's records: it marks it too
                await self.directory.client.mark_done(state.run_id, state.epoch, data)
            else:
                leased = await self._leased(state, renewal)  # (as of now, once answered)
                await asyncio.to_thread(_put_marker, store, state.run_id, state.epoch, data, leased)
        except (CheckpointError, ray.exceptions.RayError) as exc:  # (its clean-up writes it)
            log.warning("run %s: cannot store its completion marker: %s", state.run_id, exc)

    # --- run directories ----------------------------------------------------------------
    def make_run_dir(self, run_id: str, *, alone: bool) -> None:
        """Make a fresh run's directory in the store while its first model call runs, so that
        its first record (the intent of its first tool batch) only writes a file. The
        coordinator removes the directory if the run completes without records, so the run's
        outcome waits for it (see :meth:`finish`).

        In a worker thread whose end does not wake the event loop: the loop is neither
        blocked by the directory's fsyncs nor woken during the model call for it. Only for a
        run ``alone`` on the actor: the directories of runs that come together (a fan-out's
        children, a burst) are made by their first puts, whose fsyncs overlap in threads.
        """
        store = self.store()
        if not isinstance(store, FileStore) or not alone:
            return
        if self._dir_maker is None:
            self._dir_maker = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="raygents-run-dirs"
            )
        prefix = checkpoint.run_prefix(run_id)
        self._made_dirs[run_id] = self._dir_maker.submit(_make_dir, store, prefix)

    def making_dir(self, run_id: str) -> bool:
        """Whether the run's directory is being made (or was, and nobody waited for it)."""
        return run_id in self._made_dirs

    async def dir_made(self, run_id: str) -> None:
        """Wait until the directory that :meth:`make_run_dir` makes for the run is there."""
        made = self._made_dirs.pop(run_id, None)
        if made is not None and not made.done():
            await asyncio.wrap_future(made)

    # --- puts ---------------------------------------------------------------------------
    def _put_inline(self) -> bool:
        """Whether a put should run on the event loop, blocking it (fsyncs): when no other
        put is running and none ran on the loop in this turn of it. A thread hop costs more
        CPU than the put (records of runs that end one by one, as a fan-out's children do, go
        this way); puts that come together overlap their fsyncs in threads, and so do all
        puts for a while once those on the loop turn slow."""
        if self._threaded_puts or self._put_this_turn or time.monotonic() < self._threads_until:
            return False
        self._put_this_turn = True
        asyncio.get_running_loop().call_soon(self._next_turn)
        return True

    def _next_turn(self) -> None:
        self._put_this_turn = False

    def _put_now(self, put: _Put) -> asyncio.Future[None]:
        """Put a record on the event loop (a small file: its checks are ``stat`` calls, and no
        lease is asked for); a done future with the put's result."""
        write: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        started = time.monotonic()
        try:
            self._reported(put, put.store_it())
            write.set_result(None)
        except Exception as exc:
            write.set_exception(exc)
        ended = time.monotonic()
        self._timed_inline_put(ended - started, ended)
        return write

    def _timed_inline_put(self, took: float, now: float) -> None:
        """Follow how long puts on the loop take; once two of the last three took over
        ``_INLINE_PUT_MAX_S``, puts go to threads for ``_SLOW_PUTS_S``, then try again (a single
        slow put is a stall of a shared disk, not a slow store)."""
        self._slow_inline_puts.append(took > _INLINE_PUT_MAX_S)
        if sum(self._slow_inline_puts) >= 2:
            self._threads_until = now + _SLOW_PUTS_S
            self._slow_inline_puts.clear()

    async def _put(self, tail: asyncio.Future[Any] | None, put: _Put) -> None:
        """Write a record to the store in a worker thread, after the run's previous write,
        then report it (see :meth:`_reported`)."""
        if tail is not None and not tail.done():
            await asyncio.wait([tail])  # its own waiter sees its failure
        renewal = self._renew(put.state) if put.checked and _leases_pay(put.store) else None
        self._threaded_puts += 1
        try:
            written, at = await asyncio.to_thread(put.put_alone)
            fenced = not written
            if written and put.checked and not await self._leased(put.state, renewal, at):
                fenced = await asyncio.to_thread(put.fenced)
        finally:
            self._threaded_puts -= 1
        self._reported(put, fenced)

    # --- leases -------------------------------------------------------------------------
    def leases(self) -> Leases:
        """The leases of this actor's runs (see :mod:`~raygents.runtime.actor.leases`)."""
        if self._leases is None:
            lease_s = self.directory.cached_settings().recovery.lease_s
            self._leases = Leases(self.directory.client.lease, lease_s)
        return self._leases

    def _renew(self, state: RunState) -> asyncio.Future[None] | None:
        return self.leases().renew(state.run_id, state.epoch)

    def _holds(self, state: RunState, at: float) -> bool:
        return self.leases().holds(state.run_id, state.epoch, at)

    async def _leased(
        self, state: RunState, renewal: asyncio.Future[None] | None, at: float | None = None
    ) -> bool:
        """Whether the run's lease held at ``at`` (None: once answered), once ``renewal`` (a
        request for it) is answered, or :data:`_LEASE_WAIT_S` has passed (a busy coordinator
        answers late: the store's looks are not slower than that)."""
        if renewal is not None and not renewal.done():
            await asyncio.wait([renewal], timeout=_LEASE_WAIT_S)
        return self._holds(state, clock() if at is None else at)

    def _reported(self, put: _Put, fenced: bool) -> None:
        """Report a stored record to the coordinator (batched).

        Raises:
            CheckpointError: the run was dispatched again: this copy is fenced, its record
                is void (the coordinator deletes it).
        """
        run_id, seq, epoch = put.state.run_id, put.state.seq, put.state.epoch
        if fenced:
            self.directory.client.discard(run_id, put.key)
            raise CheckpointError(
                f"run {run_id!r}: checkpoint {seq} comes from dispatch {epoch}, but the run "
                "was dispatched again; this copy of the run is fenced",
                run_id=run_id,
                key=put.key,
            )
        self.reports.stored((run_id, seq, epoch, put.data, put.info, put.full))

    async def _save_after(self, tail: asyncio.Future[Any], args: tuple[Any, ...]) -> None:
        """Have the coordinator store a record once the run's own writes are reported."""
        await asyncio.wait([tail])
        await self.reports.settled()
        await self.directory.client.save(*args)

    async def _settle_writes(self, run_id: str, keep: int) -> None:
        """Wait for a run's write-behind records until at most ``keep`` are in flight."""
        writes = self._unsettled.get(run_id)
        if not writes or len(writes) <= keep:
            return
        head, rest = writes[: len(writes) - keep], writes[len(writes) - keep :]
        if rest:
            self._unsettled[run_id] = rest
        else:
            del self._unsettled[run_id]
        for result in await asyncio.gather(*head, return_exceptions=True):
            if isinstance(result, BaseException):
                log.warning("run %s: a write-behind checkpoint failed: %s", run_id, result)


@dataclass(frozen=True)
class _Put:
    """A record that an agent actor writes to the store itself."""

    store: Store
    key: str
    previous_key: str | None
    """The run's newest checked record written here (what a checked put looks for)."""
    state: RunState
    data: bytes
    info: RecordEntry
    full: bool
    checked: bool = True
    """Whether to check this copy's fencing after the put (else: the put alone)."""

    def store_it(self) -> bool:
        """Put the record, then check it if it is to be checked (blocking); True if this copy
        of the run turned out to be fenced."""
        written, _ = self.put_alone()
        return not written or (self.checked and self.fenced())

    def put_alone(self) -> tuple[bool, float]:
        """Put the record (blocking): whether it was written (see :func:`_put_record`), and
        when the put returned (:func:`~raygents.runtime.actor.leases.clock`)."""
        written = _put_record(self.store, self.key, self.data, self.state.seq == 1)
        return written, clock()

    def fenced(self) -> bool:
        """Check, after its put, whether this copy of the run is fenced (see
        :func:`_fenced`)."""
        fence = checkpoint.fence_key(self.state.run_id, self.state.epoch + 1)
        return _fenced(self.store, fence, self.previous_key)


def _leases_pay(store: Store | None) -> bool:
    """Whether leases save this store's looks: a network store's (each a round trip), not a
    local file store's (a ``stat`` costs less than asking the coordinator)."""
    return store is not None and not isinstance(store, FileStore)


def _put_record(store: Store, key: str, data: bytes, first: bool) -> bool:
    """Put a record; False if nothing was written because the run's directory is gone (a
    file store whose run ended elsewhere: see :meth:`Store.put_if_dir`)."""
    if first:
        store.put(key, data)
        return True
    return store.put_if_dir(key, data)


def _fenced(store: Store, fence: str, previous: str | None) -> bool:
    """After a record's put: True if this copy of the run is fenced: the run's next
    dispatch marked the store, or the run's records are gone (it ended elsewhere and they
    were deleted).

    The checks come after the put, one after the other, mark first: a deletion of the run's
    records takes the records (sorted first) before the mark, so a copy that misses the mark
    misses ``previous``, its newest *checked* record (which was there before any deletion
    that came after its own check; an unchecked record may have landed after one). In a
    file store a put after the deletion finds no directory; in S3 it lands, finds
    ``previous`` gone, and the coordinator deletes it. Either the copy finds the mark or
    the dispatch that marked the store finds this record when it reads the run.
    """
    return store.has(fence) or (previous is not None and not store.has(previous))


_DURABLE = ("file://", "s3://")
"""Stores whose markers outlive Ray (a ``memory://`` store's go with its process)."""


def _put_marker(store: Store, run_id: str, epoch: int, data: bytes, leased: bool) -> None:
    """Put the completion marker of dispatch ``epoch`` of a run, unless a later dispatch left
    a key in the store: its fence mark or a record, or, once it completed and its clean-up
    took those, its own marker (a fenced copy's completion is not the run's). ``leased``:
    the dispatch's lease holds, so no later one has marked the store yet, and the store is
    not looked at."""
    if leased or rebuild.listing(run_id, store.list(checkpoint.run_prefix(run_id))).epoch <= epoch:
        store.put(rebuild.done_key(run_id, epoch), data)


def _make_dir(store: Store, prefix: str) -> None:
    with contextlib.suppress(CheckpointError):  # (the first put tries again, and says why)
        store.make_dir(prefix)


def _node_id() -> str:
    return str(ray.get_runtime_context().get_node_id())
