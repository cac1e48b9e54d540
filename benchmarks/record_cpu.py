"""What a fan-out child's checkpoint records cost in CPU, against what the fan-out target leaves
a child over the Ray floor.

    python benchmarks/record_cpu.py [--m 64] [--reps 3] [--table benchmarks/results/full.json]
                                    [--durability exit]

Runs workload 3's fan-out (M sub-agents, one 200 ms sleeping tool each, so that nothing
competes for the CPUs) on raygents (by default ``sync`` records on a file store;
``--durability exit`` writes none) and on the Ray floor, alternating, like
``fanout_threads.py``. A setup hook in every Ray worker times the file store's calls (put, has,
make_dir, delete, ...) with the calling thread's CPU clock, which counts the kernel's work for
the fsyncs too; ``/proc`` gives the CPU of every thread of the agent actors, the coordinator and
the driver, and how often their threads went to sleep and were woken (voluntary context
switches). Prints, per child, each side's CPU and wake-ups and, of raygents' CPU, the store's
calls by process and call.

With ``--table`` (the JSON of a ``run.py`` run with the fan-out workload) it also prints what
the two fan-out targets for M children with 200 ms CPU tools (at least 1.8x faster than the
SDK; within 1.15x of the 2-core ideal) leave each child in CPU over the floor of that table:
with both cores busy with tools, every CPU second costs half a second of wall time, so (the
target's wall - the floor's wall) x 2 CPU s over M children.

Last, it times the same file store calls in a bare async Ray actor, back to back and with the
actor idle for 10 or 50 ms between them (as a fan-out child's records are): the CPU a call
costs depends on how long the process slept before it.
"""

from __future__ import annotations

import argparse
import collections
import functools
import glob
import json
import os
import statistics
import sys
import threading
import time
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import common as C  # noqa: E402
from fanout_threads import (  # noqa: E402
    kernel_name,
    processes,
    thread_cpu,
    thread_files,
    thread_names,
)

_TIMED = ("put", "put_if_dir", "make_dir", "has", "get", "list", "delete", "remove_empty_dir")
_POLL_S = 0.5


def _time_store_calls(folder: str) -> None:
    """Setup hook of every Ray worker: wrap the file store's public calls with CPU timers and
    write the totals to ``folder`` whenever a ``snap-<n>`` file appears there."""
    from raygents.store import FileStore

    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    depth = threading.local()

    def timed(name: str, call: Any) -> Any:
        @functools.wraps(call)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            outer = not getattr(depth, "n", 0)  # only the outermost call of a nested pair
            depth.n = getattr(depth, "n", 0) + 1
            start = time.thread_time()
            try:
                return call(*args, **kwargs)
            finally:
                depth.n -= 1
                if outer:
                    entry = totals[name]
                    entry[0] += 1
                    entry[1] += time.thread_time() - start

        return wrapper

    for name in _TIMED:
        setattr(FileStore, name, timed(name, getattr(FileStore, name)))

    def answer() -> None:
        done: set[str] = set()
        while True:
            for flag in glob.glob(os.path.join(folder, "snap-*")):
                if flag not in done and totals:
                    done.add(flag)
                    out = f"{flag.replace('snap-', 'stats-')}-{os.getpid()}.json"
                    with open(out, "w") as f:
                        json.dump({"pid": os.getpid(), "calls": dict(totals)}, f)
            time.sleep(_POLL_S)

    threading.Thread(target=answer, name="record-cpu", daemon=True).start()


def wakeups(pids: dict[int, str]) -> dict[tuple[int, int], int]:
    """The times each thread of ``pids`` went to sleep and was woken again (the kernel's
    voluntary context switches), by (pid, tid)."""
    out: dict[tuple[int, int], int] = {}
    for key, text in thread_files(pids, "status"):
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                out[key] = int(line.split()[1])
    return out


