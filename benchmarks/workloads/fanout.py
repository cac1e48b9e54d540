"""Workload 3: fan-out through agent-as-tool.

An orchestrator asks for M = 1, 8, 64 calls of a sub-agent tool in one turn; each sub-agent run
makes one tool call and answers; then the orchestrator answers. Four model calls lie on the
critical path (model latency 100 ms). The sub-agent's tool is either trivial or burns 200 ms of
pure-Python CPU.

Sides: ``raygents_task`` (trivial tool as a num_cpus=0 task, or the CPU tool as a task with the
default num_cpus=1), ``raygents_local`` (trivial tool with remote=False; not for CPU tools), the
SDK (``Agent.as_tool``; sync tools run in its thread pool, under the GIL), and the Ray floor
(an orchestrator actor calling a sub actor M times, each doing sleep, one task, sleep).

With CPU tools, each timed run starts from the same Ray worker pool (``rayfloor.warm_pool``: a
backlog of trivial one-CPU tasks just before it), not from whatever the previous side left.

Ideal lines: the C-core floor (C = the Ray instance's CPUs, ``run.py --cpus``, 2 by default) is
4 x latency + ceil(M / C) x 200 ms (CPU tools) or 4 x latency (trivial); the 1-core floor (what a
single Python process can do) is 4 x latency + M x 200 ms.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from typing import Any

import fakes
import machine
import rayfloor
import sampling
import stats

MS = (1, 8, 64)
BIG_MS = (*MS, 256)
"""With ``run.py --big``: M = 256 too (one repetition; the SDK, whose CPU tools share one GIL,
only runs it with trivial tools)."""
SMOKE_BIG_MS = (1, 8, 16)
LATENCY_S = 0.1


def ideal(m: int, tool: str, cores: int) -> float:
    cpu = math.ceil(m / cores) * fakes.CPU_BURN_S if tool == "cpu" else 0.0
    return 4 * LATENCY_S + cpu


def _cpu_summary(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Median CPU seconds over the repetitions: all processes, and by process role."""
    roles = sorted({role for r in reports for role in r.get("by_role", {})})
    by_role = {
        role: round(
            statistics.median(
                r.get("by_role", {}).get(role, {}).get("cpu_s", 0.0) for r in reports
            ),
            3,
        )
        for role in roles
    }
    return {
        "cpu_s_total_p50": round(statistics.median(r.get("cpu_s_total", 0.0) for r in reports), 3),
        "cpu_s_by_role_p50": dict(sorted(by_role.items(), key=lambda kv: -kv[1])),
        "cpu_s_total_each": [r.get("cpu_s_total") for r in reports],
    }


