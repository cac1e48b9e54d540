"""S3 throttling at load: 2,000 concurrent one-turn runs on an S3 store behind the session's
fault proxy, throttled to a PUT rate they exceed, in ``sync`` and in ``async``. Every run
completes with its answer and its completion marker in the store, and the retries the
SlowDowns caused show on Ray's metrics endpoint as an operator scrapes it: the counter lives
in the agent actor's process, so the runs go through a driver of their own with a metrics
port (``throttle_driver.py``), on a Ray instance of its own.

Figures (runs/s, SlowDowns, retries, peak RSS) are printed (``-s``), never asserted.
"""

from __future__ import annotations

import os
import socket
import subprocess
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
"""Concurrent runs (the issue's 2,000; ``RAYGENTS_THROTTLE_RUNS`` changes it); each puts three
objects (two records and its completion marker)."""
RATE = 100
"""PUTs per second the proxy lets through. 2,000 runs at once put about 80 a second on average
through the proxy and moto on this 2-core machine, in bursts past 100: at 100 the proxy
answers SlowDown to about one PUT in 18 (at 150 to one in 40, too few to show much). The rate
stays high enough for botocore's retries (four attempts, backoff up to 20 s) and the store's
two further rounds to get every put through: a put fails only after 12 SlowDowns in a row."""
ACTOR_BYTES_PER_RUN = 128 * 1024
"""What the runs in flight may add to the agent actor's memory, per run (about 50 kB measured
here): a run holds its state (a few kB of messages) and the records it has not seen written,
at most its write-behind bound (32) in ``async``; a one-turn run has three."""


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


def _failed(records: list[Any], *, put: bool) -> int:
    """The requests of ``records`` (PUTs, or all others) that failed in a way a client sends
    again: a SlowDown or a 5xx answered (by the proxy or by moto), or a reset connection."""
    return sum(
        1 for r in records if (r.method == "PUT") == put and (r.status is None or r.status >= 500)
    )


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
        first = len(proxy.records)
        _send(proc, "go")
        ran = ready_json(proc, "the throttle driver")["runs"]
        proxy.clear()
        during = proxy.records[first:]
        sent = sum(r.method == "PUT" for r in during)
        answered = sum(r.method == "PUT" and r.fault == "error" for r in during)
        failed_puts = _failed(during, put=True)  # (the SlowDowns, and moto's own 5xx if any)
        _send(proc, str(failed_puts))
        scraped = ready_json(proc, "the throttle driver")
        failed_others = _failed(proxy.records[first:], put=False)
    retries = scraped["retries"]
    others = sum(v for k, v in retries.items() if k != "write")
    runs_per_s = RUNS / ran["wall_s"]
    print(
        f"\n{durability}: {RUNS} runs in {ran['wall_s']:.1f} s ({runs_per_s:.0f} runs/s); "
        f"{sent} PUTs sent, {answered} answered SlowDown at {RATE}/s; retries scraped "
        f"{retries} ({failed_others} other requests failed); peak RSS "
        f"{ran['peak_rss'] >> 20} MB, agent actor {ready['actor_rss'] >> 20} MB before, "
        f"{ran['actor_peak_rss'] >> 20} MB at peak"
    )
    assert ran["errors"] == {}
    assert ran["outputs"] == ["noted"] * RUNS
    assert _not_lost(bucket, ran["run_ids"]) == []
    assert answered > 0, "no PUT went past the rate"
    # One write retry for every SlowDown (and any 5xx a PUT met): each was answered to a put
    # that botocore sent again (its answer's RetryAttempts) or that the store sent again in a
    # further round, and none failed (a put fails, uncounted, only after its last attempt).
    assert retries.get("write") == failed_puts, scraped["lines"]
    # Reads, lists and deletes are not throttled; moto answers a few with 500 (a list racing
    # the clean-up's deletes of completed runs' records): never a retry without a failure.
    assert others <= failed_others, scraped["lines"]
    # What the actor holds while the store holds its runs back stays bounded per run: in
    # ``async`` the runs go on while their records wait, each run at most its write-behind
    # bound of them (a one-turn run never reaches it: test_s3_throttle.py shows the bound).
    grown = ran["actor_peak_rss"] - ready["actor_rss"]
    assert grown < RUNS * ACTOR_BYTES_PER_RUN, (grown >> 20, ready["actor_rss"] >> 20)