def _snapshot(folder: str, n: int) -> dict[int, dict[str, list[float]]]:
    """Every worker's cumulative store-call totals, by pid."""
    open(os.path.join(folder, f"snap-{n}"), "w").close()
    time.sleep(4 * _POLL_S)
    found = {}
    for path in glob.glob(os.path.join(folder, f"stats-{n}-*.json")):
        with open(path) as f:
            got = json.load(f)
        found[got["pid"]] = got["calls"]
    return found


def budgets(table: str, m: int) -> tuple[float, float, float, dict[str, float]] | None:
    """(SDK wall, floor wall, ideal wall, {target: CPU ms per child it leaves over the floor})
    from a run.py JSON; None without the row of M children with CPU tools."""
    with open(table) as f:
        fanout = json.load(f)["workloads"].get("fanout", {})
    for row in fanout.get("rows", []):
        if row["tool"] == "cpu" and row["m"] == m:
            sdk = row["sides"]["sdk"]["wall_p50_s"]
            floor = row["sides"]["ray_floor"]["wall_p50_s"]
            ideal = row["ideal_2core_s"]
            walls = {">= 1.8x faster than the SDK": sdk / 1.8, "<= 1.15x the ideal": 1.15 * ideal}
            return sdk, floor, ideal, {k: 1000 * 2 * (w - floor) / m for k, w in walls.items()}
    return None


def _gap_costs(folder: str, n: int = 100) -> list[tuple[float, float, float]]:
    """(idle gap s, CPU ms of a put, CPU ms of a has) in a bare async actor, one put and one
    has after each gap, on the event loop as an agent actor makes them."""
    import ray

    @ray.remote(num_cpus=0)
    class Writer:
        async def run(self, root: str, gap: float) -> tuple[float, float]:
            import asyncio

            from raygents.store import FileStore

            store, data = FileStore(root), b"x" * 2000
            for i in range(n):
                store.make_dir(f"runs/r{i}/")
            put = has = 0.0
            for i in range(n):
                if gap:
                    await asyncio.sleep(gap)
                start = time.thread_time()
                store.put_if_dir(f"runs/r{i}/000001", data)
                middle = time.thread_time()
                store.has(f"runs/r{i}/fence-2")
                put, has = put + middle - start, has + time.thread_time() - middle
            return 1000 * put / n, 1000 * has / n

    writer = Writer.remote()  # type: ignore[attr-defined]
    out = []
    for k, gap in enumerate((0.0, 0.0, 0.01, 0.05)):  # (the first warms the actor up)
        put, has = ray.get(writer.run.remote(os.path.join(folder, f"gaps-{k}"), gap))
        if k:
            out.append((gap, put, has))
    ray.kill(writer)
    return out


_OWN = {
    "ray_floor": {"ray::FloorAgent", "driver"},
    "raygents": {"ray::AgentActor", "ray::Coordinator", "driver"},
}


Woken = collections.Counter[tuple[int, int]]
"""Wake-ups by (pid, tid)."""


def measure(
    sides: dict[str, Any], pids: dict[int, str], reps: int, m: int
) -> tuple[dict[str, list[float]], dict[str, list[Woken]]]:
    """Run each side ``reps`` times, alternating: the CPU seconds of each run of a side's own
    processes, and the wake-ups of their threads."""
    used: dict[str, list[float]] = {side: [] for side in sides}
    woken: dict[str, list[Woken]] = {side: [] for side in sides}
    for _ in range(reps):
        for side, run in sides.items():
            C.warm_pool(max(m, 8))
            before, slept = thread_cpu(pids), wakeups(pids)
            run()
            after, awake = thread_cpu(pids), wakeups(pids)
            mine = _OWN[side]
            used[side].append(
                sum(cpu - before.get(k, 0.0) for k, cpu in after.items() if pids[k[0]] in mine)
            )
            woken[side].append(collections.Counter())
            for key, count in awake.items():
                if pids[key[0]] in mine:
                    woken[side][-1][key] = count - slept.get(key, count)
    return used, woken


