"""S3 throttling at load: 2,000 concurrent one-turn runs on an S3 store behind the session's
fault proxy, throttled to a PUT rate they exceed, in ``sync`` and in ``async``. Every run
completes with its answer and its completion marker in the store, and the retries the
SlowDowns caused show on Ray's metrics endpoint as an operator scrapes it: the counter lives
in the agent actor's process, so the runs go through a driver of their own with a metrics
port (``throttle_driver.py``), on a Ray instance of its own.

Figures (runs/s, SlowDowns, retries, peak RSS) are printed (``-s``), never asserted.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from driver_process import driver_process, ready_json
from s3_server import create_bucket

from raygents.records import rebuild
from raygents.stores.s3 import S3Store

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).parent
RUNS = int(os.environ.get("RAYGENTS_THROTTLE_RUNS", "2000"))
"""Concurrent runs (the issue's 2,000); each puts two or three objects (its records and its
completion marker)."""
RATE = 150
"""PUTs per second the proxy lets through. The runs on this 2-core machine put about 300 a
second through the proxy and moto when nothing holds them back, so at 150 the proxy answers
SlowDown to a good share of them, while the rate stays high enough for botocore's retries
(four attempts, backoff up to 20 s) and the store's two further rounds to get every put
through: a put fails only after 12 SlowDowns in a row."""
ACTOR_BYTES_PER_RUN = 256 * 1024
"""What 2,000 runs in flight may add to the agent actor's memory, per run: a one-turn run holds
a few kB of messages and its records (the write-behind holds at most 32 records of a run)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def bucket(session_s3: Any, s3_key_audit: Any) -> Iterator[str]:
    """A bucket of this test's; the proxy's throttle is cleared after it."""
    yield s3_key_audit.watch(create_bucket(session_s3.endpoint_url))
    session_s3.proxy.clear()


def _env() -> dict[str, str]:
    """This process's environment (the session's AWS variables point at the proxy), with the
    tests' folders to import from and none of Ray's own settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "OPENAI_"))}
    root = HERE.parent.parent
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (root, HERE.parent, HERE))
    return env


def _send(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _not_lost(bucket: str, run_ids: list[str]) -> list[str]:
    """The runs of ``run_ids`` without a completion marker in the store."""
    keys = S3Store(bucket, "runs").list("runs/")
    by_run: dict[str, list[str]] = {}
    for key in keys:
        by_run.setdefault(key.split("/")[1], []).append(key)
    missing = []
    for run_id in run_ids:
        if rebuild.listing(run_id, by_run.get(run_id, [])).done is None:
            missing.append(run_id)
    return missing


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_2000_concurrent_runs_on_a_throttled_store_complete_and_their_retries_are_scraped(
    session_s3: Any, bucket: str, durability: str
) -> None:
    proxy = session_s3.proxy
    args = [str(HERE / "throttle_driver.py"), str(_free_port())]
    args += [f"s3://{bucket}/runs", durability, str(RUNS)]
    with driver_process(args, cwd=HERE, env=_env()) as proc:
        ready = ready_json(proc, "the throttle driver")
        assert ready["ready"] == "noted"
        proxy.throttle(RATE)
        slowdowns = proxy.count(method="PUT", fault="error")
        puts = proxy.count(method="PUT")
        _send(proc, "go")
        ran = ready_json(proc, "the throttle driver")["runs"]
        proxy.clear()
        answered = proxy.count(method="PUT", fault="error") - slowdowns
        sent = proxy.count(method="PUT") - puts
        _send(proc, str(answered))
        scraped = ready_json(proc, "the throttle driver")
    retries = scraped["retries"]
    runs_per_s = RUNS / ran["wall_s"]
    print(
        f"\n{durability}: {RUNS} runs in {ran['wall_s']:.1f} s ({runs_per_s:.0f} runs/s); "
        f"{sent} PUTs sent, {answered} answered SlowDown at {RATE}/s; retries scraped "
        f"{retries}; peak RSS {ran['peak_rss'] >> 20} MB, agent actor "
        f"{ready['actor_rss'] >> 20} MB before, {ran['actor_peak_rss'] >> 20} MB at peak"
    )
    assert ran["errors"] == {}
    assert ran["outputs"] == ["noted"] * RUNS
    assert _not_lost(bucket, ran["run_ids"]) == []
    assert answered > 0, "no PUT went past the rate"
    # One retry for every SlowDown: each was answered to a put that botocore sent again (its
    # answer's RetryAttempts) or that the store sent again in a further round, and none failed
    # (a put fails, uncounted, only after its last attempt, and no run failed).
    assert retries == {"write": answered}, scraped["lines"]
    if durability == "async":
        # Its write-behind bounds what the actor holds per run in flight (at most 32 records).
        grown = ran["actor_peak_rss"] - ready["actor_rss"]
        assert grown < RUNS * ACTOR_BYTES_PER_RUN, (grown >> 20, ready["actor_rss"] >> 20)
