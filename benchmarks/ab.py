"""Compare two raygents commits on one workload, alternating, on an equally quiet machine.

    python benchmarks/ab.py --workload single [--kind local] [--n 100] [--durability exit]
    python benchmarks/ab.py --workload fanout [--m 64] [--reps 3] [--tool sleep]
    cd benchmarks && python ab.py --workload throughput --trees /tmp/base .. [--n 1000]
    cd benchmarks && python ab.py --workload durability --trees /tmp/base .. [--gc]

single      One 2-turn run (K tool calls, model latency L) against the Ray floor, alternating,
            in one process; prints both p50s and the gap to the floor. Run the same command
            from each commit's checkout in turn, twice each, alternating: runs of one commit
            move by 1-2 ms between invocations.
fanout      One fan-out (workload 3: M sub-agents with 200 ms CPU tools, or sleeping ones with
            --tool sleep) against the Ray floor, from the same worker pool each time, with the
            CPU seconds of every process; prints medians and raygents minus the floor. Run it
            from each checkout in turn (or from benchmarks/ with PYTHONPATH set to a checkout).
throughput  N concurrent runs with zero-CPU tool tasks (workload 2's raygents_task side) and the
            Ray floor, for each of --trees: runs/s, CPU by role, peak PSS beyond the idle
            instance, and the worker processes the sampler saw.
durability  N concurrent runs (4 remote=False tools) in one durability mode on the file store,
            for each of --trees: runs/s and the CPU of the coordinator, the agent actor and the
            driver; --gc adds the CPU time of their garbage collections.

With --trees, every repetition runs each checkout in rotating order, each in a fresh process
with a fresh local Ray instance whose PYTHONPATH starts with that checkout. Run it from a
directory without a ``raygents`` package (``benchmarks/``): Ray's workers put the driver's
working directory first on their path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)

import fakes  # noqa: E402
import machine  # noqa: E402
import rayfloor  # noqa: E402
import sampling  # noqa: E402

DEFAULTS: dict[str, dict[str, Any]] = {
    "single": {"n": 60, "durability": "sync"},
    "fanout": {"reps": 3, "durability": "sync"},
    "throughput": {"n": 1000, "reps": 2},
    "durability": {"n": 500, "reps": 3, "durability": "async"},
}
"""Each workload's ``--n``, ``--reps`` and ``--durability`` when not given."""

TREE_WORKLOADS = ("throughput", "durability")
"""The workloads that compare checkouts given with ``--trees``; the others measure the raygents
this process imports."""


# --------------------------------------------------------------------------------------------
# single: one run against the floor, alternating in one process
# --------------------------------------------------------------------------------------------


