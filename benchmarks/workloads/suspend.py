"""Workload 5: suspend and resume storms.

N = 1,000 runs (quick and full mode; 20 in smoke mode) of an agent that makes one tool call per turn
(``remote=False``: a storm of num_cpus=0 tool tasks is its own problem, see workload 2) with a
100 ms model, forever, until its dynamic instructions say ``phase: finish``. Once every run
has finished at least one tool call, all are suspended at once (``handle.suspend()`` for each);
we time every ``SuspendedError`` from that moment. Then every run is resumed with the context
``finish`` (its instructions change, and the model answers at once), and we time the resumes and
the completions. raygents uses durability ``sync`` on the ``file://`` store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

import fakes
import machine
import sampling
import stats

LATENCY_S = 0.1


def phase(ctx: Any, agent: Any) -> str:
    return f"phase: {ctx.context}"


async def _gather(handles: list[Any], t0: float) -> tuple[list[float], dict[str, int]]:
    done_at: list[float] = [0.0] * len(handles)
    kinds: dict[str, int] = {}

    async def one(i: int, h: Any) -> None:
        try:
            await h
            kind = "completed"
        except Exception as exc:
            kind = type(exc).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
        done_at[i] = time.perf_counter() - t0

    await asyncio.gather(*(one(i, h) for i, h in enumerate(handles)))
    return done_at, kinds


def run(mode: str, tmp: str) -> dict[str, Any]:
    import ray

    import raygents as rg

    n = 1000
    if mode == "smoke":
        n = 20
    machine.init_raygents(store=f"file://{os.path.join(tmp, 'store')}", durability="sync")
    agent = rg.Agent(
        "storm",
        instructions=phase,
        tools=fakes.rg_tools("local"),
        model=fakes.rg_model(fakes.UntilFinish(), LATENCY_S),
        max_turns=100_000,
    )
    # warm up: one run through suspend and resume
    h = rg.start(agent, "go", context="loop")
    time.sleep(0.5)
    h.suspend()
    with contextlib.suppress(rg.SuspendedError):
        h.result(60)
    rg.resume(h.run_id, agent=agent, context="finish").result(60)

    out: dict[str, Any] = {
        "config": {
            "n": n,
            "latency_ms": LATENCY_S * 1000,
            "tool": "remote=False (in the actor)",
            "durability": "sync",
            "store": "file",
        }
    }
    with sampling.Sampler(interval_s=1.0) as sampler:
        t = time.perf_counter()
        handles = [rg.start(agent, f"go {i}", context="loop") for i in range(n)]
        out["start_all_s"] = round(time.perf_counter() - t, 3)
        machine.log(f"suspend: started {n} runs in {out['start_all_s']} s")
        deadline = time.time() + 300
        while time.time() < deadline:
            ready = sum(
                1 for h in handles if any(e.type == "tool_end" for e in h.events().snapshot())
            )
            if ready == n or any(h.done() for h in handles):
                break
            time.sleep(0.2)
        out["running_before_suspend"] = ready
        out["wait_until_all_running_s"] = round(time.perf_counter() - t - out["start_all_s"], 3)
        out["load_at_suspend"] = machine.load()

        t0 = time.perf_counter()
        for h in handles:
            h.suspend()
        out["suspend_calls_s"] = round(time.perf_counter() - t0, 4)
        done_at, kinds = asyncio.run(_gather(handles, t0))
        s = stats.summary(done_at)
        out["suspend"] = {
            "outcomes": kinds,
            "latency_p50_s": round(s["p50"], 3),
            "latency_p99_s": round(s["p99"], 3),
            "latency_max_s": round(s["max"], 3),
        }
        machine.log(f"suspend: {kinds}, p50 {s['p50']:.2f} s, max {s['max']:.2f} s")
        suspended = len(rg.runs(status="suspended"))
        out["suspend"]["coordinator_says_suspended"] = suspended

        t1 = time.perf_counter()
        resumed = []
        for h in handles:
            resumed.append(rg.resume(h.run_id, agent=agent, context="finish"))
        out["resume_calls_s"] = round(time.perf_counter() - t1, 3)
        done_at, kinds = asyncio.run(_gather(resumed, t1))
        s = stats.summary(done_at)
        total = max(done_at)
        out["resume"] = {
            "outcomes": kinds,
            "resume_calls_per_s": round(n / out["resume_calls_s"], 1),
            "completed_per_s": round(n / total, 1),
            "all_done_s": round(total, 3),
            "latency_p50_s": round(s["p50"], 3),
            "latency_p99_s": round(s["p99"], 3),
        }
        machine.log(f"resume: {out['resume']}")
    out["processes"] = {
        k: sampler.report.get(k)
        for k in ("wall_s", "cpu_s_total", "peak_total_pss_mb", "peak_total_rss_mb", "by_role")
    }
    rg.shutdown()
    ray.shutdown()
    max_s = out["suspend"]["latency_max_s"]
    all_susp = out["suspend"]["outcomes"].get("SuspendedError", 0) == n
    out["checks"] = {
        f"suspending {n} runs returns every SuspendedError within 5 s after in-flight steps": {
            "value_s": max_s,
            "target": f"<= 5 s + one in-flight step (~{LATENCY_S + 0.1:.1f} s)",
            "pass": all_susp and max_s <= 5.0 + LATENCY_S + 0.1,
        },
        f"resuming {n} runs at >= 100 runs/s (to completion)": {
            "value": out["resume"]["completed_per_s"],
            "target": ">= 100 runs/s",
            "pass": out["resume"]["completed_per_s"] >= 100
            and out["resume"]["outcomes"].get("completed", 0) == n,
        },
    }
    return out
