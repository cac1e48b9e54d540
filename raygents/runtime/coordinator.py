"""The coordinator actor: one per namespace; owns agent actors and the run table."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import ray

from raygents.runtime.actor import AgentActor

__all__ = ["Coordinator", "RunInfo"]

_MAX_CONCURRENCY = 10_000


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


@dataclass
class _Graph:
    blob: bytes
    replicas: dict[str, int]


class Coordinator:
    """Creates and retires agent actors, and keeps the run table. A plain class; the runtime
    wraps it with ``ray.remote`` where it creates it."""

    def __init__(self, namespace: str, detached: bool = False) -> None:
        self.namespace = namespace
        self.detached = detached
        self.graphs: dict[str, _Graph] = {}
        self.actors: dict[tuple[str, str], list[Any]] = {}
        self.runs: dict[str, RunInfo] = {}

    def register_graph(self, graph_fp: str, blob: bytes, replicas: dict[str, int]) -> None:
        """Remember a graph snapshot; actors of older definitions of its agents retire."""
        if graph_fp in self.graphs:
            return
        self.graphs[graph_fp] = _Graph(blob, dict(replicas))
        for (fp, name), handles in list(self.actors.items()):
            if fp != graph_fp and name in replicas:
                for handle in handles:
                    handle.retire.remote()
                del self.actors[(fp, name)]

    def agent_actors(self, graph_fp: str, name: str) -> list[Any]:
        """The actors serving ``name`` in ``graph_fp``, created on first use."""
        key = (graph_fp, name)
        if key not in self.actors:
            graph = self.graphs.get(graph_fp)
            if graph is None:
                raise KeyError(f"unknown agent graph {graph_fp!r}; start the run again")
            count = graph.replicas.get(name, 1)
            self.actors[key] = [self._create(graph, graph_fp, name, i) for i in range(count)]
        return self.actors[key]

    def _create(self, graph: _Graph, graph_fp: str, name: str, index: int) -> Any:
        label = f"agent:{name}@{graph_fp[:8]}" + (f"#{index}" if index else "")
        options: dict[str, Any] = {
            "name": label,
            "namespace": self.namespace,
            "num_cpus": 0,
            "max_concurrency": _MAX_CONCURRENCY,
            "get_if_exists": True,
        }
        if self.detached:
            options["lifetime"] = "detached"
        return (
            ray.remote(AgentActor)
            .options(**options)
            .remote(graph.blob, name, graph_fp, self.namespace)
        )

    def record(self, infos: list[RunInfo]) -> None:
        """Update the run table (batched)."""
        for info in infos:
            self.runs[info.run_id] = info

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
