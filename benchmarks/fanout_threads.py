"""Where the CPU of one fan-out goes, by process and by thread, against the Ray floor; and what
every Ray process costs while idle.

    python benchmarks/fanout_threads.py [--m 64] [--reps 3] [--tool sleep] [--idle-s 10]
                                        [--soft-limit N]

Runs workload 3's fan-out (M sub-agents, one tool call each) with raygents and with the Ray
floor, alternating, from the same worker pool (``common.warm_pool``). Before and after each
run it reads the CPU time of every thread of the agent actors (raygents' ``AgentActor``, the
floor's ``FloorAgent``), the coordinator and the driver from ``/proc``, and names the threads
with ``py-spy dump`` at the end (their kernel names are inherited and say little). Prints,
per side, the median CPU seconds of each (process, thread) over the repetitions, and the
total divided by M: the CPU each child costs. ``--tool sleep`` (the default) gives the
sub-agents 200 ms sleeping tools, so nothing competes with the actors for the CPUs; ``cpu``
is the workload's 200 ms CPU tools.

Then it waits ``--idle-s`` seconds with nothing running and prints the CPU per second of
each kind of Ray process: every Ray worker process wakes its main thread 100 times a second
to check for signals (Ray's core worker, not configurable), which is the whole idle cost of
an agent actor. ``--soft-limit`` sets how many idle workers Ray keeps (each costs that much),
for comparing the fan-out with fewer of them.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import common as C  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
_WATCHED = ("ray::AgentActor", "ray::FloorAgent", "ray::Coordinator")
OWN = {
    "ray_floor": {"ray::FloorAgent", "driver"},
    "raygents": {"ray::AgentActor", "ray::Coordinator", "driver"},
}


def processes() -> dict[int, str]:
    """The processes to watch: pid -> role (``common.role``)."""
    import psutil

    me = os.getpid()
    found = {me: "driver"}
    for proc in psutil.process_iter(["cmdline", "name"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        role = C.role(cmdline, proc.info["name"] or "", me, proc.pid)
        if role in _WATCHED or role == "ray::IDLE worker":
            found[proc.pid] = role
    return found


def thread_files(pids: dict[int, str], name: str) -> Iterator[tuple[tuple[int, int], str]]:
    """((pid, tid), text) of the file ``name`` (``stat``, ``status``) under ``/proc`` of every
    thread of ``pids`` that is still there."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/{name}") as f:
                    text = f.read()
            except FileNotFoundError:
                continue
            yield (pid, int(tid)), text


def thread_cpu(pids: dict[int, str]) -> dict[tuple[int, int], float]:
    """CPU seconds (user + system) of every thread of ``pids``, by (pid, tid)."""
    out: dict[tuple[int, int], float] = {}
    for key, text in thread_files(pids, "stat"):
        fields = text.rpartition(")")[2].split()
        out[key] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def thread_names(pid: int) -> dict[int, str]:
    """Python's names of the threads of ``pid`` (``py-spy dump``); threads without Python
    frames (Ray's C++ threads) are missing."""
    dump = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True)
    names = {}
    for line in dump.stdout.splitlines():
        if line.startswith("Thread "):
            parts = line.split('"')
            tid = int(line.split()[1], 0)
            names[tid] = parts[1] if len(parts) > 1 else "(unnamed)"
    return names


