"""N concurrent runs in one durability mode on the file store, for two raygents checkouts in
turn: runs/s and the CPU of the coordinator, the agent actor and the driver.

    cd benchmarks && python durability_ab.py --trees /tmp/base .. [--durability async]
        [--n 500] [--reps 3] [--gc]

Each repetition runs every checkout, in rotating order, each in a fresh process with a fresh
local Ray instance (2 CPUs) whose ``PYTHONPATH`` starts with that checkout
(:func:`common.alternate_trees`). In each process: a warm-up of 50 runs, then N concurrent
2-turn runs (100 ms model, 4 ``remote=False`` tools, as workload 2's ``raygents_local``
side), with the CPU seconds of every process of the Ray instance and the driver read
before and one second after them. Prints each run, then medians per checkout. ``--gc`` also
adds up the CPU time of the garbage collections in each process (``<role> gc_s``; a worker
setup hook, :func:`common.time_collections`).
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

ROLES = {"coordinator": "ray::Coordinator", "agent actor": "ray::AgentActor", "driver": "driver"}


def _cpu_by_process() -> dict[int, tuple[str, float]]:
    import psutil

    me = psutil.Process()
    out = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            name = "driver" if p.pid == me.pid else (p.cmdline() or ["?"])[0]
            times = p.cpu_times()
        except psutil.Error:
            continue
        out[p.pid] = (name, times.user + times.system)
    return out


def _one(n: int, durability: str, gc_times: bool) -> dict[str, Any]:
    """Runs in a fresh process: one batch of N runs."""
    import ray
    from workloads import harness as H

    import raygents as rg

    folder = C.scratch("rgdurab-")
    options: dict[str, Any] = {}
    if gc_times:
        os.environ[C.GC_TIMES_DIR] = folder
        C.time_collections()
        options["runtime_env"] = {
            "env_vars": {C.GC_TIMES_DIR: folder},
            "worker_process_setup_hook": C.time_collections,
        }
    C.init_raygents(store=f"file://{folder}/store", durability=durability, **options)
    agent = rg.Agent("durab", tools=C.rg_tools("local"), model=C.rg_model(C.ToolTurns(k=4), 0.1))
    H.rg_batch(agent, [f"k=4 warm {i}" for i in range(50)])
    time.sleep(2.0)
    before, gc_before = _cpu_by_process(), C.collection_times(folder)
    got = H.rg_batch(agent, [f"k=4 run {i}" for i in range(n)])
    time.sleep(1.0)  # (write-behind records and reports land)
    after, gc_after = _cpu_by_process(), C.collection_times(folder)
    spent = {pid: t - before.get(pid, (name, 0.0))[1] for pid, (name, t) in after.items()}
    out: dict[str, Any] = {
        "raygents": rg.__file__,
        "runs_per_s": n / got["wall_s"],
        "errors": len(got["errors"]),
        "cpu_s": sum(spent.values()),
    }
    for label, prefix in ROLES.items():
        out[f"{label} cpu_s"] = sum(
            t for pid, t in spent.items() if after[pid][0].startswith(prefix)
        )
        if gc_times:
            out[f"{label} gc_s"] = sum(
                t - gc_before.get(pid, 0.0)
                for pid, t in gc_after.items()
                if pid in after and after[pid][0].startswith(prefix)
            )
    rg.shutdown()
    ray.shutdown()
    return out


def main() -> None:
    ap = C.tree_parser(__doc__)
    ap.add_argument("--durability", default="async", choices=("sync", "async", "exit"))
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gc", action="store_true", help="time the garbage collections too")
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(_one(args.n, args.durability, args.gc)), flush=True)
        return
    child = ["--n", str(args.n), "--durability", args.durability, *(["--gc"] if args.gc else [])]
    results = C.alternate_trees(__file__, args.trees, args.reps, child)
    print(f"\nmedians of {args.reps} (N = {args.n}, {args.durability}):")
    for tree, outs in results.items():
        keys = [k for k in outs[0] if k != "raygents"]
        med = {k: statistics.median(o[k] for o in outs) for k in keys}
        print(f"  {tree}: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))


if __name__ == "__main__":
    main()