def run(mode: str, tmp: str) -> dict[str, Any]:  # noqa: C901
    import ray
    from agents import Agent as SdkAgent
    from agents import Runner

    import raygents as rg

    quick = mode == "quick"
    cores = machine.cpus()

    def reps(m: int, tool: str) -> int:
        if m > 64 or mode == "smoke":
            return 1
        return 3 if quick else 5 if (m == 64 and tool == "cpu") else 10

    fakes.sdk_setup()
    machine.init_raygents(store=f"file://{os.path.join(tmp, 'store')}")
    sdk_loop = fakes.SdkLoop()
    fl = rayfloor.floor()
    floor_orch = fl["FloorAgent"].remote()
    floor_sub = fl["FloorAgent"].remote()

    def sdk_graph(kind: str) -> Any:
        worker = SdkAgent(
            name=f"fo_worker_{kind}",
            instructions="",
            tools=fakes.sdk_tools(kind),
            model=fakes.sdk_model(
                fakes.ToolTurns(k=1, tool="burn" if kind == "cpu" else "noop"), LATENCY_S
            ),
        )
        return SdkAgent(
            name=f"fo_orch_{kind}",
            instructions="",
            tools=[worker.as_tool("worker", "a worker")],
            model=fakes.sdk_model(fakes.FanOut(), LATENCY_S),
        )

    rows: list[dict[str, Any]] = []
    pool: int | None = None
    ms = MS if not machine.big() else BIG_MS
    if mode == "smoke":
        ms = (1, 8) if not machine.big() else SMOKE_BIG_MS
    for tool in ("trivial", "cpu"):
        kinds = {"raygents_task": "task" if tool == "trivial" else "cpu"}
        if tool == "trivial":
            kinds["raygents_local"] = "local"
        rg_agents = {
            side: fakes.rg_fanout_agent(kind, f"fo_{kind}", LATENCY_S)
            for side, kind in kinds.items()
        }
        sdk_agent = sdk_graph("task" if tool == "trivial" else "cpu")
        cpu = tool == "cpu"
        sides: dict[str, Any] = {
            side: (lambda m, a=a: rg.run(a, f"m={m}")) for side, a in rg_agents.items()
        }
        sides["sdk"] = lambda m, a=sdk_agent: sdk_loop.run(Runner.run(a, f"m={m}"))
        sides["ray_floor"] = lambda m, tool=tool: ray.get(
            floor_orch.fan_out.remote(floor_sub, LATENCY_S, m, tool)
        )
        for fn in sides.values():  # warm up: actors, workers
            fn(2)
        if pool is None:  # the idle workers Ray keeps
            time.sleep(2.0)
            pool = machine.idle_workers()
        for m in ms:
            machine.log(f"fanout: tool={tool} M={m}")
            times: dict[str, list[float]] = {s: [] for s in sides}
            # CPU seconds of every process during each run (the tools fill both cores, so
            # every other CPU second stretches the wall time by about half a second)
            cpus: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
            sample = cpu and m == max(ms)
            names = [s for s in sides if not (s == "sdk" and cpu and m > 64)]
            n = reps(m, tool)
            load0 = machine.load()
            waits: list[float] = []
            for rep in range(n):
                order = names[rep % len(names) :] + names[: rep % len(names)]
                for side in order:
                    if cpu:
                        # without the idle workers the trivial cases' zero-CPU tasks left,
                        # on a quiet machine
                        waits.append(machine.settle_workers(pool)["waited_s"])
                        waits.append(machine.settle(max_s=30.0, window_s=1.0)["waited_s"])
                        rayfloor.warm_pool(max(m, 8))
                    with (
                        sampling.Sampler(interval_s=0.5, pss=False)
                        if sample
                        else contextlib.nullcontext() as s
                    ):
                        t = time.perf_counter()
                        out = sides[side](m)
                        times[side].append(time.perf_counter() - t)
                    if sample:
                        cpus[side].append(s.report)
                    if side.startswith("raygents") and out.final_output != "merged":
                        raise RuntimeError(f"unexpected output {out.final_output!r}")
            row: dict[str, Any] = {
                "tool": tool,
                "m": m,
                "reps": n,
                "load_before": load0,
                "load_after": machine.load(),
                "settle_s": {"runs": len(waits) // 2, "total": round(sum(waits), 1)},
                "ideal_s": ideal(m, tool, cores),
                "ideal_1core_s": ideal(m, tool, 1),
                "sides": {},
            }
            for side, vals in times.items():
                if not vals:
                    continue
                s = stats.summary(vals)
                row["sides"][side] = {
                    "wall_p50_s": round(s["p50"], 4),
                    "min_s": round(s["min"], 4),
                    "max_s": round(s["max"], 4),
                    "vs_ideal": round(s["p50"] / row["ideal_s"], 3),
                }
                if cpus[side]:
                    row["sides"][side]["cpu"] = _cpu_summary(cpus[side])
            sdk50 = row["sides"].get("sdk", {}).get("wall_p50_s")
            for side in row["sides"]:
                if side != "sdk" and sdk50 is not None:
                    row["sides"][side]["speedup_vs_sdk"] = stats.ratio(
                        sdk50, row["sides"][side]["wall_p50_s"]
                    )
            rows.append(row)
            machine.log(
                "  "
                + ", ".join(f"{s}={v['wall_p50_s']:.3f}s" for s, v in row["sides"].items())
                + f" (ideal {cores}-core {row['ideal_s']:.2f}s)"
            )

    sdk_loop.close()
    rg.shutdown()
    ray.shutdown()
    m_checked = 64 if 64 in ms else max(ms)
    big = next(r for r in rows if r["tool"] == "cpu" and r["m"] == m_checked)
    rgs, floor = big["sides"]["raygents_task"], big["sides"]["ray_floor"]
    vs_floor = stats.ratio(rgs["wall_p50_s"], floor["wall_p50_s"])
    rgs["cpu_per_child_vs_floor"] = stats.ratio(  # (the same M children on both sides)
        (rgs.get("cpu") or {}).get("cpu_s_total_p50"),
        (floor.get("cpu") or {}).get("cpu_s_total_p50"),
    )
    checks = {
        "fan-out M=64 CPU tools: wall time <= 1.08x the Ray floor's (p50)": {
            "value": vs_floor,
            "target": "<= 1.08",
            "pass": (vs_floor or 99) <= 1.08,
        },
        "fan-out M=64 CPU tools >= 1.8x faster than the SDK": {
            "value": rgs["speedup_vs_sdk"],
            "target": ">= 1.8",
            "pass": (rgs["speedup_vs_sdk"] or 0) >= 1.8,
        },
    }
    return {
        "config": {
            "latency_ms": LATENCY_S * 1000,
            "cpu_burn_ms": fakes.CPU_BURN_S * 1000,
            "cores": cores,
        },
        "rows": rows,
        "checks": checks,
    }
