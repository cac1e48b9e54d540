"""One 2-turn run (K tool calls, model latency L) against the Ray floor, alternating, in one
process: the gap to the floor, for comparing two commits on an equally quiet machine.

    python benchmarks/single_ab.py                        # K=4 tool tasks, 100 ms, 60 pairs
    python benchmarks/single_ab.py --kind local --n 100   # remote=False tools
    python benchmarks/single_ab.py --durability exit      # what checkpoints cost

Check out each commit in turn (``git stash`` / ``git checkout``) and run the same command,
twice each, alternating: runs of one commit move by 1-2 ms between invocations here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import common as C  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="task", choices=("task", "local"))
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--durability", default="sync", choices=("sync", "async", "exit"))
    ap.add_argument(
        "--soft-limit", type=int, help="Ray's num_workers_soft_limit (idle workers kept)"
    )
    args = ap.parse_args()

    import ray

    import raygents as rg

    system = {} if args.soft_limit is None else {"num_workers_soft_limit": args.soft_limit}
    C.init_raygents(
        store=f"file://{C.scratch('rgab-')}/store",
        durability=args.durability,
        _system_config=system,
    )
    floor = C.floor()["FloorAgent"].remote()
    agent = rg.Agent(
        "ab",
        tools=C.rg_tools(args.kind),
        model=C.rg_model(C.ToolTurns(k=args.k), args.latency),
    )
    local = args.kind == "local"
    sides = {
        "raygents": lambda: rg.run(agent, f"k={args.k}"),
        "ray_floor": lambda: ray.get(floor.tools_turns.remote(args.latency, args.k, 1, local)),
    }
    for fn in sides.values():  # warm up: actors, workers
        for _ in range(5):
            fn()
    times: dict[str, list[float]] = {side: [] for side in sides}
    for rep in range(args.n):
        for side in list(sides)[rep % 2 :] + list(sides)[: rep % 2]:
            t = time.perf_counter()
            sides[side]()
            times[side].append(1000 * (time.perf_counter() - t))
    p50 = {side: statistics.median(v) for side, v in times.items()}
    for side, v in times.items():
        print(f"{side:10s} p50 {p50[side]:7.1f} ms  min {min(v):7.1f}  max {max(v):7.1f}")
    gap = p50["raygents"] - p50["ray_floor"]
    print(f"raygents - floor: {gap:.1f} ms (p50); load {os.getloadavg()}")
    rg.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
