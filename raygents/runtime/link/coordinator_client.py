"""The coordinator as its callers see it: one typed method per call, each waiting out restarts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions

from raygents.errors import RaygentsError, TooManyRuns, UserError
from raygents.records import checkpoint
from raygents.records.rebuild import UNKNOWN
from raygents.runtime.link.settings import Settings

if TYPE_CHECKING:
    from raygents.core.envelope import Envelope, RunState, SuspendRequest
    from raygents.core.events import RunEvent
    from raygents.records.runinfo import Note, RecordEntry, RunInfo, RunSummary
    from raygents.runtime.link.follow import Follow

__all__ = ["COORDINATOR_NAME", "CoordinatorClient", "Listed", "checked_settings", "raygents_error"]

COORDINATOR_NAME = "raygents:coordinator"


def checked_settings(settings: Any, namespace: str) -> Settings:
    """``settings`` as a coordinator answered them, checked to be this version's.

    Raises:
        UserError: they are not (a detached coordinator of an older raygents still runs).
    """
    if not isinstance(settings, Settings):
        raise UserError(
            f"the raygents coordinator of namespace {namespace!r} runs another version of "
            "raygents; end it (and the drivers that use it) or use another namespace"
        )
    return settings


def raygents_error(exc: Any) -> BaseException:
    """The error a coordinator call raised, as its caller should see it: a raygents error
    without Ray's wrapping and remote traceback; anything else (a bug) as Ray raised it."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, RaygentsError) else exc


@dataclass(frozen=True)
class Listed:
    """Which runs a listing gives: the ``newest`` (by their last update) of those in
    ``statuses`` (any, if None), of agent ``agent`` (any, if None) and among ``run_ids``
    (any, if None). The coordinator narrows a listing so that a caller that wants a page of
    a large table (the HTTP API's ``GET /v1/runs``) gets only that page."""

    newest: int
    statuses: frozenset[str] | None = None
    agent: str | None = None
    run_ids: frozenset[str] | None = None

    def takes(self, info: RunInfo) -> bool:
        return (
            (self.statuses is None or info.status in self.statuses)
            and (self.agent is None or info.agent_name == self.agent)
            and (self.run_ids is None or info.run_id in self.run_ids)
        )

    def takes_unread(self, run_id: str) -> bool:
        """Whether a run not read yet (status ``unknown``, agent not known) is listed."""
        return (
            (self.statuses is None or UNKNOWN in self.statuses)
            and self.agent is None
            and (self.run_ids is None or run_id in self.run_ids)
        )


