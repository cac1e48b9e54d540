"""Run affinity on Ray Serve: the request router that keeps each run's model calls on the
replica that answered its first, so a replica's prefix cache serves the run's growing prompt.

The router is Serve's own extension point (``ray.serve.request_router.RequestRouter``), set on
the model's deployment with ``request_router_config``; it runs in every process that holds a
handle to the deployment (an agent actor, for :class:`~raygents.models.served.ServeModel`).
The run reaches it as the request's ``session_id`` (``handle.options(session_id=run_id)``).
Only this module and ``served.py`` of ``models/`` import Ray.
"""

from __future__ import annotations

import hashlib
import random
from collections import OrderedDict
from typing import Any

from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import (
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from raygents.errors import UserError

__all__ = ["RunAffinityRouter", "affinity_router_config"]

DEFAULT_MAX_RUNS = 100_000
"""How many runs' replicas a router remembers at most (the least recently used are forgotten,
and routed by their hash again)."""


class RunAffinityRouter(RequestRouter):
    """Routes every request of one run to the replica that served the run's first request,
    while that replica is alive; then to another, which becomes the run's replica.

    A request names its run by its ``session_id`` (``ServeModel`` sets the run id). A run's
    first request, or one whose replica is gone, goes to the live replica its id ranks first
    by rendezvous hashing (every process that holds a handle picks the same one while the
    replicas stay the same), which is remembered: replicas added later do not move it. A
    request waits for its run's replica while that is busy (``max_ongoing_requests``) rather
    than lose its prefix cache. Requests without a ``session_id`` go to the less loaded of
    two replicas picked at random, as Serve's default router does.

    Set it with :func:`affinity_router_config`, or directly:
    ``RequestRouterConfig(request_router_class="raygents.RunAffinityRouter")``, with
    ``request_router_kwargs={"max_runs": ...}``: how many runs to remember (default
    100,000; the least recently used are forgotten and routed by their hash again).
    """

    def initialize_state(self, **kwargs: Any) -> None:
        """Take the router's options (``request_router_kwargs``).

        Raises:
            UserError: an unknown option, or ``max_runs`` that is not an int >= 1.
        """
        unknown = sorted(set(kwargs) - {"max_runs"})
        if unknown:
            raise UserError(f"RunAffinityRouter takes only 'max_runs', got {unknown!r}")
        max_runs = kwargs.get("max_runs", DEFAULT_MAX_RUNS)
        if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
            raise UserError(f"RunAffinityRouter max_runs must be an int >= 1, got {max_runs!r}")
        self._max_runs = max_runs
        self._homes: OrderedDict[str, ReplicaID] = OrderedDict()

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        """The replicas to try for ``pending_request``, best rank first."""
        if not candidate_replicas:
            return []
        run = pending_request.metadata.session_id if pending_request is not None else ""
        if not run:
            return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]
        assert pending_request is not None
        pending_request.routing_context.should_backoff = True  # (wait between rounds)
        home = self._home(run)
        if home is not None:
            for replica in candidate_replicas:
                if replica.replica_id == home:
                    return [[replica]]
        # a new run, or its replica is gone: the run moves to its first by hash, for good
        first = max(candidate_replicas, key=lambda replica: _weight(run, replica))
        self._remember(run, first.replica_id)
        return [[first]]

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        """Remember the replica a run's request went to (called where Serve enforces
        ``max_ongoing_requests`` strictly)."""
        if pending_request.metadata.session_id:
            self._remember(pending_request.metadata.session_id, replica_id)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        """Forget a dead replica, and the runs it served (they move on their next request)."""
        super().on_replica_actor_died(replica_id)
        for run in [run for run, home in self._homes.items() if home == replica_id]:
            del self._homes[run]

    def _remember(self, run: str, replica_id: ReplicaID) -> None:
        self._homes[run] = replica_id
        self._homes.move_to_end(run)
        while len(self._homes) > self._max_runs:
            self._homes.popitem(last=False)

    def _home(self, run: str) -> ReplicaID | None:
        home = self._homes.get(run)
        if home is not None:
            self._homes.move_to_end(run)
        return home

    def runs_on(self, replica_id: ReplicaID) -> int:
        """How many remembered runs live on ``replica_id``."""
        return sum(1 for home in self._homes.values() if home == replica_id)


def _weight(run: str, replica: RunningReplica) -> bytes:
    """The rendezvous hash of ``run`` on ``replica``: a new run goes to the highest."""
    key = f"{run}\x00{replica.replica_id.unique_id}".encode()
    return hashlib.blake2b(key, digest_size=8).digest()


def affinity_router_config(*, max_runs: int = DEFAULT_MAX_RUNS) -> RequestRouterConfig:
    """The ``request_router_config`` that gives a deployment run affinity, for
    ``@serve.deployment(request_router_config=...)`` or Ray Serve LLM's
    ``LLMConfig(deployment_config={"request_router_config": ...})``.

    Raises:
        UserError: ``max_runs`` is not an int >= 1.
    """
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise UserError(f"max_runs must be an int >= 1, got {max_runs!r}")
    options: dict[str, Any] = {  # (Ray's stubs mistype the fields; the values are right)
        "request_router_class": f"{__name__}.RunAffinityRouter",
        "request_router_kwargs": {"max_runs": max_runs},
    }
    return RequestRouterConfig(**options)
