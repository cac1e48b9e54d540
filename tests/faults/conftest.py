"""Fault-injection fixtures: a namespace with fast heartbeats, a ledger, and actor lookups."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import faultkit
import pytest
import ray
from faultkit import Ledger

import raygents as rg
from raygents.runtime.driver import client


class FaultSpace:
    """The namespace of a test module's tests: raygents on a namespace and file store of its
    own, with quick heartbeats and recovery, made again (a new namespace) whenever a test asks
    for another durability mode than the test before. Its tests share the namespace's
    coordinator (they do not kill it); each test's agent actors are stopped after it
    (:meth:`clear`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.durability = ""
        self.url = ""

    def use(self, durability: str) -> str:
        """raygents up on this module's namespace of ``durability``; returns its store URL."""
        if durability != self.durability:
            rg.shutdown()
            namespace = f"faults-{durability}-{os.urandom(3).hex()}"
            self.url = f"file://{self.root / namespace / 'ckpt'}"
            rg.init(
                namespace=namespace,
                store=self.url,
                durability=durability,
                heartbeat_s=0.5,
                stale_after_s=5.0,
                max_attempts=5,
            )
            self.durability = durability
        return self.url

    def clear(self) -> None:
        """Stop the agent actors the last test made (runs after it start fresh ones): idle
        actors that are left cost CPU for as long as they live."""
        runtime = client.current()
        ray.get(runtime.directory.client.stop_agents(), timeout=30)
        runtime.directory._actors.clear()


@pytest.fixture(scope="module")
def fault_space(
    ray_session: None, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FaultSpace]:
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)
    cloudpickle.register_pickle_by_value(faultkit)
    space = FaultSpace(tmp_path_factory.mktemp("faults"))
    yield space
    rg.shutdown()  # (a later test that uses `rt` brings the session's raygents back)


@pytest.fixture
def faulty(fault_space: FaultSpace, request: pytest.FixtureRequest) -> Iterator[str]:
    """raygents on the module's namespace and file store, with quick heartbeats and recovery;
    ``sync`` durability unless the test parametrizes this fixture with another mode. Yields
    the store's URL."""
    yield fault_space.use(getattr(request, "param", "sync"))
    fault_space.clear()


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.jsonl")
