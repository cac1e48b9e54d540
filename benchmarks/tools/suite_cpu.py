"""Where a machine's CPU goes while tests (or anything) run: two measurements, Linux only.

``python benchmarks/tools/suite_cpu.py sample 60`` sums every process's CPU ticks over 60
seconds, grouped by process name (Ray names its workers ``ray::<Actor>`` or ``ray::IDLE``), and
prints each group's share. Processes that start and end between two looks (every 0.5 s) are
missed.

``python benchmarks/tools/suite_cpu.py run NAME -- python -m pytest tests/x -n 0`` runs a
command in a cgroup of its own (v1 ``cpuacct``, root needed) and prints the CPU seconds it and
everything it started used (Ray's daemons and workers included, even once they leave its
process tree), with the wall time. Use a new NAME per measurement.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time

_CGROUPS = "/sys/fs/cgroup/cpuacct"
_NAMED = (
    "gcs_server",
    "raylet",
    "dashboard_agent",
    "dashboard.py",
    "log_monitor",
    "monitor.py",
    "pytest",
)
_STARTING = "default_worker.py"
"""The script of a Ray worker process still importing, before it names itself ``ray::IDLE``
(its command line also names the raylet's socket: the groups match the program, not the
arguments)."""


def _processes() -> dict[str, tuple[int, str]]:
    """pid: (CPU ticks so far, group name)."""
    found: dict[str, tuple[int, str]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        found[pid] = (int(fields[11]) + int(fields[12]), _group(comm, cmd))
    return found


def _group(comm: str, cmd: str) -> str:
    if comm.startswith("ray::"):
        return comm
    program = " ".join(cmd.split()[:3])  # (the executable, and the script Python runs)
    if _STARTING in program:
        return "ray worker starting"
    return next((name for name in _NAMED if name in program), comm)


def sample(seconds: float) -> None:
    ticks: collections.Counter[str] = collections.Counter()
    seen = _processes()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.5)
        now = _processes()
        for pid, (total, group) in now.items():
            ticks[group] += total - seen.get(pid, (0, group))[0]
        seen = {**seen, **now}
    whole = sum(ticks.values()) or 1
    hz = os.sysconf("SC_CLK_TCK")
    print(f"{whole / hz:.1f} CPU-s in {seconds:.0f} s")
    for group, n in ticks.most_common(25):
        print(f"{100 * n / whole:5.1f}%  {n / hz:7.1f} CPU-s  {group}")


def run(name: str, command: list[str]) -> int:
    group = os.path.join(_CGROUPS, name)
    os.makedirs(group, exist_ok=True)
    with open(os.path.join(group, "cpuacct.usage"), "w") as f:
        f.write("0")
    started = time.monotonic()
    joined = f'echo $$ > {group}/tasks && exec "$@"'
    code = subprocess.call(["sh", "-c", joined, "sh", *command])
    wall = time.monotonic() - started
    time.sleep(3)  # (what it left behind winds down)
    with open(os.path.join(group, "cpuacct.usage")) as f:
        cpu = int(f.read()) / 1e9
    print(f"suite_cpu {name}: exit {code}, {cpu:.1f} CPU-s, wall {wall:.1f} s")
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("sample").add_argument("seconds", type=float)
    runner = sub.add_parser("run")
    runner.add_argument("name")
    runner.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.what == "sample":
        sample(args.seconds)
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run(args.name, command)


if __name__ == "__main__":
    sys.exit(main())