class CoordinatorClient:
    """Calls the namespace's coordinator actor, waiting while it restarts (in a driver, taking
    over from one that is gone for good, through ``revive``).

    Only used from one event loop per process; drivers call it from their runtime's loop.

    Args:
        namespace: the Ray namespace the coordinator is named in.
        handle: the coordinator's actor handle; looked up by name when first needed.
        revive: in a driver, given a coordinator that failed a call, replaces it if it is
            gone for good; True once this client uses another coordinator.
    """

    def __init__(
        self,
        namespace: str,
        handle: Any = None,
        revive: Callable[[Any], Awaitable[bool]] | None = None,
    ) -> None:
        self.namespace = namespace
        self._handle = handle
        self._revive = revive
        self._settings: Settings | None = None

    def handle(self) -> Any:
        """The coordinator's actor handle."""
        if self._handle is None:
            self._handle = ray.get_actor(COORDINATOR_NAME, namespace=self.namespace)
        return self._handle

    def replace(self, handle: Any, settings: Settings | None = None) -> None:
        """Use another coordinator from now on, with its ``settings`` if the caller has them
        (else they are fetched again)."""
        self._handle = handle
        self._settings = settings

    async def settings(self) -> Settings:
        """The coordinator's settings (durability mode, integrity key...), cached.

        Raises:
            UserError: the coordinator is of another raygents version.
        """
        if self._settings is None:
            self._settings = checked_settings(await self.handle().settings.remote(), self.namespace)
        return self._settings

    def cached_settings(self) -> Settings:
        """The settings fetched by :meth:`settings` earlier."""
        assert self._settings is not None, "settings() must be awaited first"
        return self._settings

    # --- the run table ------------------------------------------------------------------
    async def claim(
        self,
        run_id: str,
        owner: str,
        agent_name: str,
        tenant: str | None = None,
        group: tuple[str | None, str] | None = None,
    ) -> tuple[RunInfo | None, int]:
        """Dispatch a run for ``owner`` (see ``Coordinator.claim``), in a slot of ``tenant``
        (``group``: its ``trace()`` block's ``(group_id, trace_id)``).

        Raises:
            TooManyRuns: the tenant has ``max_concurrent_runs`` runs in flight.
        """
        taken, epoch = await self._call(
            lambda c: c.claim.remote(run_id, owner, agent_name, False, tenant, group)
        )
        return taken, int(epoch)

    async def claim_many(
        self, claims: list[tuple[str, str, str, bool]]
    ) -> list[tuple[RunInfo | None, int]]:
        """Several claims ``(run_id, owner, agent_name, force)`` in one call."""
        return [
            (info, int(epoch))
            for info, epoch in await self._call(lambda c: c.claim_many.remote(claims))
        ]

    async def claim_runs(
        self, claims: list[tuple[str, str, str, str | None]]
    ) -> list[tuple[RunInfo | None, int] | TooManyRuns]:
        """Several claims ``(run_id, owner, agent_name, tenant)`` in one call: per claim its
        answer, or the ``TooManyRuns`` that refused it."""
        return [
            answer if isinstance(answer, TooManyRuns) else (answer[0], int(answer[1]))
            for answer in await self._call(lambda c: c.claim_runs.remote(claims))
        ]

    async def claim_and_load(
        self, run_id: str, owner: str
    ) -> tuple[RunInfo | None, int, list[bytes], RunInfo | None]:
        """Claim a stopped run to resume it, and read its records (see
        ``Coordinator.claim_and_load``)."""
        taken, epoch, blobs, before = await self._call(
            lambda c: c.claim_and_load.remote(run_id, owner)
        )
        return taken, int(epoch), list(blobs), before

    async def unclaim(self, run_id: str, before: RunInfo | None) -> None:
        """Undo a claim whose run could not start; ``before`` is its entry before it."""
        await self._call(lambda c: c.unclaim.remote(run_id, before))

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run's entry, or None."""
        info: RunInfo | None = await self._call(lambda c: c.get_run.remote(run_id))
        return info

    async def list_runs(
        self, status: str | None = None, where: Listed | None = None
    ) -> list[RunInfo]:
        """The run table, oldest update first, optionally of one status, and narrowed by
        ``where``."""
        return list(await self._call(lambda c: c.list_runs.remote(status, where)))

    async def wait(self, run_id: str) -> tuple[RunInfo | None, RunSummary | None]:
        """Wait until the run ends: its final entry and result, if the coordinator has it."""
        info, result = await self._call(lambda c: c.wait.remote(run_id))
        return info, result

    async def suspend(self, requests: Sequence[SuspendRequest]) -> None:
        """Pass suspend (or cancel) requests ``(run_id, cause)`` to the runs wherever they
        are (see ``Coordinator.suspend``)."""
        await self._call(lambda c: c.suspend.remote(requests))

    async def cancel(self, run_id: str) -> RunInfo | None:
        """Cancel a run that has not ended (see ``Coordinator.cancel``); its entry after."""
        info: RunInfo | None = await self._call(lambda c: c.cancel.remote(run_id))
        return info

    async def gc(
        self, older_than_s: float | None, dry_run: bool
    ) -> tuple[float, list[dict[str, Any]]]:
        """Delete ended runs' records and kept results past an age (see ``Coordinator.gc``)."""
        used, rows = await self._call(
            lambda c: c.gc.remote(older_than_s, dry_run), patience_s=600.0
        )
        return float(used), list(rows)

    async def apply(self, notes: list[tuple[str, tuple[Any, ...]]]) -> None:
        """What a driver noted about its runs (claims of generated ids, ends), in order."""
        await self._call(lambda c: c.apply.remote(notes))

    async def load(self, run_id: str) -> list[bytes]:
        """The records of the run's chain, oldest first."""
        return list(await self._call(lambda c: c.load.remote(run_id)))

    async def history(self, run_id: str) -> tuple[list[bytes], bytes | None]:
        """The run's durable records, oldest first, and its completion marker's bytes."""
        blobs, marker = await self._call(lambda c: c.history.remote(run_id))
        return list(blobs), marker

    async def load_state(self, run_id: str) -> tuple[RunState, dict[str, Any]] | None:
        """The run's state at its newest checkpoint and its last record, or None without one.

        Raises:
            CheckpointError: a record cannot be read or the chain does not replay.
        """
        blobs = await self.load(run_id)
        if not blobs:
            return None
        key = (await self.settings()).key
        return checkpoint.restore(blobs, run_id=run_id, key=key)

    # --- the relay of live events --------------------------------------------------------
    async def relay_follow(self, run_id: str, after: int, wait_s: float) -> Follow:
        """The run's events numbered after ``after``, waiting up to ``wait_s`` for some (see
        ``Coordinator.relay_follow``)."""
        found: Follow = await self._call(
            lambda c: c.relay_follow.remote(run_id, after, wait_s), patience_s=600.0
        )
        return found

    async def relay_wanted(
        self, owner: str, version: int, wait_s: float
    ) -> tuple[int, dict[str, tuple[str, int]]]:
        """What the relay wants of driver ``owner``'s runs, once it changes from ``version``
        (see ``Coordinator.relay_wanted``). One try: a driver with no run left must not
        bring a coordinator that is gone back for it."""
        found, wants = await self.handle().relay_wanted.remote(owner, version, wait_s)
        return int(found), dict(wants)

    async def relay_publish(self, owner: str, batches: dict[str, list[RunEvent]]) -> None:
        """Send the relay events of driver ``owner``'s runs it wants (one try: a coordinator
        that restarted wants them again, from the start)."""
        await self.handle().relay_publish.remote(owner, batches)

    # --- agent actors -------------------------------------------------------------------
    async def register_graph(
        self,
        graph_fp: str,
        blob: bytes,
        replicas: dict[str, int],
        definitions: dict[str, str] | None = None,
    ) -> None:
        """Tell the coordinator about an agent graph snapshot (``definitions``: its agents'
        definition fingerprints, see :mod:`~raygents.runtime.driver.definitions`)."""
        await self._call(lambda c: c.register_graph.remote(graph_fp, blob, replicas, definitions))

    async def agent_actors(self, graph_fp: str, name: str) -> list[Any]:
        """The actors serving agent ``name`` of graph ``graph_fp``."""
        return list(await self._call(lambda c: c.agent_actors.remote(graph_fp, name)))

    async def replace_actor(self, graph_fp: str, name: str, stale: Any) -> None:
        """Have a stale agent actor replaced."""
        await self._call(lambda c: c.replace_actor.remote(graph_fp, name, stale))

    async def actor_retiring(self, graph_fp: str, name: str, actor_id: str) -> None:
        """An agent actor retires: no lookup hands it out any more (see
        ``Coordinator.actor_retiring``)."""
        await self._call(lambda c: c.actor_retiring.remote(graph_fp, name, actor_id))

    async def actor_retired(self, actor_id: str) -> bool:
        """Whether the agent actor ``actor_id`` retired (rather than died)."""
        return bool(await self._call(lambda c: c.actor_retired.remote(actor_id)))

    # --- one try each: for callers that handle a lost coordinator themselves ------------
    def save(
        self,
        run_id: str,
        seq: int,
        data: bytes,
        info: RecordEntry,
        durable: bool,
        epoch: int,
        full: bool,
    ) -> Any:
        """Have the coordinator store a checkpoint record (see ``Coordinator.save``); returns
        the call's object ref, for the caller to await."""
        return self.handle().save.remote(run_id, seq, data, info, durable, epoch, full)

    def discard(self, run_id: str, key: str) -> None:
        """Have the coordinator delete a record that a fenced copy of the run wrote (see
        ``Coordinator.discard``); not waited for."""
        self.handle().discard.remote(run_id, key)

    def noted(self, notes: list[Note], ends: Sequence[RunInfo]) -> Any:
        """Report records an agent actor stored itself, and children's ends (see
        ``Coordinator.noted``); returns the call's object ref, its acknowledgement."""
        return self.handle().noted.remote(notes, ends)

    def lease(self, runs: list[tuple[str, int]]) -> Any:
        """Ask for leases on runs' dispatches (see ``Coordinator.lease``); returns the call's
        object ref, whose reply is the run ids granted."""
        return self.handle().lease.remote(runs)

    async def mark_done(self, run_id: str, epoch: int, data: bytes) -> None:
        """Have the coordinator store a completed run's marker (see ``Coordinator.mark_done``)."""
        await self.handle().mark_done.remote(run_id, epoch, data)

    async def lock_session(self, session_id: str, run_id: str) -> str | None:
        """Take a session's lock for ``run_id``: None, or the run that holds it."""
        holder: str | None = await self.handle().lock_session.remote(session_id, run_id)
        return holder

    def beat(self, actor_id: str, lag: float) -> Any:
        """An agent actor's beat (see :mod:`~raygents.runtime.link.liveness`); returns the
        call's object ref, whose reply the beater drops."""
        return self.handle().beat.remote(actor_id, lag)

    async def beat_of(self, actor_id: str) -> tuple[float, float] | None:
        """``(age, loop lag)`` of an agent actor's newest beat, or None."""
        found: tuple[float, float] | None = await self.handle().beat_of.remote(actor_id)
        return found

    async def ready(self) -> None:
        """Return once the coordinator answers (raises what Ray raises when it does not)."""
        await self.handle().__ray_ready__.remote()

    def send_suspends(self, requests: Sequence[SuspendRequest]) -> None:
        """Pass suspend (or cancel) requests ``(run_id, cause)`` to the runs wherever they
        are, as :meth:`suspend` does, without waiting for the coordinator to take them."""
        self.handle().suspend.remote(requests)

    def drive_root(self, envelope: Envelope) -> Any:
        """Have the coordinator drive a top-level run (detached mode, see
        ``Coordinator.drive_root``): an async iterator of object refs, each of an event batch,
        then of ``(outcome, entry)`` (the run table's entry after its end)."""
        return self.handle().drive_root.remote(envelope)

    def stop_agents(self) -> Any:
        """Have the coordinator stop its agent actors; returns the call's object ref."""
        return self.handle().stop_agents.remote()

    async def _call(self, call: Callable[[Any], Any], *, patience_s: float = 120.0) -> Any:
        """``call(handle)``'s answer (a call of the coordinator's actor handle), made again
        while the coordinator restarts, for up to ``patience_s`` seconds."""
        deadline = asyncio.get_running_loop().time() + patience_s
        delay = 0.1
        while True:
            coordinator = self.handle()
            try:
                return await call(coordinator)
            except ray.exceptions.RayTaskError as exc:
                raise raygents_error(exc) from None
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                if asyncio.get_running_loop().time() > deadline:
                    raise
                if self._revive is not None and await self._revive(coordinator):
                    continue
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
