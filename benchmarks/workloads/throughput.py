"""Workload 2: throughput under concurrency.

N = 10, 100, 1000 concurrent runs (and 10,000 in full mode and with ``run.py --big``: without
tool tasks or the SDK, see ``BIG``); model latency 100 ms; each run is 2 turns with 4 trivial tool
calls in the first. raygents uses durability ``sync`` on the ``file://`` store, and starts the
runs one after the other with ``raygents.start`` (as a driver script would), then waits for them
all. The SDK runs them with ``asyncio.gather(Runner.run(...))`` in-process (no durability). The
Ray floor is N concurrent calls of one bare async actor doing the same (sleep, 4 bare tasks,
sleep).

The repetitions of the three N are interleaved, each N's spread evenly over the workload (see
:func:`schedule`): this machine's speed drifts by tens of percent over minutes, and the check of
N = 1000 against raygents' best N compares medians of different N.

Reported per side and N: runs/s (N / wall time of the batch), per-run latency p50/p99, and CPU
seconds and peak memory (RSS and PSS) of every process involved: the driver and everything below
it (Ray's GCS, raylet, workers, the coordinator and agent actors), sampled from a separate
process every 0.5 s. With N = 10,000, the marginal memory of a concurrent run: the slope of peak
PSS between N = 1,000 and N = 10,000.
"""

from __future__ import annotations

import os
import time
from typing import Any

import fakes
import machine
import rayfloor
import sampling
import stats

from workloads import harness as H

NS = (10, 100, 1000)
BIG = 10_000
"""The N of full mode's last point, where raygents runs its tools in the actor
(``remote=False``): 40,000 tool tasks at once are a test of Ray's scheduler, not of raygents."""
BIG_SKIPS = ("raygents_task", "sdk")
"""The sides that do not run N = ``BIG``: tool tasks (above), and the SDK, whose one asyncio
loop had not finished 10,000 concurrent runs after 25 minutes (its CPU per run grows with N);
its memory slope is taken between its two largest N instead."""
LATENCY_S = 0.1
K = 4


def schedule(reps: dict[int, int], ns: tuple[int, ...]) -> list[int]:
    """The order of the repetitions: one round per repetition of the most repeated N, and each
    N in ``reps[n]`` rounds spread evenly over them (the last round has every N).

    >>> schedule({10: 4, 100: 2, 1000: 1}, (10, 100, 1000))
    [10, 10, 100, 10, 10, 100, 1000]
    """
    rounds = max(reps[n] for n in ns)
    return [
        n for r in range(rounds) for n in ns if (r + 1) * reps[n] // rounds > r * reps[n] // rounds
    ]


