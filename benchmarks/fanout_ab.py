"""One fan-out (workload 3, M sub-agents with 200 ms CPU tools) against the Ray floor,
alternating, with the CPU seconds of every process: for comparing two commits.

    python benchmarks/fanout_ab.py [--m 64] [--reps 3] [--durability exit] [--tool sleep]

``--tool sleep`` gives the sub-agents 200 ms *sleeping* one-CPU tools instead: the same shape
without CPU contention, where the CPU columns show what each side costs by itself (with CPU
tools every CPU second taken from the tools also costs about half a second of wall time).

Run it from each commit's checkout in turn, alternating, since the machine's speed drifts.
To use another checkout's raygents through ``PYTHONPATH`` instead, run it from a directory
without a ``raygents`` package (``cd benchmarks``): Ray's workers put the driver's working
directory first on their path. Each repetition runs the
Ray floor and raygents once each, from the same worker pool (``common.warm_pool``). Prints each
run, then medians: wall time, CPU of all processes, and of the agent actors, the coordinator
and the driver; and raygents minus the floor, which is what a change to raygents moves.
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

ROLES = ("ray::AgentActor", "ray::Coordinator", "driver")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--durability",
        default="sync",
        choices=("sync", "async", "exit"),
        help="raygents' durability mode (the workload uses sync; exit writes no running "
        "records, which shows what they cost)",
    )
    ap.add_argument(
        "--tool",
        default="cpu",
        choices=("cpu", "sleep"),
        help="the sub-agents' tool: 200 ms of CPU (the workload) or 200 ms of sleep",
    )
    args = ap.parse_args()

    import raygents as rg

    C.init_raygents(store=f"file://{C.scratch('rgab-')}/store", durability=args.durability)
    sides = C.fanout_sides(args.tool, args.m, "ab")
    rows: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for rep in range(args.reps):
        for side, run in sides.items():
            C.warm_pool(max(args.m, 8))
            with C.Sampler(interval_s=0.5, pss=False) as sampler:
                t = time.perf_counter()
                run()
                wall = time.perf_counter() - t
            by_role = sampler.report.get("by_role", {})
            row = {"wall": wall, "cpu": sampler.report.get("cpu_s_total", 0.0)}
            row.update({role: by_role.get(role, {}).get("cpu_s", 0.0) for role in ROLES})
            rows[side].append(row)
            print(
                f"rep {rep} {side:9s} wall {wall:.3f} s, CPU {row['cpu']:.2f} s ("
                + ", ".join(f"{role} {row[role]:.2f}" for role in ROLES)
                + ")",
                flush=True,
            )
    rg.shutdown()
    med = {
        side: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for side, runs in rows.items()
    }
    print(
        f"medians of {args.reps} (M = {args.m}, {args.tool} tools, durability {args.durability}, "
        f"raygents from {_checkout(rg.__file__)}):"
    )
    for side, m in med.items():
        print(
            f"  {side:9s} wall {m['wall']:.3f} s, CPU {m['cpu']:.2f} s ("
            + ", ".join(f"{role} {m[role]:.2f}" for role in ROLES)
            + ")"
        )
    rg_, fl = med["raygents"], med["ray_floor"]
    print(
        f"  raygents - floor: wall {rg_['wall'] - fl['wall']:+.3f} s, "
        f"CPU {rg_['cpu'] - fl['cpu']:+.2f} s"
    )


def _checkout(module_file: str) -> str:
    """The checkout (and its commit) a module was imported from."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(module_file)))
    rev = subprocess.run(
        ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", root, "status", "--porcelain", "raygents"], capture_output=True, text=True
    ).stdout.strip()
    return f"{root} at {rev or '?'}{' (raygents/ modified)' if dirty else ''}"


if __name__ == "__main__":
    main()
