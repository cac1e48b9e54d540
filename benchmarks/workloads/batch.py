"""Workload 8: an agent over a dataset with ``raygents.run_batch``.

Items of 2 turns with 4 ``remote=False`` tool calls in the first, model latency 100 ms, durability
``sync`` on the ``file://`` store, ``concurrency=500``, the inputs a generator (never listed) and
the results written to JSON Lines shards (``output=``), so nothing grows with the number of
items in the driver. Two job sizes (2,000 and 10,000 items) show whether the driver's memory is
flat in the number of items.

Compared with the same runs started as a plain batch of 500 concurrent ``raygents.start`` calls
(the ``throughput`` workload's way, at the batch's concurrency), on the same Ray instance: the
median of ``BURSTS`` such batches per repetition, as one batch's rate moves by a quarter between
readings.

Reported: the job's runs/s (items / wall time) against the plain batch's, the driver's peak RSS
per job size, and the time a second run of the 10,000-item job takes to find every item completed
and skip it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import fakes
import machine
import sampling
import stats

from workloads import harness as H

SIZES = (2_000, 10_000)
CONCURRENCY = 500
BURSTS = 3
LATENCY_S = 0.1
K = 4


def _inputs(n: int) -> Iterator[str]:
    return (f"k={K} item {i}" for i in range(n))


def run(mode: str, tmp: str) -> dict[str, Any]:
    import ray

    import raygents as rg

    sizes, reps = (SIZES, 2) if mode != "smoke" else ((100, 400), 1)
    concurrency = CONCURRENCY if mode != "smoke" else 50
    if mode == "full":
        reps = 3
    machine.init_raygents(store=f"file://{os.path.join(tmp, 'store')}", durability="sync")
    agent = rg.Agent(
        "batch_bench",
        tools=fakes.rg_tools("local"),
        model=fakes.rg_model(fakes.ToolTurns(k=K), LATENCY_S),
    )
    plain_inputs = [f"k={K} run {i}" for i in range(concurrency)]
    H.rg_batch(agent, plain_inputs[:10])  # warm up: the agent actors, imports
    rg.run_batch(agent, _inputs(10), job_id="warmup", concurrency=10, progress=False)
    time.sleep(2.0)

    plain: list[float] = []
    jobs: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    skip: list[float] = []
    for rep in range(reps):
        for _ in range(BURSTS):
            machine.settle(max_s=30.0, window_s=1.0)
            out = H.rg_batch(agent, plain_inputs)
            plain.append(concurrency / out["wall_s"])
            machine.log(f"batch: plain {concurrency} concurrent runs, {plain[-1]:.1f} runs/s")
        for n in sizes:
            machine.settle(max_s=30.0, window_s=1.0)
            job_id = f"bench-{n}-{rep}"
            output = os.path.join(tmp, "out", job_id)

            def job(n: int = n, job_id: str = job_id, output: str = output) -> Any:
                return rg.run_batch(
                    agent,
                    _inputs(n),
                    job_id=job_id,
                    concurrency=concurrency,
                    output=output,
                    progress=False,
                )

            with sampling.Sampler(interval_s=0.5, pss=False) as sampler:
                t0 = time.perf_counter()
                result = job()
                wall = time.perf_counter() - t0
            driver = sampler.report.get("by_role", {}).get("driver", {})
            jobs[n].append(
                {
                    "runs_per_s": n / wall,
                    "wall_s": wall,
                    "completed": result.completed,
                    "failed": result.failed,
                    "driver_peak_rss_mb": driver.get("peak_rss_mb"),
                }
            )
            machine.log(
                f"batch: {n} items, {n / wall:.1f} runs/s, {result.failed} failed, "
                f"driver peak RSS {driver.get('peak_rss_mb')} MB"
            )
            if n == sizes[-1]:
                t0 = time.perf_counter()
                again = job()
                skip.append(time.perf_counter() - t0)
                machine.log(f"batch: re-run skipped {again.skipped} items in {skip[-1]:.2f} s")
                if again.skipped != n:
                    raise RuntimeError(f"the re-run skipped {again.skipped} of {n} items")
    rg.shutdown()
    ray.shutdown()

    rows = []
    for n in sizes:
        rows.append(
            {
                "items": n,
                "runs_per_s": stats.summary([j["runs_per_s"] for j in jobs[n]]),
                "failed": sum(j["failed"] for j in jobs[n]),
                "incomplete": sum(n - j["completed"] for j in jobs[n]),
                "driver_peak_rss_mb": max(j["driver_peak_rss_mb"] or 0 for j in jobs[n]),
            }
        )
    plain_rate = stats.summary(plain)
    big, small = rows[-1], rows[0]
    vs_plain = stats.ratio(big["runs_per_s"]["p50"], plain_rate["p50"])
    growth = big["driver_peak_rss_mb"] - small["driver_peak_rss_mb"]
    checks = {
        f"{big['items']} items: runs/s >= 90% of {concurrency} concurrent plain runs": {
            "value": vs_plain,
            "target": ">= 0.9",
            "pass": (vs_plain or 0) >= 0.9,
        },
        f"driver peak RSS <= 400 MB ({big['items']} items)": {
            "value_mb": big["driver_peak_rss_mb"],
            "target": "<= 400 MB",
            "pass": big["driver_peak_rss_mb"] <= 400,
        },
        f"driver peak RSS flat from {small['items']} to {big['items']} items": {
            "value_mb": round(growth, 1),
            "target": "<= +10% of the smaller job's",
            "pass": growth <= 0.1 * small["driver_peak_rss_mb"],
        },
        f"a re-run skips {big['items']} completed items in <= 5 s": {
            "value_s": round(stats.summary(skip)["p50"], 2),
            "target": "<= 5 s",
            "pass": stats.summary(skip)["p50"] <= 5.0,
        },
        "every item completed": {
            "value": sum(r["incomplete"] + r["failed"] for r in rows),
            "target": "0 not completed",
            "pass": all(r["incomplete"] == 0 and r["failed"] == 0 for r in rows),
        },
    }
    return {
        "config": {
            "latency_ms": LATENCY_S * 1000,
            "k": K,
            "tools": "remote=False",
            "durability": "sync",
            "store": "file",
            "concurrency": concurrency,
            "reps": reps,
            "plain_bursts": reps * BURSTS,
        },
        "plain_runs_per_s": plain_rate,
        "rows": rows,
        "rerun_skip_s": stats.summary(skip),
        "checks": checks,
    }