def report_wakeups(woken: dict[str, list[Woken]], pids: dict[int, str], m: int) -> None:
    """Print each side's wake-ups per child, by thread: Python's name for it where it has one
    (``py-spy dump``), else the kernel's (Ray names its C++ threads)."""
    names = {pid: thread_names(pid) for pid, role in pids.items() if role != "driver"}
    print("\nwake-ups (voluntary context switches) per child, by thread (median run):")
    for side, runs in woken.items():
        each: collections.Counter[str] = collections.Counter()
        for pid, tid in set().union(*runs):
            name = names.get(pid, {}).get(tid) or f"[{kernel_name(pid, tid)}]"
            each[f"{pids[pid]} {name}"] += statistics.median(r[(pid, tid)] for r in runs) / m
        print(f"  {side:10s} {sum(each.values()):6.1f}")
        for thread, n in each.most_common():
            if n >= 0.5:
                print(f"  {n:16.1f}  {thread}")


def report_store(
    start: dict[int, dict[str, list[float]]],
    end: dict[int, dict[str, list[float]]],
    pids: dict[int, str],
    children: int,
) -> None:
    """Print the store calls made between two snapshots, per child."""
    print(f"\nraygents' file store calls, CPU ms per child (mean over {children} children):")
    total = 0.0
    for pid in sorted(end):
        role = pids.get(pid, "ray worker")
        for name, (count, cpu) in sorted(end[pid].items()):
            count0, cpu0 = start.get(pid, {}).get(name, (0, 0.0))
            if count > count0:
                ms = 1000 * (cpu - cpu0) / children
                total += ms
                calls = (count - count0) / children
                print(f"  {role:18s} {pid:>7d} {name:16s} {calls:5.2f} calls  {ms:6.3f}")
    print(f"  all: {total:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--durability", default="sync", choices=("sync", "async", "exit"))
    ap.add_argument("--table", help="a run.py JSON: the CPU per child its fan-out targets leave")
    args = ap.parse_args()

    import raygents as rg

    folder = C.scratch("rgrecords-")

    def hook() -> None:  # (a plain function: Ray exports the hook by its name)
        _time_store_calls(folder)

    C.init_raygents(
        store=f"file://{folder}/store",
        durability=args.durability,
        runtime_env={"worker_process_setup_hook": hook},
    )
    sides = C.fanout_sides("sleep", args.m, "records")
    pids = processes()
    start = _snapshot(folder, 0)
    used, woken = measure(sides, pids, args.reps, args.m)
    end = _snapshot(folder, 1)
    per_child = {side: 1000 * statistics.median(cpu) / args.m for side, cpu in used.items()}
    print(
        f"M = {args.m}, sleeping tools, durability {args.durability}, runs a side: {args.reps}; "
        "CPU ms per child (median run)"
    )
    for side, ms in per_child.items():
        print(f"  {side:10s} {ms:6.2f}  (agent actors, coordinator and driver)")
    print(f"  raygents over the floor: {per_child['raygents'] - per_child['ray_floor']:.2f}")
    report_wakeups(woken, pids, args.m)
    report_store(start, end, pids, args.m * args.reps)
    if args.table:
        found = budgets(args.table, args.m)
        if found is None:
            print(f"\n{args.table}: no fan-out row with M = {args.m} and CPU tools")
        else:
            sdk, floor, ideal, left = found
            print(f"\n{args.table}: SDK {sdk:.3f} s, floor {floor:.3f} s, ideal {ideal:.3f} s")
            if args.m != 64:
                print("  (the targets are set for M = 64)")
            for target, ms in left.items():
                print(f"  {target}: leaves {ms:.2f} CPU ms per child over the floor")
    print("\nthe same calls in a bare async actor (CPU ms per call):")
    for gap, put, has in _gap_costs(folder):
        print(f"  {1000 * gap:4.0f} ms idle before each: put_if_dir {put:.3f}, has {has:.3f}")
    rg.shutdown()


if __name__ == "__main__":
    main()
