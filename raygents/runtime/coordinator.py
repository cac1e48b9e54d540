"""The coordinator actor: one per namespace. It owns agent actors, the run table and the
checkpoints: hot copies in its memory (large ones in the object store), durable copies in the
store.

Its tables are bounded. The run table keeps every running, suspended and awaiting-approval
run (they are resumable), and the newest ``_COMPLETED_KEPT`` completed and ``_FAILED_KEPT``
failed runs; older ended runs are forgotten, oldest first. Retention in the store: a completed
run's records are deleted at its end, after a small completion marker
(``runs/<run_id>/done.<epoch>``, kept) that stops it from being claimed again; a failed run
keeps its records while it is in the table, so it can be resumed, and they are deleted when it
is forgotten; a suspended or awaiting-approval run's records are never deleted here. Results
of completed runs are kept for ``attach`` up to ``_RESULTS_KEPT`` of them and
``_RESULTS_BYTES`` in all.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import ray

from raygents import checkpoint, codec
from raygents.errors import CheckpointError, RaygentsError, UserError
from raygents.messages import Usage
from raygents.runtime import rebuild
from raygents.runtime.actor import AgentActor
from raygents.runtime.liveness import Beats
from raygents.runtime.process import tune_collector
from raygents.store import FileStore, Store, open_store

__all__ = ["Coordinator", "RunInfo"]

log = logging.getLogger("raygents")

_MAX_CONCURRENCY = 10_000
_ASYNC_BACKLOG = 1_000
_RESULTS_KEPT = 10_000
_RESULTS_BYTES = 64 * 1024 * 1024  # estimated: the text of their outputs and messages
_COMPLETED_KEPT = 10_000  # completed runs in the run table, at most (the newest)
_FAILED_KEPT = 1_000  # failed runs in the run table (and their records in the store), at most
_MARKER_OUTPUT = 4096  # characters of output a completion marker keeps, at most
_WRITE_ERRORS_KEPT = 100
_REBUILD_INLINE_RUNS = 1_000  # a start-up reads at most this many runs before it returns,
_REBUILD_INLINE_S = 1.0  # and for at most this long; the rest are read behind
_REBUILD_THREADS = 8
_REBUILD_WAIT_S = 10.0  # how long list_runs waits for a rebuild still reading
_PARKED = 10_000  # stopped runs whose records stay in memory for a quick resume, at most
_PARKED_BYTES = 64 * 1024 * 1024  # and their bytes
_INLINE = 100 * 1024  # Ray's own limit for objects kept in their owner's memory


_Chore = tuple[str, str, Any]
"""Store clean-up, in order, behind everything else: ``("done", run_id, marker)`` (a completed
run: its marker, then its records go), ``("void", run_id, key)`` (a fenced copy's write) and
``("drop", run_id, None)`` (a forgotten failed run's records go)."""
_ENDED = ("completed", "failed")


@dataclass(frozen=True)
class RunInfo:
    """What the coordinator knows about a run."""

    run_id: str
    status: str
    agent_name: str
    turns: int = 0
    attempts: int = 1
    updated_at: float = field(default_factory=time.time)
    last_error: str | None = None
    seq: int = 0
    owner: str | None = None


@dataclass
class _Hot:
    """A run's records from its newest full one (``base``) on: seq -> (bytes or ref, size,
    epoch). ``told``: the newest one was written by an agent actor and reported after (an
    actor has its reports acknowledged before it has this coordinator store a record)."""

    base: int
    records: dict[int, tuple[Any, int, int]] = field(default_factory=dict)
    told: bool = False

    def add(self, seq: int, epoch: int, blob: Any, size: int, full: bool) -> None:
        # a later dispatch's record voids an earlier dispatch's records from its seq on
        if any(k <= seq and v[2] > epoch for k, v in self.records.items()):
            return
        self.records = {
            k: v for k, v in self.records.items() if k < seq or (k > seq and v[2] >= epoch)
        }
        if full and seq > self.base:
            self.records = {k: v for k, v in self.records.items() if k > seq}
            self.base = seq
        if seq >= self.base:
            self.records[seq] = (blob, size, epoch)

    @property
    def size(self) -> int:
        return sum(size for _, size, _ in self.records.values())

    def blobs(self) -> list[Any]:
        return [self.records[k][0] for k in sorted(self.records)]


@dataclass
class _Graph:
    blob: bytes
    replicas: dict[str, int]


class Coordinator:
    """Creates and retires agent actors, keeps the run table, and stores checkpoints.

    A plain class; the runtime wraps it with ``ray.remote`` (``max_restarts=-1``) where it
    creates it. Store I/O runs in threads, never on the actor's event loop. On (re)start it
    rebuilds the run table from the store.
    """

    def __init__(
        self,
        namespace: str,
        store_url: str = "memory://",
        durability: str = "sync",
        hmac_key: bytes | None = None,
        detached: bool = False,
        recovery: dict[str, float] | None = None,
        actor_options: dict[str, Any] | None = None,
        creator: str = "",
    ) -> None:
        self.namespace = namespace
        self.creator = creator
        self.incarnation = os.urandom(3).hex()
        """Tells this coordinator's (non-detached) agent actors from a predecessor's."""
        self._created = itertools.count(1)
        self.store: Store = open_store(store_url)
        self.durability = durability
        self.key = hmac_key
        self.detached = detached
        self.graphs: dict[str, _Graph] = {}
        self.actors: dict[tuple[str, str], list[Any]] = {}
        self.runs: dict[str, RunInfo] = {}
        self.hot: dict[str, _Hot] = {}
        """Records of runs from their newest full one on (bytes, or object refs if large)."""
        self.parked: OrderedDict[str, int] = OrderedDict()
        """Stopped (resumable) runs whose hot records are kept (their bytes), oldest first."""
        self.parked_size = 0
        self.results: OrderedDict[str, Any] = OrderedDict()
        self._result_sizes: dict[str, int] = {}
        self.results_size = 0
        """Estimated bytes of ``results``."""
        self.done: dict[str, asyncio.Event] = {}
        self.backlog: asyncio.Queue[tuple[str, bytes]] | None = None
        self.write_errors: deque[str] = deque(maxlen=_WRITE_ERRORS_KEPT)
        self.epochs: dict[str, int] = {}
        self.ended: dict[str, int] = {}
        """Runs whose dispatch (this epoch) stored a stopping record here: it writes no more."""
        self.sessions: dict[str, str] = {}
        self.tokens: dict[str, Any] = {}
        self.directory: Any = None
        self.beats = Beats()
        self.generation = 0
        self.recovery = dict(recovery or {})
        self.actor_options = dict(actor_options or {})
        self._reads = ThreadPoolExecutor(4, thread_name_prefix="raygents-read")
        """Store reads (loads) get their own threads: they never queue behind writes."""
        self._cleaner = ThreadPoolExecutor(1, thread_name_prefix="raygents-clean")
        self.cleanup: asyncio.Queue[_Chore] | None = None
        self._cleaning: asyncio.Task[None] | None = None
        self._later: list[_Chore] = []
        """Chores found before the event loop ran (at start-up)."""
        self._completed: dict[str, None] = {}
        self._failed: dict[str, None] = {}
        """Completed and failed runs in the table, in the order they ended (pruned oldest first)."""
        self._forgot = False
        """Whether ended runs were pruned: a claim of an unknown id then looks in the store."""
        self.unreadable: set[str] = set()
        """Runs in the table (as failed) only because their keys or records cannot be read."""
        self.rebuild_error: str | None = None
        """Why the store could not be listed at start-up (the table then starts empty)."""
        self._unread: dict[str, rebuild.Listing] = {}
        """Runs listed at start-up whose newest record is not read yet."""
        self._rebuilt: queue.SimpleQueue[tuple[str, rebuild.Found | None]] = queue.SimpleQueue()
        self._rebuild_done = threading.Event()
        self.node = _node_id()
        self.direct = durability != "exit" and isinstance(self.store, FileStore)
        """Agent actors on this node write running runs' records to the store themselves
        (``sync``: the run waits for the put; ``async``: it does not)."""
        self._rebuild()
        tune_collector()

    # --- agent actors -------------------------------------------------------------------
    def register_graph(self, graph_fp: str, blob: bytes, replicas: dict[str, int]) -> None:
        """Remember a graph snapshot; actors of older definitions of its agents retire."""
        if graph_fp in self.graphs:
            return
        self.graphs[graph_fp] = _Graph(blob, dict(replicas))
        for (fp, name), handles in list(self.actors.items()):
            if fp != graph_fp and name in replicas:
                for handle in handles:
                    handle.retire.remote()
                    self.beats.forget(handle._actor_id.hex())
                del self.actors[(fp, name)]

    def agent_actors(self, graph_fp: str, name: str) -> list[Any]:
        """The actors serving ``name`` in ``graph_fp``, created on first use."""
        key = (graph_fp, name)
        if key not in self.actors:
            graph = self.graphs.get(graph_fp)
            if graph is None:
                raise RaygentsError(
                    f"unknown agent graph {graph_fp!r}; start or resume the run again"
                )
            count = graph.replicas.get(name, 1)
            self.actors[key] = [self._create(graph, graph_fp, name, i) for i in range(count)]
        return self.actors[key]

    def _create(self, graph: _Graph, graph_fp: str, name: str, index: int) -> Any:
        label = f"agent:{name}@{graph_fp[:8]}" + (f"#{index}" if index else "")
        options: dict[str, Any] = {
            "namespace": self.namespace,
            "num_cpus": 0,
            "max_concurrency": _MAX_CONCURRENCY,
            "max_restarts": -1,
        }
        if self.detached:
            # A restarted coordinator finds the detached actors of its predecessor by name.
            options.update(name=label, get_if_exists=True, lifetime="detached")
        else:
            # Owned actors die with their coordinator, but their names are released a moment
            # later: a unique name never meets a dying actor of an earlier coordinator, nor
            # one of this coordinator that retired or was replaced.
            options["name"] = f"{label}~{self.incarnation}.{next(self._created)}"
        options.update(self.actor_options)
        remote_cls = ray.remote(AgentActor).options(**options)
        me = ray.get_runtime_context().current_actor
        return remote_cls.remote(graph.blob, name, graph_fp, self.namespace, me)

    # --- runs driven here (detached mode) -----------------------------------------------
    async def drive_root(self, envelope: Any) -> AsyncIterator[Any]:
        """Drive a top-level run here, so it outlives the driver that started it.

        Yields event batches, then the outcome; the run's end is recorded here too, so
        ``attach`` from any driver gets it.
        """
        from raygents.runtime.directory import Directory
        from raygents.runtime.drive import SuspendToken, drive

        run_id = envelope.state.run_id
        if self.directory is None:
            self.directory = Directory(
                self.namespace,
                ray.get_runtime_context().current_actor,
                owner=f"coordinator:{self.namespace}",
            )
        token = self.tokens[run_id] = SuspendToken(run_id)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        task = asyncio.ensure_future(drive(envelope, self.directory, token, queue.put_nowait))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                batch = [item]
                while not queue.empty():
                    nxt = queue.get_nowait()
                    if nxt is None:
                        queue.put_nowait(None)
                        break
                    batch.append(nxt)
                yield batch
            outcome = task.result()
            await self._record_outcome(outcome)
            yield outcome
        finally:
            self.tokens.pop(run_id, None)

    async def _record_outcome(self, outcome: Any) -> None:
        state = outcome.state
        status = {"completed": "completed", "suspended": "suspended"}.get(outcome.kind, "failed")
        if outcome.kind == "interrupted":
            status = "awaiting_approval"
        summary = None
        if outcome.kind == "completed":
            summary = {
                "final_output": outcome.output or "",
                "messages": state.messages,
                "usage": state.usage,
                "turns": state.turns,
                "agent_name": state.agent_name,
            }
        error = None if outcome.error is None else str(outcome.error)
        info = RunInfo(
            state.run_id, status, state.agent_name, state.turns, last_error=error, seq=state.seq
        )
        await self.finish(info, summary)

    async def suspend(self, requests: list[tuple[str, str]]) -> None:
        """Ask runs driven here, ``(run_id, cause)``, to suspend (others are not here)."""
        for run_id, cause in requests:
            token = self.tokens.get(run_id)
            if token is not None:
                token.request(cause)

    # --- checkpoints --------------------------------------------------------------------
    async def save(
        self,
        run_id: str,
        seq: int,
        data: bytes,
        info: tuple[str, str, int, str | None],
        durable: bool = True,
        epoch: int = 0,
        full: bool = False,
    ) -> None:
        """Store one checkpoint record (``full``: a full record, not a delta); ``info`` is the
        run's status, agent, turns and last error for the run table.

        In ``sync`` mode (or when ``durable``) it returns once the store has the record; in
        ``async`` mode it returns at once and the write happens behind, with a bounded backlog.

        Raises:
            CheckpointError: the store refused or could not be reached (sync writes only).
        """
        key = checkpoint.key_for(run_id, seq, epoch)
        current = self.epochs.get(run_id, 0)
        if epoch < current:
            raise CheckpointError(
                f"run {run_id!r}: checkpoint {seq} comes from dispatch {epoch}, but the run was "
                f"dispatched again ({current}); this copy of the run is fenced",
                run_id=run_id,
                key=key,
            )
        status, agent_name, turns, error = info
        self._update(RunInfo(run_id, status, agent_name, turns, last_error=error, seq=seq))
        if durable and status != "running":
            self.ended[run_id] = epoch
        if self.durability == "async" and not durable:
            self._keep_hot(run_id, seq, epoch, data, full)
            await self._enqueue(key, data)
            return
        try:
            await asyncio.to_thread(self.store.put, key, data)
        except BaseException:
            self._drop_hot(run_id)  # no longer the same chain as the store's
            raise
        self._keep_hot(run_id, seq, epoch, data, full)

    def noted(
        self,
        notes: list[tuple[str, int, int, bytes, tuple[Any, ...], bool]],
        ends: Sequence[RunInfo] = (),
    ) -> None:
        """Records that agent actors wrote to the store themselves, in batches:
        ``(run_id, seq, epoch, data, info, full)``. Those of a dispatch that was fenced
        meanwhile change nothing, and go if void (that copy finds its fence and stops).
        ``ends``: ends of agent-as-tool child runs (as :meth:`finish`), after the records."""
        self._noted(notes)
        for info in ends:
            self._finish(info)

    def _noted(self, notes: list[tuple[str, int, int, bytes, tuple[Any, ...], bool]]) -> None:
        for run_id, seq, epoch, data, info, full in notes:
            if epoch < self.epochs.get(run_id, 0):
                self.discard(run_id, checkpoint.key_for(run_id, seq, epoch))
                continue
            old = self.runs.get(run_id)
            if old is None or old.seq < seq:
                status, agent_name, turns, error = info
                self._update(RunInfo(run_id, status, agent_name, turns, last_error=error, seq=seq))
            elif old.status == "completed":
                continue  # a report that came after the run's end: its records are going
            self._keep_hot(run_id, seq, epoch, data, full, told=True)

    def discard(self, run_id: str, key: str) -> None:
        """A fenced copy of a run wrote ``key`` before it found its fence mark: delete it
        unless the run's valid records build on it (an ended run's records all go)."""
        self._chore(("void", run_id, key))

    def _keep_hot(
        self, run_id: str, seq: int, epoch: int, data: bytes, full: bool, told: bool = False
    ) -> None:
        """Keep a run's records from its newest full one on, in this process (small ones, as
        Ray keeps small objects with their owner anyway) or the object store: a resume or a
        recovery then reads no store."""
        self._unpark(run_id)
        hot = self.hot.get(run_id)
        if hot is None and not full:
            return  # its chain starts in the store
        blob = data if len(data) < _INLINE else ray.put(data)
        if hot is None:
            hot = self.hot[run_id] = _Hot(seq, {})
        hot.add(seq, epoch, blob, len(data), full)
        hot.told = told

    def _unpark(self, run_id: str) -> None:
        self.parked_size -= self.parked.pop(run_id, 0)

    def _drop_hot(self, run_id: str) -> None:
        self._unpark(run_id)
        self.hot.pop(run_id, None)

    async def _enqueue(self, key: str, data: bytes) -> None:
        if self.backlog is None:
            self.backlog = asyncio.Queue(_ASYNC_BACKLOG)
            asyncio.get_running_loop().create_task(self._drain())
        await self.backlog.put((key, data))

    async def _drain(self) -> None:
        assert self.backlog is not None
        while True:
            key, data = await self.backlog.get()
            try:
                await asyncio.to_thread(self.store.put, key, data)
            except CheckpointError as exc:
                log.error("write-behind checkpoint %s failed: %s", key, exc)
                self.write_errors.append(f"{key}: {exc}")
                self._drop_hot(key.split("/")[1])  # the store's chain has a gap now
            finally:
                self.backlog.task_done()

    async def flush(self) -> list[str]:
        """Wait for write-behind checkpoints; returns the errors seen so far."""
        if self.backlog is not None:
            await self.backlog.join()
        return list(self.write_errors)

    async def load(self, run_id: str, stopped: bool | None = None) -> list[bytes]:
        """The run's records: its hot copies (from its newest full record on) if this
        coordinator has them all, else its valid records in the store (empty if none).

        The hot copies may lack a record an agent actor wrote itself and had not reported
        yet when the run is still running (``stopped`` False; by default: as the run table
        says) and such writes happen; then the store is read.
        """
        blobs, _ = await self._load(run_id, stopped)
        return blobs

    async def _load(self, run_id: str, stopped: bool | None) -> tuple[list[bytes], str | None]:
        """:meth:`load`, and the run's completion marker if the store was read and has one."""
        hot = self.hot.get(run_id)
        if stopped is None:
            info = self.runs.get(run_id)
            stopped = info is None or info.status != "running"
        if hot is not None and not hot.told and (stopped or not self.direct):
            return [b if isinstance(b, bytes) else await b for b in hot.blobs()], None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reads, self._read_marked_run, run_id)

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
        await self._known(run_id, look=True)
        self._refuse_completed(run_id)
        before = self.runs.get(run_id)
        name = before.agent_name if before is not None else "?"
        taken, epoch = await self._dispatch(run_id, owner, name)
        if taken is not None:
            return taken, 0, [], before
        stopped = before is None or before.status != "running"
        blobs, done = await self._load(run_id, stopped)
        if done is not None:  # it completed, and its records were not all deleted
            self.unclaim(run_id, before)
            self._update(
                replace(before, status="completed", last_error=None)
                if before is not None
                else RunInfo(run_id, "completed", "?")
            )
            self._chore(("done", run_id, self._marker(self.runs[run_id])))
            self._refuse_completed(run_id)
        if not blobs:
            self.unclaim(run_id, before)
            return None, 0, [], before
        return None, epoch, blobs, before

    def _refuse_completed(self, run_id: str) -> None:
        info = self.runs.get(run_id)
        if info is not None and info.status == "completed":
            raise UserError(
                f"run {run_id!r} already completed, and a completed run is never run again; "
                f"attach({run_id!r}) gives its result while the coordinator keeps it. Start "
                "a new run (with another run_id) to go on from its output",
                run_id=run_id,
            )

    def unclaim(self, run_id: str, before: RunInfo | None) -> None:
        """Put back a run's entry as it was before a claim its driver did not go on with."""
        if before is None:
            self.runs.pop(run_id, None)
            self._track(RunInfo(run_id, "gone", "?"))
        else:
            self.runs[run_id] = before
            self._track(before)

    def _read_run(self, run_id: str) -> list[bytes]:
        """A run's valid stored records, oldest first (one thread hop for all of them)."""
        return self._read_marked_run(run_id)[0]

    def _read_marked_run(self, run_id: str) -> tuple[list[bytes], str | None]:
        """:meth:`_read_run`, and the run's completion marker if it has one (an agent-as-tool
        parent resumes a child whose records a crash kept, marked or not)."""
        listed = rebuild.listing(run_id, self.store.list(checkpoint.run_prefix(run_id)))
        found = (self.store.get(key) for key in listed.chain)
        return [data for data in found if data is not None], listed.done

    def lock_session(self, session_id: str, run_id: str) -> str | None:
        """Take a session for a run; returns the run holding it if another one does."""
        holder = self.sessions.get(session_id)
        if holder is not None and holder != run_id:
            info = self.runs.get(holder)
            if info is not None and info.status in ("running", "pending"):
                return holder
        self.sessions[session_id] = run_id
        return None

    async def finish(self, info: RunInfo, result: Any = None) -> None:
        """Record a run's end (its session is released); a completed run's checkpoints go."""
        self._finish(info, result)

    def _finish(self, info: RunInfo, result: Any = None) -> None:
        self._update(info)
        for session_id, holder in list(self.sessions.items()):
            if holder == info.run_id:
                del self.sessions[session_id]
        if result is not None:
            self._keep_result(info.run_id, result)
        event = self.done.pop(info.run_id, None)
        if event is not None:
            event.set()
        if info.status == "completed":
            self._drop_hot(info.run_id)
            self.ended.pop(info.run_id, None)
        elif info.run_id in self.hot:  # resumable: keep its records at hand, within bounds
            self._unpark(info.run_id)
            size = self.parked[info.run_id] = self.hot[info.run_id].size
            self.parked_size += size
            while len(self.parked) > _PARKED or self.parked_size > _PARKED_BYTES:
                self._drop_hot(next(iter(self.parked)))
        if info.status == "completed":
            self._chore(("done", info.run_id, self._marker(info, result)))

    def _marker(self, info: RunInfo, result: Any = None) -> dict[str, Any]:
        """What a completed run's marker holds: its entry, and its output if small."""
        marker: dict[str, Any] = {
            "format": 1,
            "kind": "done",
            "run_id": info.run_id,
            "epoch": self.epochs.get(info.run_id, 0),
            "seq": info.seq,
            "agent_name": info.agent_name,
            "turns": info.turns,
            "at": time.time(),
        }
        output = result.get("final_output") if isinstance(result, dict) else None
        if isinstance(output, str) and len(output) <= _MARKER_OUTPUT:
            marker["output"] = output
            usage = result.get("usage") if isinstance(result, dict) else None
            if isinstance(usage, Usage):
                marker["usage"] = usage.model_dump(mode="json")
        return marker

    def _keep_result(self, run_id: str, result: Any) -> None:
        """Keep a completed run's result for ``attach``, within count and bytes."""
        self.results_size -= self._result_sizes.pop(run_id, 0)
        self.results.pop(run_id, None)
        size = _result_size(result)
        if size > _RESULTS_BYTES:
            log.info("run %s: its result (~%d bytes) is too large to keep", run_id, size)
            return
        self.results[run_id] = result
        self._result_sizes[run_id] = size
        self.results_size += size
        while len(self.results) > _RESULTS_KEPT or self.results_size > _RESULTS_BYTES:
            self._drop_result(next(iter(self.results)))

    def _drop_result(self, run_id: str) -> None:
        self.results.pop(run_id, None)
        self.results_size -= self._result_sizes.pop(run_id, 0)

    def _chore(self, chore: _Chore) -> None:
        """Queue store clean-up (kept for later when no event loop runs yet: at start-up)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._later.append(chore)
            return
        if self.cleanup is None:
            self.cleanup = asyncio.Queue()
            self._cleaning = loop.create_task(self._clean())
        for later in self._later:
            self.cleanup.put_nowait(later)
        self._later.clear()
        self.cleanup.put_nowait(chore)

    async def _clean(self) -> None:
        """Store clean-up (see :data:`_Chore`), one chore at a time, behind everything else."""
        assert self.cleanup is not None
        loop = asyncio.get_running_loop()
        while True:
            kind, run_id, arg = await self.cleanup.get()
            info = self.runs.get(run_id)
            status = None if info is None else info.status
            if kind != "void" and status not in (None, "completed" if kind == "done" else "failed"):
                continue  # its id was taken again meanwhile
            if kind == "done":
                args: tuple[Any, ...] = (self._finished_run, run_id, arg)
            elif kind == "void":
                args = (self._delete_void, run_id, arg, status == "completed")
            else:
                args = (self._delete_records, run_id)
            try:
                await loop.run_in_executor(self._cleaner, *args)
            except Exception as exc:  # (the store's or a planted key's)
                log.warning("cannot delete the checkpoints of run %s: %s", run_id, exc)

    def _finished_run(self, run_id: str, marker: dict[str, Any]) -> None:
        """A completed run: mark it done in the store (create-only), then delete its records.
        The marker goes first, so a crash or a failed delete leaves records that no claim
        runs again. A run without records needs no marker."""
        prefix = checkpoint.run_prefix(run_id)
        keys = self.store.list(prefix)
        listed = rebuild.listing(run_id, keys)
        if listed.chain:
            epoch = max(int(marker["epoch"]), listed.epoch)
            done = rebuild.done_key(run_id, epoch)
            if done not in keys:
                try:
                    self.store.put(done, codec.encode({**marker, "epoch": epoch}, key=self.key))
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

    async def apply(self, notes: list[tuple[str, tuple[Any, ...]]]) -> None:
        """What a driver noted about its runs, in order: claims of generated run ids (their
        first epoch, 1, went with the run) and ends of runs."""
        for method, args in notes:
            if method == "claim":
                taken, epoch = self._claim(*args)
                if taken is not None or epoch != 1:
                    log.warning("generated run id %s was claimed before (%s)", args[0], taken)
            elif method == "finish":
                await self.finish(*args)
            else:
                log.warning("unknown run-table note %r", method)

    async def wait(self, run_id: str) -> tuple[RunInfo | None, Any]:
        """Wait until a running run ends; its final info and result (if this coordinator has it)."""
        await self._known(run_id)
        info = self.runs.get(run_id)
        if info is not None and info.status in ("running", "pending"):
            event = self.done.setdefault(run_id, asyncio.Event())
            await event.wait()
        return self.runs.get(run_id), self.results.get(run_id)

    # --- the run table ------------------------------------------------------------------
    async def claim(
        self, run_id: str, owner: str, agent_name: str, force: bool = False
    ) -> tuple[RunInfo | None, int]:
        """Dispatch a run for ``owner``: a new epoch fences every earlier dispatch.

        Returns ``(info, 0)`` without dispatching when another owner runs it or it completed
        (unless ``force``: an agent-as-tool parent that resumes runs a child whose result it
        has not journaled again), else ``(None, epoch)``. Where agent actors write records
        themselves, the store gets a fence mark first, which a copy of an earlier dispatch
        finds after its next write (and then stops).

        A run this coordinator has not read yet (a rebuild still reading, or a run it forgot)
        is read first, so its epoch and status are known.
        """
        await self._known(run_id, look=not force)
        info = self.runs.get(run_id)
        if not force and info is not None and info.status == "completed":
            return info, 0  # (a completed run is never run again)
        return await self._dispatch(run_id, owner, agent_name, force)

    async def _dispatch(
        self, run_id: str, owner: str, agent_name: str, force: bool = False
    ) -> tuple[RunInfo | None, int]:
        """:meth:`claim` of a run whose entry is known (and not completed unless ``force``)."""
        taken, epoch = self._claim(run_id, owner, agent_name, force)
        if taken is not None:
            return taken, epoch
        ended = self.ended.pop(run_id, None) == epoch - 1 and not force
        if epoch > 1 and self.direct and not ended:  # (no copy of an ended dispatch writes)
            mark = checkpoint.fence_key(run_id, epoch)
            try:
                await asyncio.get_running_loop().run_in_executor(self._reads, self.store.mark, mark)
            except CheckpointError as exc:  # its records still void a fenced copy's
                log.warning("cannot mark run %s's dispatch %d in the store: %s", run_id, epoch, exc)
        return taken, epoch

    async def claim_many(
        self, claims: list[tuple[str, str, str, bool]]
    ) -> list[tuple[RunInfo | None, int]]:
        """:meth:`claim` for each ``(run_id, owner, agent_name, force)``, in order, in one call
        (the children of one tool batch)."""
        return [await self.claim(*args) for args in claims]

    def _claim(
        self, run_id: str, owner: str, agent_name: str, force: bool = False
    ) -> tuple[RunInfo | None, int]:
        info = self.runs.get(run_id)
        busy = info is not None and info.status == "running" and info.owner not in (None, owner)
        if busy and not force:
            return info, 0
        epoch = self.epochs.get(run_id, 0) + 1
        self.epochs[run_id] = epoch
        # (an entry without a dispatch comes from a record that arrived before this claim)
        attempts = (info.attempts + 1) if info is not None and epoch > 1 else 1
        self._update(
            RunInfo(
                run_id,
                "running",
                agent_name,
                info.turns if info else 0,
                attempts,
                owner=owner,
                seq=info.seq if info else 0,
            )
        )
        return None, epoch

    def replace_actor(self, graph_fp: str, name: str, stale: Any) -> None:
        """Stop handing out an unresponsive actor; the next lookup creates a fresh one."""
        handles = self.actors.get((graph_fp, name))
        if handles is None:
            return
        stale_id = stale._actor_id.hex()
        self.beats.forget(stale_id)
        fresh = [h for h in handles if h._actor_id.hex() != stale_id]
        if len(fresh) == len(handles):
            return  # already replaced by an earlier report of the same actor
        graph = self.graphs.get(graph_fp)
        if graph is not None:
            self.generation += 1
            fresh.append(self._create(graph, graph_fp, name, self.generation))
        self.actors[(graph_fp, name)] = fresh

    def record(self, infos: list[RunInfo]) -> None:
        """Update the run table (batched)."""
        for info in infos:
            self._update(info)

    def _update(self, info: RunInfo) -> None:
        old = self.runs.get(info.run_id)
        if old is not None:
            info = replace(
                info, attempts=max(info.attempts, old.attempts), owner=info.owner or old.owner
            )
        elif self._unread:  # news of a run not read yet: newer than its records
            self._unread.pop(info.run_id, None)
        self.runs[info.run_id] = info = replace(info, updated_at=time.time())
        if old is None or old.status != info.status:
            self._track(info)

    def _track(self, info: RunInfo) -> None:
        """Follow the order in which runs end; forget the oldest ended runs beyond the caps."""
        run_id = info.run_id
        self._completed.pop(run_id, None)
        self._failed.pop(run_id, None)
        if info.status not in _ENDED:
            self.unreadable.discard(run_id)
            return
        ended = self._completed if info.status == "completed" else self._failed
        ended[run_id] = None
        cap = _COMPLETED_KEPT if ended is self._completed else _FAILED_KEPT
        if len(ended) > cap + cap // 10:  # (a batch at a time: each sorts them)
            self._prune(ended, cap)

    def _prune(self, ended: dict[str, None], cap: int) -> None:
        """Forget the oldest of ``ended`` beyond ``cap``; a forgotten failed run's records go
        (an unreadable one's stay: they are not raygents' to judge)."""
        oldest = sorted(ended, key=lambda r: self.runs[r].updated_at if r in self.runs else 0.0)
        for run_id in oldest[: len(ended) - cap]:
            del ended[run_id]
            info = self.runs.pop(run_id, None)
            self.epochs.pop(run_id, None)
            self.ended.pop(run_id, None)
            self._drop_hot(run_id)
            self._drop_result(run_id)
            if info is not None and info.status == "failed" and run_id not in self.unreadable:
                self._chore(("drop", run_id, None))
            self.unreadable.discard(run_id)
        self._forgot = True

    async def list_runs(self, status: str | None = None) -> list[RunInfo]:
        """Runs in the table, oldest update first, optionally of one status.

        While a start-up rebuild is still reading the store, this waits for it up to
        ``_REBUILD_WAIT_S``; runs still not read then are listed with status ``"unknown"``
        (and a ``last_error`` that says so) when every status, or ``"unknown"``, is asked for.
        """
        complete = await self.rebuilt(_REBUILD_WAIT_S)
        found = [r for r in self.runs.values() if status is None or r.status == status]
        found.sort(key=lambda r: r.updated_at)
        if not complete and status in (None, rebuild.UNKNOWN):
            found += [
                RunInfo(
                    run_id,
                    rebuild.UNKNOWN,
                    "?",
                    updated_at=0.0,
                    last_error="not read yet: the coordinator is still reading the run table "
                    "back from the store (it restarted), or the store failed; ask again",
                )
                for run_id in list(self._unread)
            ]
        return found

    async def get_run(self, run_id: str) -> RunInfo | None:
        """One run's entry (read from the store first if a rebuild has not read it yet)."""
        await self._known(run_id)
        return self.runs.get(run_id)

    def ping(self) -> bool:
        """Liveness check."""
        return True

    def beat(self, actor_id: str, lag: float) -> None:
        """An agent actor's beat (see :mod:`raygents.runtime.liveness`)."""
        self.beats.beat(actor_id, lag)

    def beat_of(self, actor_id: str) -> tuple[float, float] | None:
        """``(age, loop lag)`` of an agent actor's newest beat, or ``None``."""
        return self.beats.of(actor_id)

    def settings(self) -> dict[str, Any]:
        """What agent actors need to write checkpoints (``direct``: actors on ``node`` write
        ``sync`` records to the store themselves)."""
        return {
            "durability": self.durability,
            "key": self.key,
            "key_id": codec.key_id(self.key) if self.key is not None else None,
            "store": self.store.url,
            "recovery": self.recovery,
            "creator": self.creator,
            "direct": self.direct,
            "node": self.node,
        }

    # --- the run table, read back from the store ---------------------------------------
    def _rebuild(self) -> None:
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
        for run_id, listed in rebuild.group(keys).items():
            if listed.epoch:
                self.epochs[run_id] = listed.epoch
            self._unread[run_id] = listed
        deadline = time.monotonic() + _REBUILD_INLINE_S
        for count, listed in enumerate(list(self._unread.values())):
            if count >= _REBUILD_INLINE_RUNS or time.monotonic() > deadline:
                break
            del self._unread[listed.run_id]
            self._settle(listed, rebuild.read(self.store, listed, self.key))
        rest = list(self._unread.values())
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
                if listed.run_id not in self._unread:  # read on demand meanwhile
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

    def _absorb(self) -> None:
        """Enter the runs the background rebuild has read since (on the event loop), and
        queue the clean-up the start-up found."""
        while True:
            try:
                run_id, found = self._rebuilt.get_nowait()
            except queue.Empty:
                break
            listed = self._unread.pop(run_id, None)
            if listed is not None:  # (nothing newer came meanwhile)
                self._settle(listed, found)
        if self._later:
            self._chore(self._later.pop())

    def _settle(self, listed: rebuild.Listing, found: rebuild.Found | None) -> None:
        """Put a run read back from the store in the table, or keep it unread if the store
        failed (it is read again when asked for)."""
        if found is not None and found.status == rebuild.UNKNOWN:
            self._unread[listed.run_id] = listed
        else:
            self._enter(listed.run_id, found)

    def _enter(self, run_id: str, found: rebuild.Found | None) -> None:
        """Put a run read back from the store in the table."""
        if found is None:
            return
        info = RunInfo(
            run_id,
            found.status,
            found.agent_name,
            found.turns,
            updated_at=found.at or time.time(),
            last_error=found.error,
            seq=found.seq,
        )
        if found.unreadable:
            log.error("run %s is listed as failed: %s", run_id, found.error)
            self.unreadable.add(run_id)
        self.runs[run_id] = info
        if found.status == "completed":
            if found.output is not None:
                usage = Usage.model_validate(found.usage) if found.usage else Usage()
                summary = {
                    "final_output": found.output,
                    "messages": (),  # (a marker keeps the output, not the conversation)
                    "usage": usage,
                    "turns": found.turns,
                    "agent_name": found.agent_name,
                }
                self._keep_result(run_id, summary)
            if found.leftovers:  # its clean-up did not happen: do it now
                self._chore(("done", run_id, self._marker(info)))
        self._track(info)

    async def _known(self, run_id: str, look: bool = False) -> None:
        """Make sure the table has what the store says of ``run_id``: read it now if the
        rebuild has not yet, or (``look``) if this coordinator may have forgotten it."""
        self._absorb()
        if run_id in self.runs:
            return
        loop = asyncio.get_running_loop()
        listed = self._unread.get(run_id)
        if listed is None:
            if not (look and self._forgot):
                return
            prefix = checkpoint.run_prefix(run_id)
            keys = await loop.run_in_executor(self._reads, self.store.list, prefix)
            if not keys or run_id in self.runs or run_id in self._unread:
                return
            listed = self._unread[run_id] = rebuild.listing(run_id, keys)
            self.epochs[run_id] = max(self.epochs.get(run_id, 0), listed.epoch)
        found = await loop.run_in_executor(self._reads, rebuild.read, self.store, listed, self.key)
        if self._unread.pop(run_id, None) is not None:
            self._settle(listed, found)

    async def rebuilt(self, timeout_s: float = 0.0) -> bool:
        """Whether the run table holds every run the store listed at start-up, waiting up to
        ``timeout_s`` for a rebuild still reading."""
        if not self._rebuild_done.is_set() and timeout_s > 0:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._rebuild_done.wait, timeout_s)
        self._absorb()
        return not self._unread


def _result_size(result: Any) -> int:
    """A cheap estimate of a kept result's bytes: its texts, plus a little for each part."""
    if not isinstance(result, dict):
        return 256
    size = 256 + len(str(result.get("final_output") or ""))
    for message in result.get("messages") or ():
        size += 64 + len(getattr(message, "content", None) or "")
        for call in getattr(message, "tool_calls", ()):
            size += 64 + len(call.arguments)
    return size


def _node_id() -> str:
    """The Ray node this process runs on ("" outside Ray)."""
    if not ray.is_initialized():  # a coordinator built in a unit test
        return ""
    return str(ray.get_runtime_context().get_node_id())
