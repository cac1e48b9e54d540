"""How fast Ray starts worker processes, and what that does to zero-CPU tool tasks: raygents'
settings for a local instance against Ray's defaults (benchmarks/README.md, finding 17).

    python benchmarks/worker_starts.py [--n 1000] [--reps 2]

While all its workers are busy, a process that submits tasks keeps up to ten requests for a
new worker open per kind of task (Ray's ``max_pending_lease_requests_per_scheduling_category``),
and the node starts as many workers at once as it has CPUs
(``worker_maximum_startup_concurrency``). A local instance that ``raygents.init`` starts asks
for one new worker at a time per two CPUs (``raygents``); ``one start at a time`` also starts
one worker at a time (raygents' setting from b47c1e7 to 4730b48, which made the demo slower).
Each repetition runs every setting, in rotating order, each in a fresh process with a fresh
local Ray instance (2 CPUs, all with raygents' idle-worker limit), and measures there:

* ``raygents_task`` and ``ray_floor``: N concurrent 2-turn runs with 4 zero-CPU tool tasks and
  a 100 ms model (workload 2's sides): runs/s, CPU seconds and peak PSS of every process, and
  how many worker processes the sampler saw (idle ones included);
* ``nap 24`` / ``nap 64``: a burst of 24 or 64 bare zero-CPU tasks that sleep 300 ms (an
  I/O-bound tool), wall time, median of 3;
* ``burn 64``: 64 bare one-CPU tasks of 200 ms CPU each (the fan-out's tools), wall time,
  median of 3;
* how many times Ray warned the driver that many worker processes were started (the raylet
  warns at four times the startup concurrency, plus eight, and at every multiple after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import common as C  # noqa: E402

_POOL_WARNING = "worker processes have been started on node"
SETTINGS = {
    "ray defaults": {"max_pending_lease_requests_per_scheduling_category": 10},
    "raygents": {},
    "one start at a time": {"worker_maximum_startup_concurrency": 1},
}


def _one(setting: str, n: int) -> dict[str, Any]:
    """Runs in a fresh process: every measurement under one setting."""
    import ray

    import raygents as rg

    C.init_raygents(
        store=f"file://{C.scratch('rgstarts-')}/store",
        durability="sync",
        _system_config=dict(SETTINGS[setting]),
    )
    sides, pool = C.zero_cpu_sides(n)
    out: dict[str, Any] = {"setting": setting}
    for name, got in sides.items():
        report = got["sampler"]
        out[name] = {
            "runs_per_s": n / got["wall_s"],
            "errors": len(got["errors"]),
            "cpu_s": report.get("cpu_s_total", 0.0),
            "peak_pss_mb": report.get("peak_total_pss_mb", 0.0),
            "workers": C.worker_processes(report),
        }
    nap = ray.remote(num_cpus=0)(_nap)
    for w in (24, 64):
        out[f"nap {w}"] = _burst(nap.remote, w, pool)
    out["burn 64"] = _burst(C.floor()["cpu_task"].remote, 64, pool)
    rg.shutdown()
    ray.shutdown()
    return out


def _nap(i: int) -> int:
    time.sleep(0.3)
    return i


def _burst(submit: Any, w: int, pool: int) -> float:
    import ray

    walls = []
    for _ in range(3):
        C.settle_workers(pool)
        C.settle(max_s=30.0, window_s=1.0)
        began = time.perf_counter()
        ray.get([submit(i) for i in range(w)])
        walls.append(time.perf_counter() - began)
    return statistics.median(walls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(_one(args.child, args.n)), flush=True)
        return
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in SETTINGS}
    names = list(SETTINGS)
    for rep in range(args.reps):
        for setting in names[rep % len(names) :] + names[: rep % len(names)]:
            C.settle(max_s=60.0)
            done = subprocess.run(
                [sys.executable, __file__, "--n", str(args.n), "--child", setting],
                capture_output=True,
                text=True,
                timeout=1800,
            )
            line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"{setting} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
            got = json.loads(line[len("RESULT ") :])
            got["pool warnings"] = (done.stdout + done.stderr).count(_POOL_WARNING)
            results[setting].append(got)
            print(json.dumps(got), flush=True)
    print(f"\nmedians of {args.reps} (N = {args.n}; load {os.getloadavg()[0]:.1f}):")
    for setting, outs in results.items():
        parts = []
        for side in ("raygents_task", "ray_floor"):
            med = {k: statistics.median(o[side][k] for o in outs) for k in outs[0][side]}
            parts.append(
                f"{side} {med['runs_per_s']:.1f} runs/s, {med['cpu_s']:.1f} CPU s, "
                f"{med['peak_pss_mb']:.0f} MB, {med['workers']:.0f} workers"
            )
        bursts = ", ".join(
            f"{b} {statistics.median(o[b] for o in outs):.2f} s"
            for b in ("nap 24", "nap 64", "burn 64")
        )
        warned = statistics.median(o["pool warnings"] for o in outs)
        print(f"  {setting:>19}: " + "; ".join(parts) + f"; {bursts}; {warned:.0f} warnings")


if __name__ == "__main__":
    main()
