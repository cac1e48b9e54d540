"""Workload: a model served on the same Ray cluster, through its handle or over HTTP.

The CPU fake of Ray Serve LLM's ``LLMServer`` (``tests/fake_llm_server.py``: deterministic
answers, no model) with two replicas and run affinity, behind its OpenAI HTTP route (as Serve
LLM's ingress is). Measured on the same private Ray instance and the same deployment:

- per-call overhead: sequential ``respond`` calls from this process, ``ServeModel`` (the
  deployment handle) vs ``OpenAIChatModel`` on the Serve HTTP route (p50/p99 and the
  difference), alternating so that drift hits both sides alike; the fake answers at once, so
  the latency is all transport;
- affinity: concurrent 3-turn runs (two tool calls, then the answer) with each model, and
  the share of each run's turns that the replica of its first turn served (1.0 for
  ``ServeModel`` with ``RunAffinityRouter``; HTTP calls carry no run, so Serve's router
  spreads them).
"""

from __future__ import annotations

import asyncio
import collections
import os
import socket
import sys
import time
from typing import Any

import machine
import stats

APP = "bench-models"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _summary(values: list[float]) -> dict[str, float]:
    s = stats.summary(values)
    return {"p50_ms": stats.ms(s["p50"]), "p99_ms": stats.ms(s["p99"]), "n": len(values)}


async def _latencies(models: dict[str, Any], reps: int) -> dict[str, list[float]]:
    from raygents.core.messages import Message, ModelRequest

    request = ModelRequest(agent_name="bench", messages=(Message("user", "hello"),))
    times: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():  # warm up: handles, clients, connections
        for _ in range(5):
            await model.respond(request)
    for _ in range(reps):
        for name, model in models.items():
            t = time.perf_counter()
            await model.respond(request)
            times[name].append(time.perf_counter() - t)
    return times


def _first_replica_share(calls: list[tuple[str, str, bool, str]], tag: str) -> dict[str, Any]:
    """The share of turns served by their run's first replica, runs told apart by their
    first user message (``<tag> ...``)."""
    turns: dict[str, list[str]] = collections.defaultdict(list)
    for replica, _, _, first in calls:
        if first.split(" ", 1)[1].startswith(tag):
            turns[first].append(replica)
    total = sum(len(t) for t in turns.values())
    on_first = sum(t.count(t[0]) for t in turns.values())
    return {"runs": len(turns), "turns": total, "first_replica_share": round(on_first / total, 3)}


def run(mode: str, tmp: str) -> dict[str, Any]:
    sys.path.insert(0, os.path.join(machine.REPO_DIR, "tests"))  # (the fake deployment)
    import fake_llm_server
    import ray
    from ray import cloudpickle, serve

    import raygents as rg

    reps = {"smoke": 20, "quick": 200, "full": 1000}[mode]
    n = {"smoke": 10, "quick": 50, "full": 200}[mode]
    machine.init_raygents(store=f"file://{os.path.join(tmp, 'store')}")
    cloudpickle.register_pickle_by_value(fake_llm_server)
    ledger = fake_llm_server.Ledger.remote()
    port = _port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(fake_llm_server.deployment(ledger, http=True), name=APP, route_prefix="/fake")
    handle_model = rg.ServeModel(fake_llm_server.DEPLOYMENT, app_name=APP, model="fake-llm")
    http_model = rg.OpenAIChatModel(
        "fake-llm", base_url=f"http://127.0.0.1:{port}/fake/v1", max_retries=0
    )
    try:
        times = asyncio.run(_latencies({"serve_model": handle_model, "http": http_model}, reps))
        overhead = {name: _summary(values) for name, values in times.items()}
        overhead["http_minus_handle_p50_ms"] = round(
            overhead["http"]["p50_ms"] - overhead["serve_model"]["p50_ms"], 2
        )
        machine.log(f"models: per-call {overhead}")

        tool = rg.tool(num_cpus=0)(weather)
        affinity: dict[str, Any] = {}
        for side, model in (("serve_model", handle_model), ("http", http_model)):
            ray.get(ledger.clear.remote())
            agent = rg.Agent(f"bench_models_{side}", tools=[tool], model=model)
            handles = [rg.start(agent, f"weather {side}-{i} 2") for i in range(n)]
            for h in handles:
                h.result(timeout_s=300)
            affinity[side] = _first_replica_share(ray.get(ledger.all.remote()), side)
        machine.log(f"models: affinity {affinity}")
    finally:
        serve.shutdown()
    return {"per_call": overhead, "affinity": affinity, "replicas": 2, "runs": n}


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"
