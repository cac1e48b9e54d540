"""Workload 6: cold start.

Each repetition is a fresh Python process (``python workloads/coldstart.py <side> <dir>``) that
imports the framework and does its first run, then a second one: a 2-turn run with one trivial
tool call (a num_cpus=0 task for raygents), model latency 0. raygents' first ``raygents.run``
includes starting Ray (``raygents.init`` is implicit in the first run; here it is explicit, so
that the parts can be told apart), the coordinator and agent actors and a tool worker. The SDK
and the Ray floor (``ray.init``, an actor's first call, a first task) are measured the same way.
Times are from the parent's ``Popen`` and from the child's first line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SIDES = ("raygents", "sdk", "ray_floor")


def child(side: str, tmp: str) -> None:
    t0 = time.perf_counter()
    sys.path.insert(0, os.path.dirname(HERE))
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        marks[name] = round(time.perf_counter() - t0, 4)

    if side == "raygents":
        import raygents as rg

        mark("import")
        import fakes
        import machine

        machine.init_raygents(store=f"file://{os.path.join(tmp, 'store')}")
        mark("init")
        agent = rg.Agent(
            "cold", tools=fakes.rg_tools("task"), model=fakes.rg_model(fakes.ToolTurns(k=1), 0.0)
        )
        rg.run(agent, "k=1")
        mark("first_run")
        rg.run(agent, "k=1")
        mark("second_run")
        rg.shutdown()
    elif side == "sdk":
        from agents import Agent, Runner

        mark("import")
        import fakes

        fakes.sdk_setup()
        agent = Agent(
            name="cold",
            instructions="",
            tools=fakes.sdk_tools("task"),
            model=fakes.sdk_model(fakes.ToolTurns(k=1), 0.0),
        )
        mark("init")
        Runner.run_sync(agent, "k=1")
        mark("first_run")
        Runner.run_sync(agent, "k=1")
        mark("second_run")
    else:
        import ray

        mark("import")
        import machine
        import rayfloor

        machine.register_by_value()
        ray.init(
            address="local",
            num_cpus=machine.cpus(),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
        mark("init")
        fl = rayfloor.floor()
        actor = fl["FloorAgent"].remote()
        ray.get(actor.tools_turns.remote(0.0, 1, 1, False))
        mark("first_run")
        ray.get(actor.tools_turns.remote(0.0, 1, 1, False))
        mark("second_run")
        ray.shutdown()
    print("RESULT " + json.dumps(marks), flush=True)


def run(mode: str, tmp: str) -> dict[str, Any]:
    import machine
    import stats

    reps = {"smoke": 1, "quick": 2}.get(mode, 5)
    samples: dict[str, list[dict[str, float]]] = {s: [] for s in SIDES}
    for rep in range(reps):
        for side in SIDES[rep % len(SIDES) :] + SIDES[: rep % len(SIDES)]:
            t = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), side, tmp],
                capture_output=True,
                text=True,
                timeout=300,
                env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"),
            )
            total = time.perf_counter() - t
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise RuntimeError(f"{side} cold start failed: {proc.stderr[-2000:]}")
            marks = json.loads(line[len("RESULT ") :])
            marks["process_total"] = round(total, 4)
            samples[side].append(marks)
            machine.log(f"coldstart {side}: {marks}")
    out: dict[str, Any] = {"reps": reps, "sides": {}}
    for side, runs in samples.items():
        keys = runs[0].keys()
        out["sides"][side] = {
            k: {
                q: round(v, 3)
                for q, v in stats.summary([r[k] for r in runs]).items()
                if q in ("p50", "min", "max")
            }
            for k in keys
        }
        first = stats.summary([r["first_run"] - r["init"] for r in runs])
        out["sides"][side]["first_run_only"] = {
            q: round(first[q], 3) for q in ("p50", "min", "max")
        }
        second = stats.summary([r["second_run"] - r["first_run"] for r in runs])
        out["sides"][side]["second_run_only"] = {
            q: round(second[q], 3) for q in ("p50", "min", "max")
        }
    out["raw"] = samples
    return out


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2])
