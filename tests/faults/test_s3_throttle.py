"""S3 throttling: past a request rate the proxy answers 503 SlowDown (as S3 does past ~3,500
PUTs/s per prefix; here a rate this machine's runs exceed); stores retry, count their retries,
and concurrent runs complete with nothing lost. On a slow store an ``async`` run's write-behind
backlog stays within its bound.

The session's boto3 traffic goes through the fault proxy in front of moto (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from s3_server import Fault, create_bucket

import raygents as rg
from raygents.records import rebuild
from raygents.stores.s3 import S3Store
from raygents.telemetry import metrics
from raygents.testing import FunctionModel, call, calls, text

RATE = 40
"""PUTs per second the proxy lets through to a store's threads."""
RUNS_RATE = 10
"""... and to concurrent runs (a busy 2-core machine puts about 20 a second for them)."""
RUNS = 40
"""Concurrent runs, three PUTs each (two records and the completion marker)."""


@pytest.fixture
def retries(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, dict[str, str]]]:
    """The ``store_retries`` points recorded in this process."""
    got: list[tuple[float, dict[str, str]]] = []

    class Counter:
        def inc(self, value: float, tags: dict[str, str]) -> None:
            got.append((value, tags))

    monkeypatch.setitem(metrics._made, "store_retries", Counter())
    return got


@pytest.fixture
def throttled(session_s3: Any, s3_key_audit: Any) -> Iterator[tuple[Any, str]]:
    """The proxy (the test throttles or slows it) and a bucket of this test's."""
    bucket = s3_key_audit.watch(create_bucket(session_s3.endpoint_url))
    proxy = session_s3.proxy
    yield proxy, bucket
    proxy.clear()


def test_a_throttled_store_retries_every_slowdown_and_counts_it(
    throttled: tuple[Any, str], retries: list[Any]
) -> None:
    proxy, bucket = throttled
    proxy.throttle(RATE)
    store = S3Store(bucket, "runs", backoff_s=0.05)
    slowdowns = proxy.count(method="PUT", fault="error")
    failures: list[BaseException] = []

    def put_many(worker: int) -> None:
        try:
            for i in range(10):
                store.put(f"runs/w{worker}/{i:010d}.ckpt", f"{worker}:{i}".encode())
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=put_many, args=(w,)) for w in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == []
    keys = store.list("runs/")
    assert len(keys) == 120
    for key in keys:  # each holds what was put there
        _, worker, name = key.split("/")
        assert store.get(key) == f"{worker[1:]}:{int(name[:10])}".encode()
    answered = proxy.count(method="PUT", fault="error") - slowdowns
    assert answered > 0, "the puts never went past the rate"
    assert sum(v for v, _ in retries) == answered  # one retry for every SlowDown
    assert {tags["action"] for _, tags in retries} == {"write"}
    assert {tags["store"] for _, tags in retries} == {"s3"}


@rg.tool(num_cpus=0)
def note(n: int) -> str:
    """Note a number."""
    return f"noted {n}"


def _one_turn(request: rg.ModelRequest) -> rg.ModelResponse:
    if any(m.role == "tool" for m in request.messages):
        return text("noted")
    return calls(call("note", {"n": 1}, id="n1"))


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_concurrent_runs_on_a_throttled_store_complete_with_nothing_lost(
    own_raygents: None, rt: None, throttled: tuple[Any, str], durability: str
) -> None:
    proxy, bucket = throttled
    rg.shutdown()
    rg.init(
        namespace=f"s3throttle-{durability}-{os.urandom(3).hex()}",
        store=f"s3://{bucket}/runs",
        durability=durability,
    )
    agent = rg.Agent("throttled", tools=[note], model=FunctionModel(_one_turn))
    proxy.throttle(RUNS_RATE)
    before = proxy.count(method="PUT", fault="error")
    handles = [rg.start(agent, f"run {i}") for i in range(RUNS)]
    results = [h.result(timeout_s=120) for h in handles]
    assert [r.final_output for r in results] == ["noted"] * RUNS
    assert proxy.count(method="PUT", fault="error") > before, "no PUT was throttled"
    # nothing lost: every run's completion marker, with its result, is in the store
    store = S3Store(bucket, "runs")
    for r in results:
        listed = rebuild.listing(r.run_id, store.list(f"runs/{r.run_id}/"))
        assert listed.done is not None, f"run {r.run_id} has no completion marker"


BACKLOG_TURNS = 40
"""Tool turns of the long run: two records each, far more than its write-behind allows."""
PUT_DELAY_S = 0.15
"""How long the slow store takes for each PUT."""


def _long_run(request: rg.ModelRequest) -> rg.ModelResponse:
    """``BACKLOG_TURNS`` tool turns, then the times of the model calls (the actor's clock)."""
    done = sum(m.role == "tool" for m in request.messages)
    if done == 0:
        _long_run.calls = []  # type: ignore[attr-defined]
    _long_run.calls.append(time.time())  # type: ignore[attr-defined]
    if done >= BACKLOG_TURNS:
        return text(json.dumps(_long_run.calls))  # type: ignore[attr-defined]
    return calls(call("note", {"n": done}, id=f"n{done}"))


def test_an_async_run_waits_once_its_write_behind_is_full_on_a_slow_store(
    own_raygents: None, rt: None, throttled: tuple[Any, str]
) -> None:
    """Past its write-behind bound (32 records) an ``async`` run waits for the store, so its
    backlog stays bounded: a run's records are put one after another, so the model call
    after record k (k > 32) comes after k - 32 PUTs, each ``PUT_DELAY_S`` or more."""
    proxy, bucket = throttled
    rg.shutdown()
    rg.init(
        namespace=f"s3backlog-{os.urandom(3).hex()}",
        store=f"s3://{bucket}/runs",
        durability="async",
    )
    agent = rg.Agent(
        "backlogged", tools=[note], model=FunctionModel(_long_run), max_turns=BACKLOG_TURNS + 5
    )
    proxy.always(Fault.delay(PUT_DELAY_S), method="PUT")
    result = rg.run(agent, "go")
    times = json.loads(result.final_output)
    beyond = 2 * BACKLOG_TURNS - 32  # records the run cannot leave behind it
    assert times[-1] - times[0] >= beyond * PUT_DELAY_S * 0.95
