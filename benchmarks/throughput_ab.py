"""N concurrent runs with zero-CPU tool tasks (workload 2's ``raygents_task`` side) and the
Ray floor, for two raygents checkouts in turn: for comparing two commits at N = 1000.

    cd benchmarks && python throughput_ab.py --trees /tmp/base /work/main [--n 1000] [--reps 2]

Each repetition runs every checkout, in rotating order, each in a fresh process with a fresh
local Ray instance (2 CPUs) whose ``PYTHONPATH`` starts with that checkout; run it from a
directory without a ``raygents`` package (``benchmarks/``), since Ray's workers put the
driver's working directory first on their path. In each process: raygents' side, then the
floor's, after a warm-up of 10 runs each and once Ray is back to its idle workers; for each,
runs/s, CPU seconds of every process and by role (workers while titled with a tool task,
the agent actor, the driver; idle workers and workers still starting count only in the total),
peak PSS beyond the idle instance (measured before the warm-up, as workload 2
does), and the worker processes the sampler saw (idle ones included). Prints each run, then
medians per checkout.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import common as C  # noqa: E402

ROLES = {
    "tool workers": ("ray::tool worker", "ray::task worker"),
    "actor": ("ray::AgentActor", "ray::FloorAgent"),
    "driver": ("driver",),
}


def _one(n: int) -> dict[str, Any]:
    """Runs in a fresh process: both sides at N."""
    import ray

    import raygents as rg

    C.init_raygents(store=f"file://{C.scratch('rgtpab-')}/store", durability="sync")
    time.sleep(2.0)
    idle = C.idle_footprint()["total_pss_mb"]
    sides, _ = C.zero_cpu_sides(n)
    out: dict[str, Any] = {"raygents": rg.__file__}
    for name, got in sides.items():
        report = got["sampler"]
        roles = report.get("by_role") or {}
        out[name] = {
            "runs_per_s": n / got["wall_s"],
            "errors": len(got["errors"]),
            "cpu_s": report.get("cpu_s_total", 0.0),
            **{
                f"{label} cpu_s": sum(roles.get(r, {}).get("cpu_s", 0.0) for r in names)
                for label, names in ROLES.items()
            },
            "mb_beyond_idle": report.get("peak_total_pss_mb", 0.0) - idle,
            "workers": C.worker_processes(report),
        }
    rg.shutdown()
    ray.shutdown()
    return out


def main() -> None:
    ap = C.tree_parser(__doc__)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(_one(args.n)), flush=True)
        return
    results = C.alternate_trees(__file__, args.trees, args.reps, ["--n", str(args.n)])
    print(f"\nmedians of {args.reps} (N = {args.n}; load {os.getloadavg()[0]:.1f}):")
    for tree, outs in results.items():
        for side in ("raygents_task", "ray_floor"):
            med = {k: statistics.median(o[side][k] for o in outs) for k in outs[0][side]}
            print(f"  {tree} {side}: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))


if __name__ == "__main__":
    main()
