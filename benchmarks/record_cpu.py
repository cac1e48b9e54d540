"""What a fan-out child costs in CPU over the Ray floor (its records, its parts, its wake-ups),
against what the fan-out targets leave it.

    python benchmarks/record_cpu.py [--m 64] [--reps 3] [--table benchmarks/results/full.json]
                                    [--durability exit] [--pieces]

Runs workload 3's fan-out (M sub-agents, one 200 ms sleeping tool each, so that nothing
competes for the CPUs) on raygents (by default ``sync`` records on a file store;
``--durability exit`` writes none) and on the Ray floor, alternating, like
``fanout_threads.py``. A setup hook in every Ray worker times the file store's calls (put, has,
make_dir, delete, ...) with the calling thread's CPU clock, which counts the kernel's work for
the fsyncs too; ``/proc`` gives the CPU of every thread of the agent actors, the coordinator and
the driver, and how often their threads went to sleep and were woken (voluntary context
switches). Prints, per child, each side's CPU (all of it, and its actors' event loops) and
wake-ups and, of raygents' CPU, the store's calls by process and call. ``--pieces`` also times
the parts of a child run named in ``_PIECES`` (checkpoint records, the agent loop's steps,
events, the mailbox's packing, Ray's calls and serialisation), each with what it calls.

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
    OWN,
    kernel_name,
    processes,
    thread_cpu,
    thread_files,
    thread_names,
)

_STORE_CALLS = ("put", "put_if_dir", "make_dir", "has", "get", "list", "delete", "remove_empty_dir")
_PIECES = {  # label: (module, attribute path), patched where raygents looks it up
    # (the actor imports ``pack`` by name, so that name is patched in the actor's module)
    "checkpoint.next_record": ("raygents.checkpoint", "next_record"),
    "checkpoint.encode": ("raygents.checkpoint", "encode"),
    "loop.next_turn": ("raygents.loop", "next_turn"),
    "loop.on_response": ("raygents.loop", "on_response"),
    "loop.on_results": ("raygents.loop", "on_results"),
    "AgentActor._write": ("raygents.runtime.actor", "AgentActor._write"),
    "AgentActor._emit": ("raygents.runtime.actor", "AgentActor._emit"),
    "_Relay.emit": ("raygents.runtime.actor", "_Relay.emit"),
    "mailbox.pack": ("raygents.runtime.actor", "pack"),
    "mailbox.unpack": ("raygents.runtime.mailbox", "unpack"),
    "wire.dumps": ("raygents.runtime.wire", "dumps"),
    "wire.loads": ("raygents.runtime.wire", "loads"),
    "Ray: actor calls": ("ray.actor", "ActorMethod._remote"),
    "Ray: task submissions": ("ray.remote_function", "RemoteFunction._remote"),
    "Ray: serialising": ("ray._private.serialization", "SerializationContext.serialize"),
    "Ray: deserialising": (
        "ray._private.serialization",
        "SerializationContext.deserialize_objects",
    ),
}
_POLL_S = 0.5


def _time_calls(folder: str, pieces: bool) -> None:
    """Setup hook of every Ray worker: wrap the file store's public calls (and with
    ``pieces`` the functions of ``_PIECES``) with CPU timers and write the totals to
    ``folder`` whenever a ``snap-<n>`` file appears there. A store call counts only outside
    another (``put_if_dir`` is not counted again inside ``put``); a piece counts only outside
    itself, so pieces overlap (``AgentActor._write`` holds puts, ``Ray: actor calls``
    serialising)."""
    import importlib

    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    depth: dict[str, threading.local] = collections.defaultdict(threading.local)

    def timed(label: str, group: str, call: Any) -> Any:
        nesting = depth[group]

        @functools.wraps(call)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            outer = not getattr(nesting, "n", 0)
            nesting.n = getattr(nesting, "n", 0) + 1
            start = time.thread_time()
            try:
                return call(*args, **kwargs)
            finally:
                nesting.n -= 1
                if outer:
                    entry = totals[label]
                    entry[0] += 1
                    entry[1] += time.thread_time() - start

        return wrapper

    from raygents.store import FileStore

    for name in _STORE_CALLS:
        setattr(FileStore, name, timed(name, "store", getattr(FileStore, name)))
    for label, (module, path) in _PIECES.items() if pieces else ():
        owner: Any = importlib.import_module(module)
        *outer_names, name = path.split(".")
        for part in outer_names:
            owner = getattr(owner, part)
        setattr(owner, name, timed(f"piece {label}", label, getattr(owner, name)))

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
    """Every worker's cumulative totals of its timed calls, by pid."""
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