def kernel_name(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f.read().strip()
    except FileNotFoundError:
        return "?"


Usage = collections.Counter[tuple[int, int]]
"""CPU seconds by (pid, tid)."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tool", default="sleep", choices=("cpu", "sleep"))
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument(
        "--soft-limit",
        type=int,
        help="Ray's num_workers_soft_limit: how many idle workers Ray keeps (a local instance "
        "raygents starts keeps 4 per CPU, at least 8; Ray's own default is one per CPU)",
    )
    args = ap.parse_args()

    import raygents as rg

    system = {} if args.soft_limit is None else {"num_workers_soft_limit": args.soft_limit}
    C.init_raygents(store=f"file://{C.scratch('rgthreads-')}/store", _system_config=system)
    sides = C.fanout_sides(args.tool, args.m, "threads")
    per_rep: dict[str, list[Usage]] = {s: [] for s in sides}
    walls: dict[str, list[float]] = {s: [] for s in sides}
    pids = processes()
    for _ in range(args.reps):
        for side, run in sides.items():
            C.warm_pool(max(args.m, 8))
            before = thread_cpu(pids)
            t = time.perf_counter()
            run()
            walls[side].append(time.perf_counter() - t)
            after = thread_cpu(pids)
            per_rep[side].append(
                collections.Counter({k: cpu - before.get(k, 0.0) for k, cpu in after.items()})
            )
    names = {pid: thread_names(pid) for pid, role in pids.items() if role in _WATCHED}
    print(f"M = {args.m}, {args.tool} tools, medians of {args.reps}; CPU s per run")
    for side, reps in per_rep.items():
        report_side(side, reps, statistics.median(walls[side]), pids, names, args.m)
    time.sleep(2.0)
    report_idle(args.idle_s)
    rg.shutdown()


def report_side(
    side: str,
    reps: list[Usage],
    wall: float,
    pids: dict[int, str],
    names: dict[int, dict[int, str]],
    m: int,
) -> None:
    """Print one side's CPU by process and thread (medians of ``reps``)."""
    keys = set().union(*reps)
    rows = {key: statistics.median(r.get(key, 0.0) for r in reps) for key in keys}
    own = {k: v for k, v in rows.items() if pids[k[0]] in OWN[side]}
    total = sum(own.values())
    print(
        f"\n{side}: wall {wall:.3f} s; its processes {total:.3f} CPU s, "
        f"{1000 * total / m:.2f} ms per child"
    )
    by_process: collections.Counter[int] = collections.Counter()
    for (pid, _tid), cpu in own.items():
        by_process[pid] += cpu
    for pid, cpu in by_process.most_common():
        print(f"  {cpu:7.3f}  {pids[pid]} {pid}")
        for (owner, tid), thread in sorted(own.items(), key=lambda kv: -kv[1]):
            if owner == pid and thread >= 0.005:
                name = names.get(pid, {}).get(tid) or f"[{kernel_name(pid, tid)}]"
                print(f"  {thread:7.3f}      {name}")
    other = OWN["raygents" if side == "ray_floor" else "ray_floor"] - {"driver"}
    for what, roles in (
        ("the other side's processes, idle", other),
        ("Ray workers idle when the runs began (tool tasks run there)", {"ray::IDLE worker"}),
    ):
        cpu = sum(v for k, v in rows.items() if pids[k[0]] in roles)
        count = sum(1 for role in pids.values() if role in roles)
        print(f"  ({what}: {count}, {cpu:.3f} CPU s)")


def report_idle(seconds: float) -> None:
    """Print the CPU per second of each kind of process while nothing runs."""
    pids = processes()
    before = thread_cpu(pids)
    time.sleep(seconds)
    after = thread_cpu(pids)
    idle_rate: dict[str, list[float]] = collections.defaultdict(list)
    main_rate: dict[str, list[float]] = collections.defaultdict(list)
    for pid, role in pids.items():
        used = [after[k] - before.get(k, 0.0) for k in after if k[0] == pid]
        idle_rate[role].append(1000 * sum(used) / seconds)
        main = after.get((pid, pid), 0.0) - before.get((pid, pid), 0.0)
        main_rate[role].append(1000 * main / seconds)
    print(f"\nidle for {seconds:.0f} s: CPU ms per second per process (its main thread)")
    for role, rates in sorted(idle_rate.items()):
        print(
            f"  {role:18s} x{len(rates)}: {statistics.median(rates):5.1f} "
            f"({statistics.median(main_rate[role]):.1f})"
        )


if __name__ == "__main__":
    main()
