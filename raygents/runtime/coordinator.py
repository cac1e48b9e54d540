"""The coordinator actor: one per namespace. It owns agent actors, the run table and the
checkpoints: hot copies in its memory (large ones in the object store), durable copies in the
store."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import ray

from raygents import checkpoint
from raygents.errors import CheckpointError, RaygentsError
from raygents.runtime.actor import AgentActor
from raygents.runtime.liveness import Beats
from raygents.runtime.process import tune_collector
from raygents.store import FileStore, Store, open_store

__all__ = ["Coordinator", "RunInfo"]

log = logging.getLogger("raygents")

_MAX_CONCURRENCY = 10_000
_ASYNC_BACKLOG = 1_000
_RESULTS_KEPT = 10_000
_PARKED = 10_000  # stopped runs whose records stay in memory for a quick resume, at most
_PARKED_BYTES = 64 * 1024 * 1024  # and their bytes
_INLINE = 100 * 1024  # Ray's own limit for objects kept in their owner's memory


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
        self.done: dict[str, asyncio.Event] = {}
        self.backlog: asyncio.Queue[tuple[str, bytes]] | None = None
        self.write_errors: list[str] = []
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
        self.cleanup: asyncio.Queue[str] | None = None
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
        if self.cleanup is None:
            self.cleanup = asyncio.Queue()
            asyncio.get_running_loop().create_task(self._clean())
        self.cleanup.put_nowait(f"{run_id}/{key}")

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
        hot = self.hot.get(run_id)
        if stopped is None:
            info = self.runs.get(run_id)
            stopped = info is None or info.status != "running"
        if hot is not None and not hot.told and (stopped or not self.direct):
            return [b if isinstance(b, bytes) else await b for b in hot.blobs()]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reads, self._read_run, run_id)

    async def claim_and_load(
        self, run_id: str, owner: str
    ) -> tuple[RunInfo | None, int, list[bytes], RunInfo | None]:
        """Dispatch a stopped run for ``owner`` and return its records, in one call.

        Returns ``(taken, epoch, records, before)``: ``taken`` is the entry of another owner
        running it (nothing was claimed, no records); without records nothing stays claimed.
        ``before`` is the entry as it was, for :meth:`unclaim`.
        """
        before = self.runs.get(run_id)
        name = before.agent_name if before is not None else "?"
        taken, epoch = await self.claim(run_id, owner, name)
        if taken is not None:
            return taken, 0, [], before
        blobs = await self.load(run_id, stopped=before is None or before.status != "running")
        if not blobs:
            self.unclaim(run_id, before)
            return None, 0, [], before
        return None, epoch, blobs, before

    def unclaim(self, run_id: str, before: RunInfo | None) -> None:
        """Put back a run's entry as it was before a claim its driver did not go on with."""
        if before is None:
            self.runs.pop(run_id, None)
        else:
            self.runs[run_id] = before

    def _read_run(self, run_id: str) -> list[bytes]:
        """A run's valid stored records, oldest first (one thread hop for all of them)."""
        keys = checkpoint.chain(self.store.list(checkpoint.run_prefix(run_id)))
        found = (self.store.get(key) for key in keys)
        return [data for data in found if data is not None]

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
            self.results[info.run_id] = result
            while len(self.results) > _RESULTS_KEPT:
                self.results.popitem(last=False)
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
            if self.cleanup is None:
                self.cleanup = asyncio.Queue()
                asyncio.get_running_loop().create_task(self._clean())
            self.cleanup.put_nowait(info.run_id)

    async def _clean(self) -> None:
        """Delete the records of completed runs (and fenced writes), one at a time, behind
        everything else."""
        assert self.cleanup is not None
        loop = asyncio.get_running_loop()
        while True:
            run_id, _, key = (await self.cleanup.get()).partition("/")
            info = self.runs.get(run_id)
            done = info is not None and info.status == "completed"
            if not key and info is not None and not done:
                continue  # its id was taken again meanwhile
            try:
                await loop.run_in_executor(self._cleaner, self._delete_run, run_id, key, done)
            except CheckpointError as exc:
                log.warning("cannot delete the checkpoints of run %s: %s", run_id, exc)

    def _delete_run(self, run_id: str, void: str = "", done: bool = True) -> None:
        """Delete a run's records, or only ``void`` if no valid record builds on it."""
        keys = self.store.list(checkpoint.run_prefix(run_id))
        if void and not done:
            keys = [void] if void in keys and void not in checkpoint.chain(keys) else []
        if keys:
            self.store.delete(keys)
        elif done and isinstance(self.store, FileStore):  # its agent actor made it a directory
            self.store.remove_empty_dir(checkpoint.run_prefix(run_id))

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

        Returns ``(info, 0)`` without dispatching when another owner runs it (unless
        ``force``), else ``(None, epoch)``. Where agent actors write records themselves, the
        store gets a fence mark first, which a copy of an earlier dispatch finds after its
        next write (and then stops).
        """
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
        self.runs[info.run_id] = replace(info, updated_at=time.time())

    def list_runs(self, status: str | None = None) -> list[RunInfo]:
        """Runs in the table, oldest update first, optionally of one status."""
        found = [r for r in self.runs.values() if status is None or r.status == status]
        return sorted(found, key=lambda r: r.updated_at)

    def get_run(self, run_id: str) -> RunInfo | None:
        """One run's entry."""
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
            "store": self.store.url,
            "recovery": self.recovery,
            "creator": self.creator,
            "direct": self.direct,
            "node": self.node,
        }

    def _rebuild(self) -> None:
        """Rebuild the run table from the newest record of every run in the store."""
        try:
            keys = self.store.list("runs/")
        except CheckpointError as exc:
            log.error("cannot list checkpoints to rebuild the run table: %s", exc)
            return
        by_run: dict[str, list[str]] = {}
        for key in keys:
            by_run.setdefault(key.split("/")[1], []).append(key)
        for run_id, run_keys in by_run.items():
            valid = checkpoint.chain(run_keys)
            if not valid:
                continue
            key = valid[-1]
            try:
                data = self.store.get(key)
                record = checkpoint.decode(data or b"", key=self.key, source=key)
            except CheckpointError as exc:
                log.error("cannot read %s while rebuilding the run table: %s", key, exc)
                continue
            status = record["status"]
            error = record.get("error")
            if status == "running":  # whoever drove it is gone: leave it resumable
                status = "suspended"
                error = "its driver or the coordinator stopped while it ran; resume it"
            state = record.get("state") or record.get("changes") or {}
            marks = [k for k in run_keys if k.rpartition("/")[2].startswith("fence.")]
            fenced = max((int(k.rpartition(".")[2]) for k in marks), default=0)
            self.epochs[run_id] = max(int(state.get("epoch", 0)), fenced)
            self.runs[run_id] = RunInfo(
                run_id,
                status,
                str(state.get("agent_name", "?")),
                int(state.get("turns", 0)),
                updated_at=float(record.get("at") or time.time()),
                last_error=error,
                seq=int(record["seq"]),
            )


def _node_id() -> str:
    """The Ray node this process runs on ("" outside Ray)."""
    if not ray.is_initialized():  # a coordinator built in a unit test
        return ""
    return str(ray.get_runtime_context().get_node_id())