Woken = collections.Counter[tuple[int, int]]
"""Wake-ups by (pid, tid)."""


def measure(
    sides: dict[str, Any], pids: dict[int, str], reps: int, m: int
) -> tuple[dict[str, list[dict[tuple[int, int], float]]], dict[str, list[Woken]]]:
    """Run each side ``reps`` times, alternating: for each run, the CPU seconds and the
    wake-ups of every thread of the side's own processes."""
    used: dict[str, list[dict[tuple[int, int], float]]] = {side: [] for side in sides}
    woken: dict[str, list[Woken]] = {side: [] for side in sides}
    for _ in range(reps):
        for side, run in sides.items():
            C.warm_pool(max(m, 8))
            before, slept = thread_cpu(pids), wakeups(pids)
            run()
            after, awake = thread_cpu(pids), wakeups(pids)
            mine = OWN[side]
            used[side].append(
                {k: cpu - before.get(k, 0.0) for k, cpu in after.items() if pids[k[0]] in mine}
            )
            woken[side].append(collections.Counter())
            for key, count in awake.items():
                if pids[key[0]] in mine:
                    woken[side][-1][key] = count - slept.get(key, count)
    return used, woken


def report_wakeups(
    woken: dict[str, list[Woken]],
    pids: dict[int, str],
    names: dict[int, dict[int, str]],
    m: int,
) -> None:
    """Print each side's wake-ups per child, by thread: Python's name for it where it has one
    (``names``, from ``py-spy dump``), else the kernel's (Ray names its C++ threads)."""
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
    """Print the store calls and the pieces timed between two snapshots, per child."""
    print(f"\nraygents' file store calls, CPU ms per child (mean over {children} children):")
    total = 0.0
    pieces = []
    for pid in sorted(end):
        role = pids.get(pid, "ray worker")
        for name, (count, cpu) in sorted(end[pid].items()):
            count0, cpu0 = start.get(pid, {}).get(name, (0, 0.0))
            calls, ms = (count - count0) / children, 1000 * (cpu - cpu0) / children
            if name.startswith("piece "):
                pieces.append((role, pid, name.removeprefix("piece "), calls, ms))
            elif calls:
                total += ms
                print(f"  {role:18s} {pid:>7d} {name:16s} {calls:5.2f} calls  {ms:6.3f}")
    print(f"  all: {total:.2f}")
    print("\nparts of a child run, CPU ms per child, each with what it calls (they overlap):")
    for role, pid, name, calls, ms in pieces:
        if ms >= 0.05:
            print(f"  {role:18s} {pid:>7d} {name:24s} {calls:5.2f} calls  {ms:6.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--durability", default="sync", choices=("sync", "async", "exit"))
    ap.add_argument(
        "--pieces",
        action="store_true",
        help="also time the parts of a child run in _PIECES (their timers cost CPU too)",
    )
    ap.add_argument("--table", help="a run.py JSON: the CPU per child its fan-out targets leave")
    args = ap.parse_args()

    import raygents as rg

    folder = C.scratch("rgrecords-")

    def hook() -> None:  # (a plain function: Ray exports the hook by its name)
        _time_calls(folder, args.pieces)

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
    per_child = {
        side: 1000 * statistics.median(sum(run.values()) for run in runs) / args.m
        for side, runs in used.items()
    }
    print(
        f"M = {args.m}, sleeping tools, durability {args.durability}, runs a side: {args.reps}; "
        "CPU ms per child (median run)"
    )
    for side, ms in per_child.items():
        print(f"  {side:10s} {ms:6.2f}  (agent actors, coordinator and driver)")
    print(f"  raygents over the floor: {per_child['raygents'] - per_child['ray_floor']:.2f}")
    names = {pid: thread_names(pid) for pid, role in pids.items() if role != "driver"}
    for side, runs in used.items():
        loops = [
            sum(
                cpu
                for (pid, tid), cpu in run.items()
                if "AsyncIO" in names.get(pid, {}).get(tid, "")
            )
            for run in runs
        ]
        loop_ms = 1000 * statistics.median(loops) / args.m
        print(f"  {side:10s} event loops of its actors: {loop_ms:.2f}")
    report_wakeups(woken, pids, names, args.m)
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
