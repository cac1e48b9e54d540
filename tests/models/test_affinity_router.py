"""RunAffinityRouter on its own (no Serve running): a run's requests stay on the replica of its
first, move when it dies, and every router picks the same replica for a new run."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ray.serve._private.common import (
    DeploymentHandleSource,
    DeploymentID,
    RequestMetadata,
)
from ray.serve.request_router import PendingRequest, ReplicaID

import raygents as rg
from raygents.errors import UserError
from raygents.models.affinity import RunAffinityRouter

DEPLOYMENT = DeploymentID(name="llm", app_name="app")


def _router(**kwargs: Any) -> RunAffinityRouter:
    router = RunAffinityRouter(DEPLOYMENT, DeploymentHandleSource.UNKNOWN)
    router.initialize_state(**kwargs)
    return router


def _replicas(*names: str) -> list[Any]:
    return [
        SimpleNamespace(
            replica_id=ReplicaID(unique_id=name, deployment_id=DEPLOYMENT),
            max_ongoing_requests=5,
        )
        for name in names
    ]


def _request(run: str) -> PendingRequest:
    metadata = RequestMetadata(request_id="r", internal_request_id="i", session_id=run)
    return PendingRequest(args=[], kwargs={}, metadata=metadata)


async def _choose(router: RunAffinityRouter, replicas: list[Any], run: str) -> list[str]:
    ranks = await router.choose_replicas(replicas, _request(run))
    return [replica.replica_id.unique_id for rank in ranks for replica in rank]


async def test_a_run_stays_on_its_first_replica_even_when_replicas_are_added() -> None:
    router = _router()
    two = _replicas("a", "b")
    first = await _choose(router, two, "run-1")
    assert len(first) == 1
    for _ in range(5):
        assert await _choose(router, two, "run-1") == first
    many = _replicas("a", "b", "c", "d", "e", "f")
    assert await _choose(router, many, "run-1") == first


async def test_runs_spread_over_the_replicas_and_routers_agree() -> None:
    replicas = _replicas("a", "b")
    one, other = _router(), _router()  # (two processes' routers)
    chosen = [await _choose(one, replicas, f"run-{i}") for i in range(100)]
    assert {c[0] for c in chosen} == {"a", "b"}
    assert [await _choose(other, replicas, f"run-{i}") for i in range(100)] == chosen


async def test_a_run_moves_when_its_replica_dies_and_stays_moved() -> None:
    router = _router()
    replicas = _replicas("a", "b")
    runs = [f"run-{i}" for i in range(20)]
    homes = {run: (await _choose(router, replicas, run))[0] for run in runs}
    dead = next(r for r in replicas if r.replica_id.unique_id == homes["run-0"])
    router.on_replica_actor_died(dead.replica_id)
    assert router.runs_on(dead.replica_id) == 0
    alive = [r for r in replicas if r is not dead]
    for run in runs:
        assert await _choose(router, alive, run) == [alive[0].replica_id.unique_id]
    # a replacement starts: the moved runs stay where they went, the others where they were
    again = [*alive, *_replicas("c")]
    for run in runs:
        assert await _choose(router, again, run) == [alive[0].replica_id.unique_id]


async def test_a_run_whose_replica_left_the_set_moves() -> None:
    router = _router()
    home = (await _choose(router, _replicas("a", "b"), "run-1"))[0]
    rest = [r for r in _replicas("a", "b", "c") if r.replica_id.unique_id != home]
    moved = await _choose(router, rest, "run-1")
    assert moved != [home] and await _choose(router, _replicas("a", "b", "c"), "run-1") == moved


async def test_requests_without_a_run_get_two_candidates() -> None:
    router = _router()
    assert sorted(await _choose(router, _replicas("a", "b", "c"), "")) in (
        ["a", "b"],
        ["a", "c"],
        ["b", "c"],
    )
    assert await _choose(router, _replicas("a"), "") == ["a"]
    assert await _choose(router, [], "run-1") == []


async def test_the_least_recently_used_runs_are_forgotten_past_max_runs() -> None:
    router = _router(max_runs=2)
    replicas = _replicas("a", "b")
    for run in ("run-1", "run-2", "run-1", "run-3"):
        await _choose(router, replicas, run)
    assert list(router._homes) == ["run-1", "run-3"]


async def test_a_request_routed_elsewhere_is_remembered_there() -> None:
    router = _router()
    replicas = _replicas("a", "b")
    home = (await _choose(router, replicas, "run-1"))[0]
    other = next(r for r in replicas if r.replica_id.unique_id != home)
    router.on_request_routed(_request("run-1"), other.replica_id, None)
    assert await _choose(router, replicas, "run-1") == [other.replica_id.unique_id]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_runs": 0}, "max_runs must be an int >= 1"),
        ({"max_runs": True}, "max_runs must be an int >= 1"),
        ({"max_runs": "9"}, "max_runs must be an int >= 1"),
        ({"max_run": 9}, "takes only 'max_runs', got \\['max_run'\\]"),
    ],
)
def test_bad_router_options_are_user_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(UserError, match=match):
        _router(**kwargs)


def test_the_router_config_names_the_router() -> None:
    config = rg.affinity_router_config(max_runs=50)
    assert config.request_router_class == "raygents.models.affinity.RunAffinityRouter"
    assert config.request_router_kwargs == {"max_runs": 50}
    assert config.get_request_router_class() is RunAffinityRouter
    with pytest.raises(UserError, match="max_runs must be an int >= 1, got 0"):
        rg.affinity_router_config(max_runs=0)
