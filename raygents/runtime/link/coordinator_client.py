"""The coordinator as its callers see it: one typed method per call, each waiting out restarts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions

from raygents.errors import RaygentsError, TooManyRuns, UserError
from raygents.records import checkpoint
from raygents.runtime.link.settings import Settings

if TYPE_CHECKING:
    from raygents.core.envelope import RunState
    from raygents.records.runinfo import RunInfo, RunSummary

__all__ = ["COORDINATOR_NAME", "CoordinatorClient", "checked_settings", "raygents_error"]

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
        self, run_id: str, owner: str, agent_name: str, tenant: str | None = None
    ) -> tuple[RunInfo | None, int]:
        """Dispatch a run for ``owner`` (see ``Coordinator.claim``), in a slot of ``tenant``.

        Raises:
            TooManyRuns: the tenant has ``max_concurrent_runs`` runs in flight.
        """
        taken, epoch = await self._call("claim", run_id, owner, agent_name, False, tenant)
        return taken, int(epoch)

    async def claim_many(
        self, claims: list[tuple[str, str, str, bool]]
    ) -> list[tuple[RunInfo | None, int]]:
        """Several claims ``(run_id, owner, agent_name, force)`` in one call."""
        return [(info, int(epoch)) for info, epoch in await self._call("claim_many", claims)]

    async def claim_runs(
        self, claims: list[tuple[str, str, str, str | None]]
    ) -> list[tuple[RunInfo | None, int] | TooManyRuns]:
        """Several claims ``(run_id, owner, agent_name, tenant)`` in one call: per claim its
        answer, or the ``TooManyRuns`` that refused it."""
        return [
            answer if isinstance(answer, TooManyRuns) else (answer[0], int(answer[1]))
            for answer in await self._call("claim_runs", claims)
        ]

    async def claim_and_load(
        self, run_id: str, owner: str
    ) -> tuple[RunInfo | None, int, list[bytes], RunInfo | None]:
        """Claim a stopped run to resume it, and read its records (see
        ``Coordinator.claim_and_load``)."""
        taken, epoch, blobs, before = await self._call("claim_and_load", run_id, owner)
        return taken, int(epoch), list(blobs), before

    async def unclaim(self, run_id: str, before: RunInfo | None) -> None:
        """Undo a claim whose run could not start; ``before`` is its entry before it."""
        await self._call("unclaim", run_id, before)

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run's entry, or None."""
        info: RunInfo | None = await self._call("get_run", run_id)
        return info

    async def list_runs(self, status: str | None = None) -> list[RunInfo]:
        """The run table, optionally of one status."""
        return list(await self._call("list_runs", status))

    async def wait(self, run_id: str) -> tuple[RunInfo | None, RunSummary | None]:
        """Wait until the run ends: its final entry and result, if the coordinator has it."""
        info, result = await self._call("wait", run_id)
        return info, result

    async def suspend(self, requests: list[tuple[str, str]]) -> None:
        """Pass suspend (or cancel) requests ``(run_id, cause)`` to the runs wherever they
        are (see ``Coordinator.suspend``)."""
        await self._call("suspend", requests)

    async def gc(
        self, older_than_s: float | None, dry_run: bool
    ) -> tuple[float, list[dict[str, Any]]]:
        """Delete ended runs' records and kept results past an age (see ``Coordinator.gc``)."""
        used, rows = await self._call("gc", older_than_s, dry_run, patience_s=600.0)
        return float(used), list(rows)

    async def apply(self, notes: list[tuple[str, tuple[Any, ...]]]) -> None:
        """What a driver noted about its runs (claims of generated ids, ends), in order."""
        await self._call("apply", notes)

    async def load(self, run_id: str) -> list[bytes]:
        """The records of the run's chain, oldest first."""
        return list(await self._call("load", run_id))

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

    # --- agent actors -------------------------------------------------------------------
    async def register_graph(self, graph_fp: str, blob: bytes, replicas: dict[str, int]) -> None:
        """Tell the coordinator about an agent graph snapshot."""
        await self._call("register_graph", graph_fp, blob, replicas)

    async def agent_actors(self, graph_fp: str, name: str) -> list[Any]:
        """The actors serving agent ``name`` of graph ``graph_fp``."""
        return list(await self._call("agent_actors", graph_fp, name))

    async def replace_actor(self, graph_fp: str, name: str, stale: Any) -> None:
        """Have a stale agent actor replaced."""
        await self._call("replace_actor", graph_fp, name, stale)

    async def _call(self, method: str, *args: Any, patience_s: float = 120.0) -> Any:
        deadline = asyncio.get_running_loop().time() + patience_s
        delay = 0.1
        while True:
            coordinator = self.handle()
            try:
                return await getattr(coordinator, method).remote(*args)
            except ray.exceptions.RayTaskError as exc:
                raise raygents_error(exc) from None
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                if asyncio.get_running_loop().time() > deadline:
                    raise
                if self._revive is not None and await self._revive(coordinator):
                    continue
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