def run(mode: str, tmp: str) -> dict[str, Any]:  # noqa: C901
    import ray
    from agents import Agent as SdkAgent

    import raygents as rg

    quick = mode == "quick"
    reps = {10: 3, 100: 2, 1000: 1} if quick else {10: 10, 100: 5, 1000: 3}
    ns = NS
    big_n = BIG if mode == "full" or machine.big() else None
    if big_n is not None:  # (full mode, and run.py --big at quick's repetitions)
        reps, ns = {**reps, BIG: 1}, (*NS, BIG)
    if mode == "smoke":  # (100 plays N = 10,000, to check the path)
        reps, ns, big_n = {10: 1, 100: 1}, (10, 100), 100
    fakes.sdk_setup()
    machine.init_raygents(store=f"file://{os.path.join(tmp, 'store')}", durability="sync")
    time.sleep(2.0)
    idle_cold = sampling.idle_footprint()
    logic = fakes.ToolTurns(k=K)
    rg_agents = {
        kind: rg.Agent(
            f"tp_{kind}", tools=fakes.rg_tools(kind), model=fakes.rg_model(logic, LATENCY_S)
        )
        for kind in ("task", "local")
    }
    sdk_agent = SdkAgent(
        name="tp_sdk",
        instructions="",
        tools=fakes.sdk_tools("task"),
        model=fakes.sdk_model(logic, LATENCY_S),
    )
    fl = rayfloor.floor()
    floor_actor = fl["FloorAgent"].remote()

    def inputs(n: int) -> list[str]:
        return [f"k={K} run {i}" for i in range(n)]

    sides = {
        "raygents_task": lambda n: H.rg_batch(rg_agents["task"], inputs(n)),
        "raygents_local": lambda n: H.rg_batch(rg_agents["local"], inputs(n)),
        "sdk": lambda n: H.run_async(H.sdk_batch_async(sdk_agent, inputs(n))),
        "ray_floor": lambda n: H.run_async(
            H.floor_batch_async(
                [lambda: floor_actor.tools_turns.remote(LATENCY_S, K, 1, False)] * n
            )
        ),
    }
    for fn in sides.values():  # warm up: actors, imports, a few workers
        fn(10)
    time.sleep(2.0)
    idle_warm = sampling.idle_footprint()
    pool = idle_warm["by_role"].get("ray::IDLE worker", {}).get("count", 0)

    per_n: dict[int, dict[str, list[dict[str, Any]]]] = {
        n: {s: [] for s in sides if n != big_n or s not in BIG_SKIPS} for n in ns
    }
    for n in schedule(reps, ns):
        names = list(per_n[n])
        rep = len(per_n[n][names[0]])
        order = names[rep % len(names) :] + names[: rep % len(names)]
        machine.log(f"throughput: N={n}, repetition {rep + 1} of {reps[n]}")
        for side in order:
            # neither the idle workers another side's tasks left behind nor the CPU of
            # their ending must count here
            settled = machine.settle_workers(pool)
            settled["quiet"] = machine.settle(max_s=30.0, window_s=1.0)
            with sampling.Sampler(interval_s=0.5) as sampler:
                out = sides[side](n)
            out["sampler"] = sampler.report
            out["settled"] = settled
            out["load"] = machine.load()
            per_n[n][side].append(out)
            machine.log(
                f"  {side}: {n / out['wall_s']:.1f} runs/s, wall {out['wall_s']:.2f} s, "
                f"start {out['start_s']:.2f} s, errors {len(out['errors'])}, "
                f"recovered {out.get('recovered', '-')}, "
                f"peak PSS {sampler.report.get('peak_total_pss_mb')} MB, "
                f"load {out['load']['loadavg'][0]:.1f}, after {settled['waited_s']} s "
                f"waiting for {settled['idle_workers']} idle workers and "
                f"{settled['quiet']['waited_s']} s for a quiet machine"
            )
            time.sleep(1.0)

    rows: list[dict[str, Any]] = []
    for n in ns:
        per_side = per_n[n]
        row: dict[str, Any] = {"n": n, "reps": reps[n], "sides": {}}
        for side, outs in per_side.items():
            rates = [n / o["wall_s"] for o in outs]
            lat = [x for o in outs for x in o["latencies"]]
            s_lat = stats.summary(lat)
            best = max(outs, key=lambda o: n / o["wall_s"])
            row["sides"][side] = {
                "runs_per_s": stats.summary(rates),
                "latency_p50_ms": stats.ms(s_lat["p50"]),
                "latency_p99_ms": stats.ms(s_lat["p99"]),
                "start_all_s": stats.summary([o["start_s"] for o in outs]),
                "errors": sum(len(o["errors"]) for o in outs),
                "error_sample": next((o["errors"][0] for o in outs if o["errors"]), None),
                **(
                    {"recovered": sum(o["recovered"] for o in outs)}
                    if "recovered" in outs[0]
                    else {}
                ),
                "cpu_s_total": stats.summary([o["sampler"].get("cpu_s_total", 0) for o in outs]),
                "peak_total_pss_mb": max(o["sampler"].get("peak_total_pss_mb", 0) for o in outs),
                "peak_total_rss_mb": max(o["sampler"].get("peak_total_rss_mb", 0) for o in outs),
                "processes_by_role": best["sampler"].get("by_role"),
                "processes": best["sampler"].get("processes"),
                "load": [o["load"] for o in outs],
                "settled": [o["settled"] for o in outs],
            }
        for side in ("raygents_task", "raygents_local", "ray_floor"):
            if "runs_per_s" in row["sides"].get(side, {}) and "sdk" in row["sides"]:
                row["sides"][side]["ratio_vs_sdk_runs_per_s"] = stats.ratio(
                    row["sides"][side]["runs_per_s"]["p50"],
                    row["sides"]["sdk"]["runs_per_s"]["p50"],
                )
        rows.append(row)

    rg.shutdown()
    ray.shutdown()

    def rate(side: str, n: int) -> float | None:
        got = next(r for r in rows if r["n"] == n)["sides"].get(side, {})
        return got["runs_per_s"]["p50"] if "runs_per_s" in got else None

    def pss(side: str, n: int) -> float | None:
        got = next(r for r in rows if r["n"] == n)["sides"].get(side, {})
        return got.get("peak_total_pss_mb")

    top = max(n for n in ns if n != big_n)
    checks: dict[str, Any] = {}
    slopes: dict[str, float] = {}
    if big_n is not None:
        below = max(n for n in ns if n < big_n)
        for side in ("raygents_local", "sdk", "ray_floor"):
            high_n = big_n if side not in BIG_SKIPS else below  # (the SDK: its two largest N)
            low_n = max((n for n in ns if n < high_n), default=None)
            high, low = pss(side, high_n), pss(side, low_n) if low_n is not None else None
            if high is not None and low is not None and low_n is not None:
                label = side if high_n == big_n else f"{side} (N={low_n} to {high_n})"
                slopes[label] = round(1024 * (high - low) / (high_n - low_n), 1)  # KB per run
        best = max(x for x in (rate("raygents_local", n) for n in ns) if x is not None)
        vs_best = stats.ratio(rate("raygents_local", big_n), best)
        checks[f"N={big_n} runs/s >= 90% of raygents' best N (raygents_local)"] = {
            "value": vs_best,
            "target": ">= 0.9",
            "pass": (vs_best or 0) >= 0.9,
        }
        extra = (pss("raygents_local", big_n) or 0) - idle_cold["total_pss_mb"]
        checks[f"{big_n} concurrent runs use <= 3 GB beyond an idle Ray instance (PSS)"] = {
            "value_mb": round(extra, 1),
            "target": "<= 3072 MB",
            "pass": extra <= 3072,
        }
    for side in ("raygents_task", "raygents_local"):
        if rate(side, top) is None:
            continue
        best = max(x for x in (rate(side, n) for n in ns if n != big_n) if x is not None)
        vs_best = stats.ratio(rate(side, top), best)
        checks[f"N={top} runs/s >= 90% of raygents' best N ({side})"] = {
            "value": vs_best,
            "target": ">= 0.9",
            "pass": (vs_best or 0) >= 0.9,
        }
    # tool tasks: against the Ray floor, which misses the SDK-relative targets itself here
    vs_floor = stats.ratio(rate("raygents_task", top), rate("ray_floor", top))
    checks[f"N={top} runs/s >= 0.9x the Ray floor's (raygents_task)"] = {
        "value": vs_floor,
        "target": ">= 0.9",
        "pass": (vs_floor or 0) >= 0.9,
    }
    over = (pss("raygents_task", top) or 0) - (pss("ray_floor", top) or 0)
    checks[f"N={top} peak memory <= the Ray floor's (raygents_task, PSS)"] = {
        "value_mb": round(over, 1),
        "target": "<= +0 MB",
        "pass": over <= 0,
    }
    # in the actor (remote=False): against the SDK
    vs_sdk = stats.ratio(rate("raygents_local", top), rate("sdk", top))
    checks[f"N={top} runs/s >= 2x SDK (raygents_local)"] = {
        "value": vs_sdk,
        "target": ">= 2",
        "pass": (vs_sdk or 0) >= 2,
    }
    extra = (pss("raygents_local", top) or 0) - idle_cold["total_pss_mb"]
    checks[
        f"{top} concurrent runs use <= 1.5 GB beyond an idle Ray instance (raygents_local, PSS)"
    ] = {
        "value_mb": round(extra, 1),
        "target": "<= 1536 MB",
        "pass": extra <= 1536,
    }
    return {
        "config": {
            "latency_ms": LATENCY_S * 1000,
            "k": K,
            "durability": "sync",
            "store": "file",
            "reps": reps,
        },
        "idle_after_init": idle_cold,
        "idle_after_warmup": idle_warm,
        "rows": rows,
        "marginal_kb_per_run": slopes,
        "checks": checks,
    }
