"""The coordinator actor: one per namespace. Its remote methods, over the run table
(:mod:`~raygents.runtime.coordinator.runtable`), the dispatches of runs
(:mod:`~raygents.runtime.coordinator.dispatch`), the hot records
(:mod:`~raygents.runtime.coordinator.hotrecords`),
the store side (:mod:`~raygents.runtime.coordinator.recordstore`,
:mod:`~raygents.runtime.coordinator.cleanup`), the
agent actors (:mod:`~raygents.runtime.coordinator.registry`) and the runs it drives when detached
(:mod:`~raygents.runtime.coordinator.detached`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import ray

from raygents.core.envelope import Envelope, SuspendRequest
from raygents.core.events import RunEvent
from raygents.errors import CANCEL, CheckpointError, TooManyRuns
from raygents.records import rebuild, retention
from raygents.records.runinfo import Note, RecordEntry, RunInfo, RunSummary
from raygents.runtime.actor.gates import LIMITER_NAME
from raygents.runtime.coordinator.cleanup import Cleaner
from raygents.runtime.coordinator.detached import DetachedRuns
from raygents.runtime.coordinator.dispatch import STOPPED, Dispatcher, running_dispatch
from raygents.runtime.coordinator.hotrecords import HotRecords
from raygents.runtime.coordinator.leases import LeaseBook
from raygents.runtime.coordinator.recordstore import RecordStore
from raygents.runtime.coordinator.registry import ActorRegistry
from raygents.runtime.coordinator.relay import EventRelay, Want
from raygents.runtime.coordinator.runtable import RunTable
from raygents.runtime.link.coordinator_client import Listed
from raygents.runtime.link.follow import Follow
from raygents.runtime.link.process import tune_collector
from raygents.runtime.link.settings import Settings
from raygents.stores.base import Store
from raygents.stores.file import FileStore
from raygents.stores.open import open_store
from raygents.stores.s3 import S3Store
from raygents.telemetry import logs, tracing

__all__ = ["Coordinator", "RunInfo"]  # (RunInfo lives in runtime.runinfo)

log = logging.getLogger("raygents")


class Coordinator:
    """Creates and retires agent actors, keeps the run table, and stores checkpoints: hot
    copies in its memory (large ones in the object store), durable copies in the store.

    A plain class; the runtime wraps it with ``ray.remote`` (``max_restarts=-1``) where it
    creates it. On (re)start it rebuilds the run table from the store.
    """

    def __init__(self, namespace: str, settings: Settings | None = None) -> None:
        settings = settings or Settings()
        self.namespace = namespace
        self.store: Store = open_store(settings.store)
        direct = isinstance(self.store, (FileStore, S3Store))
        self._settings = replace(settings, store=self.store.url, direct=direct, node=_node_id())
        """Its settings as it answers them: agent actors write running runs' records
        (``sync``: the run waits for the put; ``async``: it does not) and completed runs'
        markers (every mode) to an S3 store, or a file store on its node, themselves."""
        self.direct = direct
        key, durability = settings.key, settings.durability
        self.table = RunTable(self._forgotten, settings.max_concurrent_runs)
        self.hot = HotRecords()
        self.cleaner = Cleaner(self.store, self.table, key, settings.retention_s)
        self.cleaner.keep_history = settings.keep_history
        self.records = RecordStore(
            self.store,
            self.table,
            self.hot,
            self.cleaner,
            key=key,
            durability=durability,
            direct=direct,
        )
        self.registry = ActorRegistry(
            namespace,
            detached=settings.detached,
            actor_options=dict(settings.actor_options),
            idle_actor_s=settings.idle_actor_s,
        )
        self.relay = EventRelay()
        self.leases = LeaseBook(settings.recovery.lease_s, running_dispatch(self.table))
        self.dispatcher = Dispatcher(
            self.table, self.records, self.cleaner, self.leases, direct, key, self._finish
        )
        self.driven = DetachedRuns(
            namespace, self.finish, self.relay, self._numbered_after, self.table.get
        )
        self.records.rebuild_table()
        tune_collector()
        logs.setup()

    # --- agent actors -------------------------------------------------------------------
    def register_graph(
        self,
        graph_fp: str,
        blob: bytes,
        replicas: dict[str, int],
        definitions: dict[str, str] | None = None,
    ) -> None:
        """Remember a graph snapshot; actors of older definitions of its agents retire."""
        self.registry.register_graph(graph_fp, blob, replicas, definitions)

    async def agent_actors(self, graph_fp: str, name: str) -> list[Any]:
        """The actors serving ``name`` in ``graph_fp``: idle actors of other agents take it
        on first use, else new ones start (see ``ActorRegistry.lookup``)."""
        return await self.registry.lookup(graph_fp, name)

    def replace_actor(self, graph_fp: str, name: str, stale: Any) -> None:
        """Stop handing out an unresponsive actor; the next lookup creates a fresh one."""
        self.registry.replace_actor(graph_fp, name, stale)

    def actor_retiring(self, graph_fp: str, name: str, actor_id: str) -> None:
        """An agent actor retires (it was idle; or it refused a caller's run as it does):
        stop handing it out; the next lookup of the agent creates a fresh one."""
        self.registry.retiring(graph_fp, name, actor_id)

    def actor_retired(self, actor_id: str) -> bool:
        """Whether an agent actor retired (a run's start that found it gone never reached
        it: its caller looks the agent up again, with no recovery)."""
        return self.registry.retired(actor_id)

    async def stop_agents(self) -> None:
        """Stop every agent actor created here, and the namespace's rate limiter (before this
        coordinator is removed, or Ray shut down: they are detached, so that they outlive its
        restarts); the actors and this coordinator export their spans first."""
        await self.registry.stop_all()
        await asyncio.to_thread(tracing.flush, 2.0)
        with contextlib.suppress(ValueError):  # (no limits: no limiter)
            ray.kill(ray.get_actor(LIMITER_NAME, namespace=self.namespace), no_restart=True)

    def beat(self, actor_id: str, lag: float) -> None:
        """An agent actor's beat (see :mod:`raygents.runtime.link.liveness`)."""
        self.registry.beats.beat(actor_id, lag)

    def beat_of(self, actor_id: str) -> tuple[float, float] | None:
        """``(age, loop lag)`` of an agent actor's newest beat, or ``None``."""
        return self.registry.beats.of(actor_id)

    # --- runs driven here (detached mode) -----------------------------------------------
    @ray.method(max_task_retries=0)  # (its caller attaches again: not from the run's input)
    async def drive_root(self, envelope: Envelope) -> AsyncIterator[Any]:
        """Drive a top-level run here, so it outlives the driver that started it.

        Yields event batches, then ``(outcome, entry)`` (the run table's entry after its
        end); the run's end is recorded here too, so ``attach`` from any driver gets it.
        """
        async for item in self.driven.drive(envelope):
            yield item

    async def suspend(self, requests: Sequence[SuspendRequest]) -> None:
        """Ask runs, ``(run_id, cause[, epoch])``, to suspend (or, with cause ``CANCEL``, to
        stop at once): those driven here, and those on the agent actors created here (each
        actor acts on the runs it has, and remembers the others for a minute: they may be on
        their way to it; an actor created within that minute gets them too). A request
        without an epoch goes with the one the run table holds, so no copy of it reaches a
        later dispatch of the run (its resume)."""
        self.driven.suspend(requests)
        dated: list[SuspendRequest] = []
        for run_id, cause, *rest in requests:
            epoch = rest[0] if rest else self.table.epochs.get(run_id)
            dated.append((run_id, cause) if epoch is None else (run_id, cause, epoch))
        for handles in self.registry.actors.values():
            for handle in handles:
                handle.suspend.remote(dated)
        self.registry.asked(dated)

    async def cancel(self, run_id: str) -> RunInfo | None:
        """Cancel a run that has not ended; its entry after, or None for a run not known.

        A running run stops at once (as :meth:`suspend` with ``CANCEL``). A suspended or
        awaiting-approval one, and its stopped agent-as-tool children, get a ``cancelled``
        record at their next seq, written here under a new dispatch (which fences any copy
        still about): no driver can resume it or approve its pending calls any more, and its
        records stay until retention or ``gc`` removes them. An ended run is left as it is.

        Raises:
            CheckpointError: its records cannot be read (damaged, or signed with another
                key), or its ``cancelled`` record cannot be stored; it is left as it was.
        """
        await self.records.known(run_id, look=True)
        info = self.table.get(run_id)
        if info is None or info.status in retention.ENDED:
            return info
        if info.status not in STOPPED:  # (running, or claimed and on its way)
            await self.suspend([(run_id, CANCEL)])
            return info
        await self.dispatcher.cancel_stopped(info)
        return self.table.get(run_id)

    # --- checkpoints --------------------------------------------------------------------
    async def save(
        self,
        run_id: str,
        seq: int,
        data: bytes,
        info: RecordEntry,
        durable: bool = True,
        epoch: int = 0,
        full: bool = False,
    ) -> None:
        """Store one checkpoint record (``full``: a full record, not a delta); ``info`` is the
        run's status, agent, turns and last error for the run table.

        In ``sync`` mode (or when ``durable``) it returns once the store has the record; in
        ``async`` mode it returns at once and the write happens behind, with a bounded backlog.

        Raises:
            CheckpointError: the record's dispatch was fenced, or the store refused or could
                not be reached (sync writes only).
        """
        await self.records.save(run_id, seq, data, info, durable, epoch, full)

    def noted(self, notes: list[Note], ends: Sequence[RunInfo] = ()) -> None:
        """Records that agent actors wrote to the store themselves, in batches:
        ``(run_id, seq, epoch, data, info, full)``. Those of a dispatch that was fenced
        meanwhile change nothing, and go if void (that copy finds its fence and stops).
        ``ends``: ends of agent-as-tool child runs (as :meth:`finish`), after the records."""
        self.records.noted(notes)
        for info in ends:
            self._finish(info)

    async def mark_done(self, run_id: str, epoch: int, data: bytes) -> None:
        """Store a completed run's marker (``data``, create-only) before its outcome leaves an
        agent actor that does not write to the store itself: a crash of this coordinator
        before its clean-up then still leaves the run completed, never to run again. A copy
        of an earlier dispatch marks nothing; a store that fails is logged (the clean-up
        tries again when the run's end arrives)."""
        if self.table.epochs.get(run_id, 0) > epoch:
            return
        key = rebuild.done_key(run_id, epoch)
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.store.put, key, data)
        except CheckpointError as exc:
            log.warning("run %s: cannot store its completion marker: %s", run_id, exc)

    def discard(self, run_id: str, key: str) -> None:
        """A fenced copy of a run wrote ``key`` before it found its fence mark: delete it
        unless the run's valid records build on it (an ended run's records all go)."""
        self.records.discard(run_id, key)

    async def load(self, run_id: str, stopped: bool | None = None) -> list[bytes]:
        """The run's records: its hot copies (from its newest full record on) if this
        coordinator has them all, else its valid records in the store (empty if none).

        The hot copies may lack a record an agent actor wrote itself and had not reported
        yet when the run is still running (``stopped`` False; by default: as the run table
        says) and such writes happen; then the store is read.
        """
        blobs, _ = await self.records.load(run_id, stopped)
        return blobs

    async def history(self, run_id: str) -> tuple[list[bytes], bytes | None]:
        """The run's durable records in the store, oldest first, and its completion marker's
        bytes if it has one (records still going behind to the store are not there yet)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.records.read_history, run_id)

    # --- the run table ------------------------------------------------------------------
    async def claim(
        self,
        run_id: str,
        owner: str,
        agent_name: str,
        force: bool = False,
        tenant: str | None = None,
        group: tuple[str | None, str] | None = None,
    ) -> tuple[RunInfo | None, int]:
        """Dispatch a run for ``owner``: a new epoch fences every earlier dispatch (``group``:
        its ``trace()`` block's ``(group_id, trace_id)``).

        Returns ``(info, 0)`` without dispatching when another owner runs it or it completed
        (unless ``force``: an agent-as-tool parent that resumes runs a child whose result it
        has not journaled again), else ``(None, epoch)``. Where agent actors write records
        themselves, the store gets a fence mark first, which a copy of an earlier dispatch
        finds after its next write (and then stops).

        A run this coordinator has not read yet (a rebuild still reading, or a run it forgot)
        is read first, so its epoch and status are known.

        Raises:
            TooManyRuns: ``tenant`` has ``max_concurrent_runs`` runs in flight.
        """
        await self.records.known(run_id, look=not force)
        return await self.dispatcher.dispatch(run_id, owner, agent_name, force, tenant, group)

    async def claim_many(
        self, claims: list[tuple[str, str, str, bool]]
    ) -> list[tuple[RunInfo | None, int]]:
        """:meth:`claim` for each ``(run_id, owner, agent_name, force)``, in order, in one call
        (the children of one tool batch); each child's parent is named in the run table."""
        answers = []
        for args in claims:
            answers.append(await self.claim(*args))
            self.table.adopt(args[0])
        return answers

    async def claim_runs(
        self, claims: list[tuple[str, str, str, str | None]]
    ) -> list[tuple[RunInfo | None, int] | TooManyRuns]:
        """:meth:`claim` for each ``(run_id, owner, agent_name, tenant)``, in order, in one
        call (the next items of a batch job): per claim its answer, or the ``TooManyRuns``
        that refused it (the others still go on). The store is read for every run not in the
        table at once, not one after the other."""
        await asyncio.gather(*(self.records.known(c[0], look=True) for c in claims))
        answers: list[tuple[RunInfo | None, int] | TooManyRuns] = []
        for run_id, owner, agent_name, tenant in claims:
            try:
                answers.append(
                    await self.dispatcher.dispatch(run_id, owner, agent_name, tenant=tenant)
                )
            except TooManyRuns as refused:
                answers.append(refused)
        return answers

    async def claim_and_load(
        self, run_id: str, owner: str
    ) -> tuple[RunInfo | None, int, list[bytes], RunInfo | None]:
        """Dispatch a stopped run for ``owner`` and return its records, in one call.

        Returns ``(taken, epoch, records, before)``: ``taken`` is the entry of another owner
        running it (nothing was claimed, no records); without records nothing stays claimed.
        ``before`` is the entry as it was, for :meth:`unclaim`.

        Raises:
            UserError: the run completed: the run table says so, or the store holds its
                completion marker (its records may still be there: a crash or a failed
                delete before its clean-up; they are deleted now).
        """
        return await self.dispatcher.claim_and_load(run_id, owner)

    def unclaim(self, run_id: str, before: RunInfo | None) -> None:
        """Put back a run's entry as it was before a claim its driver did not go on with."""
        self.table.unclaim(run_id, before)

    def lease(self, runs: list[tuple[str, int]]) -> list[str]:
        """Grant each ``(run_id, epoch)`` that is its running run's newest dispatch a lease
        (see :mod:`~raygents.runtime.coordinator.leases`); the run ids granted."""
        return self.leases.grant(runs)

    def lock_session(self, session_id: str, run_id: str) -> str | None:
        """Take a session for a run; returns the run holding it if another one does."""
        return self.table.lock_session(session_id, run_id)

    async def finish(self, info: RunInfo, result: RunSummary | None = None) -> None:
        """Record a run's end (its session is released); a completed run's checkpoints go."""
        self._finish(info, result)

    def _finish(self, info: RunInfo, result: RunSummary | None = None) -> None:
        self.table.finish(info, result)
        self.records.ended(info, result)

    async def apply(self, notes: list[tuple[str, tuple[Any, ...]]]) -> None:
        """What a driver noted about its runs, in order: claims of generated run ids (their
        first epoch, 1, went with the run) and ends of runs."""
        for method, args in notes:
            if method == "claim":
                taken, epoch = self.table.claim(*args)
                self.leases.dispatched(args[0])
                if taken is not None or epoch != 1:
                    log.warning("generated run id %s was claimed before (%s)", args[0], taken)
            elif method == "finish":
                self._finish(*args)
            else:
                log.warning("unknown run-table note %r", method)

    async def wait(self, run_id: str) -> tuple[RunInfo | None, RunSummary | None]:
        """Wait until a running run ends; its final info and result: this coordinator's copy,
        else the one its marker keeps in the store (a run ended before a restart)."""
        await self.records.known(run_id, look=True)
        info, result = await self.table.wait(run_id)
        if info is not None and info.status == "completed" and result is None:
            result = await self.records.kept_result(run_id)
            if result is not None:
                self.table.results.keep(run_id, result)
        return info, result

    async def list_runs(
        self, status: str | None = None, where: Listed | None = None
    ) -> list[RunInfo]:
        """Runs in the table, oldest update first, optionally of one status, and narrowed
        by ``where`` (the newest of some statuses, of an agent, among some runs).

        While a start-up rebuild is still reading the store, this waits for it up to
        ``records.list_wait_s``; runs still not read then are listed with status ``"unknown"``
        (and a ``last_error`` that says so) when every status, or ``"unknown"``, is asked for.
        """
        complete = await self.records.rebuilt(self.records.list_wait_s)
        return self.table.listing(status, complete, where)

    async def get_run(self, run_id: str) -> RunInfo | None:
        """One run's entry (read from the store first if a rebuild has not read it yet, or
        the table forgot it)."""
        await self.records.known(run_id, look=True)
        return self.table.get(run_id)

    def ping(self) -> bool:
        """Liveness check."""
        return True

    def settings(self) -> Settings:
        """What agent actors need to write checkpoints (``direct``: actors on ``node`` write
        ``sync`` records to the store themselves)."""
        self.cleaner.start()  # (the expiry of runs past retention starts with the first call)
        return self._settings

    async def gc(
        self, older_than_s: float | None = None, dry_run: bool = False
    ) -> tuple[float, list[dict[str, Any]]]:
        """Delete the records and kept results of ended runs that ended more than
        ``older_than_s`` ago (default: the retention, else 7 days), unless ``dry_run``;
        returns the age used and a row for each run (see ``retention.Expired.row``), and
        one for each run kept because it cannot be read (``retention.Unreadable.row``).
        Runs the table holds as running, suspended or awaiting approval are never touched,
        nor are those whose keys, records or marker cannot be read. Batch jobs' ledger shards
        written by runs of a job that started before the age go too (a
        ``retention.ExpiredLedger.row`` for each job)."""
        if older_than_s is None:
            older_than_s = self._settings.retention_s or retention.DEFAULT_GC_S
        await self.records.rebuilt(self.records.list_wait_s)
        return older_than_s, await self.cleaner.gc(older_than_s, dry_run)

    # --- the relay of live events (see runtime.coordinator.relay) -----------------------
    @ray.method(max_task_retries=0)  # (a long poll: its caller asks again, quietly)
    async def relay_follow(self, run_id: str, after: int, wait_s: float) -> Follow:
        """The run's events numbered after ``after``, waiting up to ``wait_s`` for some (a
        follower's long poll; a running run's driver is asked for them)."""
        info = None
        if not self.relay.live(run_id):
            await self.records.known(run_id, look=True)
            info = self.table.get(run_id)
        return await self.relay.follow(run_id, after, wait_s, info)

    @ray.method(max_task_retries=0)  # (a long poll: its caller asks again, quietly)
    async def relay_wanted(
        self, owner: str, version: int, wait_s: float
    ) -> tuple[int, dict[str, Want]]:
        """The runs of driver ``owner`` whose events the relay wants, once that changes from
        ``version`` (or after ``wait_s``): the driver's publisher's long poll."""
        return await self.relay.wanted(owner, version, wait_s)

    def relay_publish(self, owner: str, batches: dict[str, list[RunEvent]]) -> None:
        """Events of driver ``owner``'s runs that the relay wants, by run."""
        self.relay.publish(owner, batches)

    def _numbered_after(self, run_id: str) -> int:
        info = self.table.get(run_id)
        return info.events if info is not None else 0

    def _forgotten(self, run_id: str, records_go: bool) -> None:
        """An ended run left the table: its hot records go, and its stored ones if failed."""
        self.hot.drop(run_id)
        self.leases.forget(run_id)
        if records_go:
            self.cleaner.add(("drop", run_id, None))


def _node_id() -> str:
    """The Ray node this process runs on ("" outside Ray)."""
    if not ray.is_initialized():  # a coordinator built in a unit test
        return ""
    return str(ray.get_runtime_context().get_node_id())