def single(args: argparse.Namespace) -> None:
    import ray

    import raygents as rg

    system = {} if args.soft_limit is None else {"num_workers_soft_limit": args.soft_limit}
    machine.init_raygents(
        store=f"file://{machine.scratch('rgab-')}/store",
        durability=args.durability,
        _system_config=system,
    )
    floor = rayfloor.floor()["FloorAgent"].remote()
    agent = rg.Agent(
        "ab",
        tools=fakes.rg_tools(args.kind),
        model=fakes.rg_model(fakes.ToolTurns(k=args.k), args.latency),
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


# --------------------------------------------------------------------------------------------
# fanout: one fan-out against the floor, with the CPU of every process
# --------------------------------------------------------------------------------------------

FANOUT_ROLES = ("ray::AgentActor", "ray::Coordinator", "driver")


def fanout(args: argparse.Namespace) -> None:
    import raygents as rg

    machine.init_raygents(
        store=f"file://{machine.scratch('rgab-')}/store", durability=args.durability
    )
    sides = rayfloor.fanout_sides(args.tool, args.m, "ab")
    rows: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for rep in range(args.reps):
        for side, run in sides.items():
            rayfloor.warm_pool(max(args.m, 8))
            with sampling.Sampler(interval_s=0.5, pss=False) as sampler:
                t = time.perf_counter()
                run()
                wall = time.perf_counter() - t
            by_role = sampler.report.get("by_role", {})
            row = {"wall": wall, "cpu": sampler.report.get("cpu_s_total", 0.0)}
            row.update({role: by_role.get(role, {}).get("cpu_s", 0.0) for role in FANOUT_ROLES})
            rows[side].append(row)
            print(f"rep {rep} {side:9s} {_fanout_row(row)}", flush=True)
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
        print(f"  {side:9s} {_fanout_row(m)}")
    rg_, fl = med["raygents"], med["ray_floor"]
    print(
        f"  raygents - floor: wall {rg_['wall'] - fl['wall']:+.3f} s, "
        f"CPU {rg_['cpu'] - fl['cpu']:+.2f} s"
    )


def _fanout_row(row: dict[str, float]) -> str:
    roles = ", ".join(f"{role} {row[role]:.2f}" for role in FANOUT_ROLES)
    return f"wall {row['wall']:.3f} s, CPU {row['cpu']:.2f} s ({roles})"


def _checkout(module_file: str) -> str:
    """The checkout (and its commit) a module was imported from."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(module_file)))
    rev = subprocess.run(
        ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", root, "status", "--porcelain", "raygents"], capture_output=True, text=True
    ).stdout.strip()
    return f"{root} at {rev or '?'}{' (raygents/ modified)' if dirty else ''}"


# --------------------------------------------------------------------------------------------
# throughput: N concurrent runs with zero-CPU tool tasks, per checkout
# --------------------------------------------------------------------------------------------

THROUGHPUT_ROLES = {
    "tool workers": ("ray::tool worker", "ray::task worker"),
    "actor": ("ray::AgentActor", "ray::FloorAgent"),
    "driver": ("driver",),
}


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    """Both sides at N, in this (fresh) process: raygents', then the floor's, after a warm-up
    of 10 runs each and once Ray is back to its idle workers; peak PSS is counted beyond the
    idle instance measured before the warm-up, as workload 2 does."""
    import ray

    import raygents as rg

    machine.init_raygents(store=f"file://{machine.scratch('rgtpab-')}/store", durability="sync")
    time.sleep(2.0)
    idle = sampling.idle_footprint()["total_pss_mb"]
    sides, _ = rayfloor.zero_cpu_sides(args.n)
    out: dict[str, Any] = {"raygents": rg.__file__}
    for name, got in sides.items():
        report = got["sampler"]
        roles = report.get("by_role") or {}
        out[name] = {
            "runs_per_s": args.n / got["wall_s"],
            "errors": len(got["errors"]),
            "cpu_s": report.get("cpu_s_total", 0.0),
            **{
                f"{label} cpu_s": sum(roles.get(r, {}).get("cpu_s", 0.0) for r in names)
                for label, names in THROUGHPUT_ROLES.items()
            },
            "mb_beyond_idle": report.get("peak_total_pss_mb", 0.0) - idle,
            "workers": sampling.worker_processes(report),
        }
    rg.shutdown()
    ray.shutdown()
    return out


def throughput_medians(outs: list[dict[str, Any]]) -> list[str]:
    lines = []
    for side in ("raygents_task", "ray_floor"):
        med = {k: statistics.median(o[side][k] for o in outs) for k in outs[0][side]}
        lines.append(f"{side}: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    return lines


# --------------------------------------------------------------------------------------------
# durability: N concurrent runs in one durability mode, per checkout
# --------------------------------------------------------------------------------------------

DURABILITY_ROLES = {
    "coordinator": "ray::Coordinator",
    "agent actor": "ray::AgentActor",
    "driver": "driver",
}


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


def durability(args: argparse.Namespace) -> dict[str, Any]:
    """One batch of N runs in this (fresh) process, after a warm-up of 50, with the CPU seconds
    of every process read before and one second after them."""
    import ray
    from workloads import harness as H

    import raygents as rg

    folder = machine.scratch("rgdurab-")
    options: dict[str, Any] = {}
    if args.gc:
        os.environ[sampling.GC_TIMES_DIR] = folder
        sampling.time_collections()
        options["runtime_env"] = {
            "env_vars": {sampling.GC_TIMES_DIR: folder},
            "worker_process_setup_hook": sampling.time_collections,
        }
    machine.init_raygents(store=f"file://{folder}/store", durability=args.durability, **options)
    agent = rg.Agent(
        "durab", tools=fakes.rg_tools("local"), model=fakes.rg_model(fakes.ToolTurns(k=4), 0.1)
    )
    H.rg_batch(agent, [f"k=4 warm {i}" for i in range(50)])
    time.sleep(2.0)
    before, gc_before = _cpu_by_process(), sampling.collection_times(folder)
    got = H.rg_batch(agent, [f"k=4 run {i}" for i in range(args.n)])
    time.sleep(1.0)  # (write-behind records and reports land)
    after, gc_after = _cpu_by_process(), sampling.collection_times(folder)
    spent = {pid: t - before.get(pid, (name, 0.0))[1] for pid, (name, t) in after.items()}
    out: dict[str, Any] = {
        "raygents": rg.__file__,
        "runs_per_s": args.n / got["wall_s"],
        "errors": len(got["errors"]),
        "cpu_s": sum(spent.values()),
    }
    for label, prefix in DURABILITY_ROLES.items():
        out[f"{label} cpu_s"] = sum(
            t for pid, t in spent.items() if after[pid][0].startswith(prefix)
        )
        if args.gc:
            out[f"{label} gc_s"] = sum(
                t - gc_before.get(pid, 0.0)
                for pid, t in gc_after.items()
                if pid in after and after[pid][0].startswith(prefix)
            )
    rg.shutdown()
    ray.shutdown()
    return out


def durability_medians(outs: list[dict[str, Any]]) -> list[str]:
    keys = [k for k in outs[0] if k != "raygents"]
    med = {k: statistics.median(o[k] for o in outs) for k in keys}
    return [", ".join(f"{k} {v:.2f}" for k, v in med.items())]


# --------------------------------------------------------------------------------------------
# Checkouts in turn
# --------------------------------------------------------------------------------------------


def alternate_trees(
    script: str, trees: Sequence[str], reps: int, child_args: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """Run ``script --child <child_args>`` once per checkout per repetition, in rotating
    order, each in a fresh process whose ``PYTHONPATH`` starts with that checkout, once the
    machine is quiet; the child prints one ``RESULT <json>`` line. Returns the results by
    checkout, and prints each as it comes."""
    results: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    order = list(trees)
    for rep in range(reps):
        for tree in order[rep % len(order) :] + order[: rep % len(order)]:
            machine.settle(max_s=60.0)
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            done = subprocess.run(
                [sys.executable, script, *child_args, "--trees", tree, "--child"],
                capture_output=True,
                text=True,
                timeout=1800,
                env=env,
            )
            line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"{tree} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
            got = json.loads(line[len("RESULT ") :])
            results[tree].append(got)
            print(tree, json.dumps(got), flush=True)
    return results


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workload", required=True, choices=tuple(DEFAULTS))
    ap.add_argument(
        "--trees", nargs="+", help="raygents checkouts to compare (throughput, durability)"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help="runs (single: pairs; default 60, 1000, 500)")
    ap.add_argument("--reps", type=int, help="repetitions (fanout 3, throughput 2, durability 3)")
    ap.add_argument(
        "--durability", choices=("sync", "async", "exit"), help="sync; durability: async"
    )
    ap.add_argument("--kind", default="task", choices=("task", "local"), help="single: tool kind")
    ap.add_argument("--k", type=int, default=4, help="single: tool calls per turn")
    ap.add_argument("--latency", type=float, default=0.1, help="single: model latency (s)")
    ap.add_argument("--soft-limit", type=int, help="single: Ray's num_workers_soft_limit")
    ap.add_argument("--m", type=int, default=64, help="fanout: sub-agents")
    ap.add_argument(
        "--tool", default="cpu", choices=("cpu", "sleep"), help="fanout: the sub-agents' tool"
    )
    ap.add_argument("--gc", action="store_true", help="durability: time garbage collections")
    return ap


def main() -> None:
    ap = _parser()
    args = ap.parse_args()
    for key, value in DEFAULTS[args.workload].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.workload not in TREE_WORKLOADS:
        if args.trees:
            ap.error(f"{args.workload} measures the raygents it imports: run it from each checkout")
        {"single": single, "fanout": fanout}[args.workload](args)
        return
    measure, medians = {
        "throughput": (throughput, throughput_medians),
        "durability": (durability, durability_medians),
    }[args.workload]
    if not args.trees:
        ap.error(f"{args.workload} compares checkouts: give them with --trees")
    if args.child:
        print("RESULT " + json.dumps(measure(args)), flush=True)
        return
    child = ["--workload", args.workload, "--n", str(args.n)]
    if args.workload == "durability":
        child += ["--durability", args.durability, *(["--gc"] if args.gc else [])]
    results = alternate_trees(__file__, args.trees, args.reps, child)
    mode = f", {args.durability}" if args.workload == "durability" else ""
    print(f"\nmedians of {args.reps} (N = {args.n}{mode}; load {os.getloadavg()[0]:.1f}):")
    for tree, outs in results.items():
        for line in medians(outs):
            print(f"  {tree} {line}")


if __name__ == "__main__":
    main()
