"""Fault-injection fixtures: a namespace with fast heartbeats, a ledger, and actor lookups."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import faultkit
import pytest
from faultkit import Ledger

import raygents as rg


@pytest.fixture
def faulty(
    own_raygents: None, ray_session: None, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[str]:
    """raygents on a fresh namespace and file store, with quick heartbeats and recovery;
    ``sync`` durability unless the test parametrizes this fixture with another mode."""

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)
    cloudpickle.register_pickle_by_value(faultkit)
    url = f"file://{tmp_path / 'ckpt'}"
    rg.shutdown()
    rg.init(
        namespace=f"faults-{os.urandom(3).hex()}",
        store=url,
        durability=getattr(request, "param", "sync"),
        heartbeat_s=0.5,
        stale_after_s=5.0,
        max_attempts=5,
    )
    yield url
    rg.shutdown()


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.jsonl")
