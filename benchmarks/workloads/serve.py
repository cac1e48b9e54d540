"""Workload: the HTTP API (``raygents.serve``) against ``rg.start`` in process.

A 2-turn run (one trivial tool call inside the agent actor, then the answer; model latency 0).
Measured, each side on the same private Ray instance:

- latency: runs one after the other, ``rg.run`` in process vs ``POST /v1/runs`` with
  ``"wait": true`` through one replica (p50/p99, and the latency HTTP adds);
- throughput at N concurrent runs: ``rg.start`` of N runs then their results, vs N posts with
  ``wait`` from 50 concurrent clients (runs/s, and HTTP's share of in-process);
- SSE: 50 concurrent readers of finished runs' event streams (events/s delivered);
- listing: ``GET /v1/runs?limit=50`` (what the run inspector page polls) once the run table
  holds 2,000 runs (10,000 with ``--full``, the most completed runs it keeps; p50/p99);
- baseline: a FastAPI app in this process (uvicorn) running the OpenAI Agents SDK on the same
  fake model, measured like the HTTP side (latency and runs/s), where it makes sense.

Targets (issue 52): p50 added latency <= 10 ms per run; one replica >= 80% of in-process
runs/s at N = 500.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from typing import Any

import fakes
import machine
import stats

TOKEN = "bench-token-0123456789abcdef"
CLIENTS = 50


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _summary(values: list[float]) -> dict[str, float]:
    s = stats.summary(values)
    return {"p50_ms": stats.ms(s["p50"]), "p99_ms": stats.ms(s["p99"]), "n": len(values)}


async def _post_all(url: str, n: int, body: dict[str, Any], headers: dict[str, str]) -> float:
    import httpx

    limits = httpx.Limits(max_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600, limits=limits) as c:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(n):
            queue.put_nowait(i)

        async def client() -> None:
            while not queue.empty():
                queue.get_nowait()
                answer = await c.post("/v1/runs", json=body)
                assert answer.status_code in (200, 201), answer.text[:300]

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(CLIENTS)))
        return time.perf_counter() - t0


async def _read_all(url: str, run_ids: list[str], headers: dict[str, str]) -> tuple[int, float]:
    import httpx

    limits = httpx.Limits(max_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600, limits=limits) as c:

        async def read(run_id: str) -> int:
            count = 0
            async with c.stream("GET", f"/v1/runs/{run_id}/events") as answer:
                async for line in answer.aiter_lines():
                    count += line.startswith("data:")
            return count

        t0 = time.perf_counter()
        counts = await asyncio.gather(*(read(r) for r in run_ids))
        return sum(counts), time.perf_counter() - t0


def _baseline(latency_reps: int, n: int) -> dict[str, Any]:
    """The SDK behind FastAPI in this process (uvicorn), measured like the HTTP side."""
    import httpx
    import uvicorn
    from agents import Agent as SdkAgent
    from agents import Runner
    from fastapi import FastAPI

    fakes.sdk_setup()
    agent = SdkAgent(
        name="serve_sdk",
        instructions="",
        tools=fakes.sdk_tools("local"),
        model=fakes.sdk_model(fakes.ToolTurns(), 0.0),
    )
    api = FastAPI()

    @api.post("/v1/runs")
    async def start(body: dict[str, Any]) -> dict[str, Any]:
        result = await Runner.run(agent, body["input"])
        return {"status": "completed", "output": result.final_output}

    port = _port()
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    body = {"agent": "serve_sdk", "input": "k=1", "wait": True}
    try:
        with httpx.Client(base_url=url, timeout=60) as c:
            for _ in range(5):
                c.post("/v1/runs", json=body)
            times = []
            for _ in range(latency_reps):
                t = time.perf_counter()
                c.post("/v1/runs", json=body).raise_for_status()
                times.append(time.perf_counter() - t)
        wall = asyncio.run(_post_all(url, n, body, {}))
    finally:
        server.should_exit = True
        thread.join(10)
    return {"latency": _summary(times), "runs_per_s": round(n / wall, 1)}


def run(mode: str, tmp: str) -> dict[str, Any]:
    import httpx
    from ray import serve

    import raygents as rg
    import raygents.serve as rgs

    reps = {"smoke": 5, "quick": 40, "full": 200}[mode]
    n = {"smoke": 20, "quick": 100, "full": 500}[mode]
    machine.init_raygents(store=f"file://{os.path.join(tmp, 'store')}")
    agent = rg.Agent(
        "serve_bench", tools=fakes.rg_tools("local"), model=fakes.rg_model(fakes.ToolTurns(), 0.0)
    )
    rg.run(agent, "k=1")  # (its graph pickled here before Serve is imported)
    url = rgs.start(agent, port=_port(), auth_token=TOKEN)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    body = {"agent": "serve_bench", "input": "k=1", "wait": True}
    try:
        http = httpx.Client(base_url=url, headers=headers, timeout=120)
        for _ in range(5):  # warm up: actors, workers, the replica's driver
            rg.run(agent, "k=1")
            http.post("/v1/runs", json=body).raise_for_status()
        inproc, over_http = [], []
        for _ in range(reps):  # alternating, so that drift hits both sides alike
            t = time.perf_counter()
            rg.run(agent, "k=1")
            inproc.append(time.perf_counter() - t)
            t = time.perf_counter()
            http.post("/v1/runs", json=body).raise_for_status()
            over_http.append(time.perf_counter() - t)
        latency = {"in_process": _summary(inproc), "http": _summary(over_http)}
        latency["added_p50_ms"] = round(
            latency["http"]["p50_ms"] - latency["in_process"]["p50_ms"], 2
        )
        machine.log(f"serve: latency {latency}")

        t0 = time.perf_counter()
        handles = [rg.start(agent, "k=1") for _ in range(n)]
        for h in handles:
            h.result()
        inproc_rate = n / (time.perf_counter() - t0)
        http_rate = n / asyncio.run(_post_all(url, n, body, headers))
        throughput = {
            "n": n,
            "in_process_runs_per_s": round(inproc_rate, 1),
            "http_runs_per_s": round(http_rate, 1),
            "http_share_of_in_process": round(http_rate / inproc_rate, 3),
        }
        machine.log(f"serve: throughput {throughput}")

        runs = http.get("/v1/runs", params={"limit": CLIENTS}).json()["runs"]
        events, wall = asyncio.run(_read_all(url, [r["run_id"] for r in runs], headers))
        sse = {"readers": len(runs), "events": events, "events_per_s": round(events / wall, 1)}
        machine.log(f"serve: sse {sse}")

        table = {"smoke": 300, "quick": 2000, "full": 10000}[mode]
        while (missing := table - len(rg.runs())) > 0:  # (1-turn runs, in chunks)
            for h in [rg.start(agent, "k=0") for _ in range(min(missing, 500))]:
                h.result()
        listed = []  # the page's poll: the newest 50 runs of the table
        for _ in range(reps):
            t = time.perf_counter()
            http.get("/v1/runs", params={"limit": CLIENTS}).raise_for_status()
            listed.append(time.perf_counter() - t)
        listing = {"runs_in_table": len(rg.runs()), "limit": CLIENTS, **_summary(listed)}
        machine.log(f"serve: listing {listing}")
        http.close()
    finally:
        rgs.stop()
        serve.shutdown()
    baseline = _baseline(reps, n)
    machine.log(f"serve: fastapi+sdk baseline {baseline}")
    return {
        "latency": latency,
        "throughput": throughput,
        "sse": sse,
        "listing": listing,
        "fastapi_sdk_baseline": baseline,
        "targets": {
            "added_p50_ms_max": 10,
            "http_share_of_in_process_min_at_500": 0.8,
        },
    }
