"""Workload 7: how far one coordinator goes.

R reporter actors (plain Ray actors standing in for drivers and agent actors) drive synthetic
runs through the namespace's coordinator with the calls raygents makes for each run: the
driver's claim of a generated run id and, later, its end with the run's result (``apply``, one
call per batch of B runs, as the driver coalesces them), and the agent actor's reports of the
run's records (``noted``: two records of 300 bytes per run, one call per batch). Each reporter
sends its next batch when the coordinator has answered the last (closed loop): the coordinator
is never more than R batches behind, so the runs/s measured is the rate it sustains without a
growing backlog, and the call latency shows how far behind it runs. No model, no agent actor,
no store traffic for records (``memory://``: the clean-up of a completed run lists and deletes
nothing), so the figure is the run table's ceiling.

Reported: runs/s and reports/s (records reported per second), the coordinator process's CPU
seconds per 1,000 runs, the p50/p99 latency of a batch's three calls, and the coordinator's RSS
after each 10,000 finished runs (finished runs' entries and results are bounded: it must be
flat after the first 10,000).
"""

from __future__ import annotations

import os
import time
from typing import Any

import machine
import stats

BATCH = 100
REPORTERS = 4
RECORD_BYTES = 300


def _reporter_class() -> Any:
    import ray

    @ray.remote(num_cpus=0)
    class Reporter:
        """Drives batches of synthetic runs through the coordinator."""

        def __init__(self, namespace: str, index: int) -> None:
            from raygents.runtime.driver.client import COORDINATOR_NAME

            self.coordinator = ray.get_actor(COORDINATOR_NAME, namespace=namespace)
            self.index = index
            self.next = 0

        def batches(self, count: int) -> list[float]:
            """Drive ``count`` batches; the wall time of each (claims, reports, ends)."""
            from raygents.records.runinfo import RunInfo

            took = []
            data = b"r" * RECORD_BYTES
            for _ in range(count):
                ids = [f"bench-{self.index}-{self.next + i}" for i in range(BATCH)]
                self.next += BATCH
                started = time.perf_counter()
                claims = [("claim", (run_id, "bench", "agent")) for run_id in ids]
                ray.get(self.coordinator.apply.remote(claims))
                notes = [
                    (run_id, seq, 1, data, ("running", "agent", seq, None), seq == 1)
                    for run_id in ids
                    for seq in (1, 2)
                ]
                ray.get(self.coordinator.noted.remote(notes, []))
                ends = [
                    (
                        "finish",
                        (
                            RunInfo(run_id, "completed", "agent", 2, seq=2),
                            {
                                "final_output": "done",
                                "messages": [],
                                "usage": None,
                                "turns": 2,
                                "agent_name": "agent",
                            },
                        ),
                    )
                    for run_id in ids
                ]
                ray.get(self.coordinator.apply.remote(ends))
                took.append(time.perf_counter() - started)
            return took

    return Reporter


def _coordinator_process(namespace: str) -> Any:
    import psutil
    import ray

    from raygents.runtime.driver.client import COORDINATOR_NAME

    coordinator = ray.get_actor(COORDINATOR_NAME, namespace=namespace)
    return psutil.Process(ray.get(coordinator.__ray_call__.remote(lambda _self: os.getpid())))


def run(mode: str, tmp: str) -> dict[str, Any]:
    import ray

    import raygents as rg

    total = {"smoke": 2_000, "quick": 40_000, "full": 100_000}[mode]
    machine.init_raygents(store="memory://")
    namespace = rg.runtime.client.current().namespace
    rg.runs()  # (the coordinator is up)
    process = _coordinator_process(namespace)
    reporters = [_reporter_class().remote(namespace, i) for i in range(REPORTERS)]
    ray.get([r.batches.remote(1) for r in reporters])  # warm up: 400 runs
    step = 10_000 if total >= 10_000 else total
    per_round = max(1, step // (BATCH * REPORTERS))
    rss_mb: list[tuple[int, float]] = []
    latencies: list[float] = []
    finished, cpu0, t0 = 0, process.cpu_times(), time.perf_counter()
    while finished < total:
        rounds = ray.get([r.batches.remote(per_round) for r in reporters])
        latencies.extend(s for took in rounds for s in took)
        finished += per_round * BATCH * REPORTERS
        rss_mb.append((finished, round(process.memory_info().rss / 2**20, 1)))
    wall = time.perf_counter() - t0
    cpu1 = process.cpu_times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    table_size = len(rg.runs())
    rg.shutdown()
    first = next((mb for n, mb in rss_mb if n >= 10_000), rss_mb[0][1])
    growth = round(rss_mb[-1][1] - first, 1)
    runs_per_s = round(finished / wall, 1)
    return {
        "config": {
            "runs": finished,
            "reporters": REPORTERS,
            "batch": BATCH,
            "records_per_run": 2,
            "record_bytes": RECORD_BYTES,
            "store": "memory",
        },
        "runs_per_s": runs_per_s,
        "reports_per_s": round(2 * finished / wall, 1),
        "cpu_s_per_1000_runs": round(1000 * cpu / finished, 3),
        "batch_latency_ms": stats.summary([1000 * s for s in latencies]),
        "rss_mb": rss_mb,
        "rss_growth_after_10k_mb": growth,
        "run_table_entries": table_size,
        "checks": {
            "runs/s it keeps up with": {
                "target": ">= 5,000",
                "value": runs_per_s,
                "pass": runs_per_s >= 5_000,
            },
            "RSS growth after the first 10,000 finished runs": {
                "target": "<= 20 MB",
                "value_mb": growth,
                "pass": growth <= 20,
            },
        },
    }
