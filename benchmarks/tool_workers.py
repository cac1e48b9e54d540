"""What a Ray worker that Ray starts for a tool task costs: a burst of W concurrent zero-CPU
tasks that sleep 300 ms, so that Ray starts a worker for most of them (finding 7), as bare
Ray tasks (the floor) and as raygents tool tasks (the remote function raygents submits for a
``@tool(num_cpus=0)``, which loads raygents in the worker). Each side runs in a fresh local Ray
instance, the sides alternate, and the CPU seconds of the worker processes are summed from the
burst's start until the pool is idle again.

    python benchmarks/tool_workers.py [--w 24] [--reps 3]

To measure another checkout's raygents, run it from ``benchmarks/`` with ``PYTHONPATH``
pointing at that checkout (Ray's workers put the driver's working directory first on their
path).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import common as C  # noqa: E402

_WORKER_ROLES = ("ray::tool worker", "ray::task worker", "ray worker", "ray::IDLE worker")


def _nap(i: int) -> str:
    time.sleep(0.3)
    return f"napped {i}"


def _burst(side: str, w: int) -> dict[str, Any]:
    import ray

    import raygents as rg
    from raygents.runtime.tasks import remote_tool, submit_tool
    from raygents.tools import ToolContext

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        C.settle(max_s=20)
        if side == "ray_floor":
            task = ray.remote(num_cpus=0)(_nap)
            submit = task.remote
        else:
            nap = rg.tool(num_cpus=0)(_nap)
            remote = remote_tool(nap)

            def submit(i: int) -> Any:
                ctx = ToolContext(
                    run_id="run-burst", call_id=f"c{i}", tool_name="_nap", agent_name="burst"
                )
                arguments = f'{{"i": {i}}}'
                # The agent actor checks a function tool's arguments before its task (since
                # raygents.runtime.worker); before, the task got them as JSON.
                if hasattr(nap, "parse_arguments"):
                    return submit_tool(remote, ctx, nap.parse_arguments(arguments))
                return submit_tool(remote, ctx, arguments)

        with C.Sampler(interval_s=0.25) as sampler:
            began = time.perf_counter()
            ray.get([submit(i) for i in range(w)])
            wall = time.perf_counter() - began
            C.settle(max_s=20, window_s=1.0)
        roles = sampler.report["by_role"]
        workers = {r: roles[r] for r in _WORKER_ROLES if r in roles}
        return {
            "wall_s": wall,
            "worker_cpu_s": sum(r["cpu_s"] for r in workers.values()),
            "workers": sum(r["count"] for r in workers.values()),
        }
    finally:
        ray.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--w", type=int, default=24)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import raygents

    rows: dict[str, list[dict[str, Any]]] = {"ray_floor": [], "raygents": []}
    for rep in range(args.reps):
        for side in list(rows)[rep % 2 :] + list(rows)[: rep % 2]:
            row = _burst(side, args.w)
            rows[side].append(row)
            print(
                f"rep {rep} {side:9s} burst {row['wall_s']:.2f} s, {row['workers']} worker "
                f"processes, {row['worker_cpu_s']:.2f} CPU s"
            )
    print(
        f"medians of {args.reps} (W = {args.w}; raygents from "
        f"{os.path.dirname(os.path.dirname(os.path.abspath(raygents.__file__)))}):"
    )
    for side, runs in rows.items():
        cpu = statistics.median(r["worker_cpu_s"] for r in runs)
        wall = statistics.median(r["wall_s"] for r in runs)
        count = statistics.median(r["workers"] for r in runs)
        print(
            f"  {side:9s} burst {wall:.2f} s, {count:g} worker processes, {cpu:.2f} CPU s "
            f"({cpu / max(count, 1):.3f} per process)"
        )


if __name__ == "__main__":
    main()
