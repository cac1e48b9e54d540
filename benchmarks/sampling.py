"""CPU and memory of every process of a benchmark (the driver and all of Ray's processes below
it), sampled from a separate process, and the CPU time of garbage collections."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

from machine import BENCH_DIR, dump


def role(cmdline: str, name: str, me: int, pid: int) -> str:
    """A short role name for a process of the benchmark."""
    if pid == me:
        return "driver"
    for key, label in (
        ("gcs_server", "gcs_server"),
        ("raylet", "raylet"),
        ("ray::Coordinator", "ray::Coordinator"),
        ("ray::AgentActor", "ray::AgentActor"),
        ("ray::FloorAgent", "ray::FloorAgent"),
        ("ray::MarkedFloor", "ray::FloorAgent"),  # (tools/phases.py)
        ("ray::_ScriptStore", "ray::_ScriptStore"),
        ("ray::tool:", "ray::tool worker"),
        ("ray::IDLE", "ray::IDLE worker"),
        ("ray::bare_task", "ray::task worker"),
        ("ray::cpu_task", "ray::task worker"),
        ("ray::nap_task", "ray::task worker"),
        ("dashboard/agent.py", "ray dashboard agent"),
        ("runtime_env/agent", "ray runtime_env agent"),
        ("log_monitor", "ray log_monitor"),
        ("moto_server", "moto_server"),
        ("default_worker.py", "ray worker"),
        ("ray::", "ray worker"),
    ):
        if key in cmdline:
            return label
    return name


class ProcSampler:
    """Samples process ``root`` (the driver) and all its descendants (Ray's processes, started
    by the driver with ``address="local"``, are all below it) every ``interval_s``: CPU seconds
    used inside the window, peak RSS and peak PSS per process and of the sum over processes.

    Use :class:`Sampler` (a separate process) around a measurement, so that sampling takes
    neither the driver's GIL nor its CPU time."""

    def __init__(self, root: int, interval_s: float = 0.5, pss: bool = True) -> None:
        import psutil

        self.psutil = psutil
        self.interval_s = interval_s
        self.pss = pss
        self.root = root
        self.me = os.getpid()
        self.procs: dict[int, dict[str, Any]] = {}
        self.peak_total_rss = 0
        self.peak_total_pss = 0
        self.samples = 0
        self.sys_cpu: list[float] = []
        self.wall0 = time.time()
        self.t0 = time.perf_counter()
        self.t1 = self.t0
        psutil.cpu_percent(interval=None)

    def scan(self) -> None:
        psutil = self.psutil
        try:
            top = psutil.Process(self.root)
            procs = [top, *top.children(recursive=True)]
        except psutil.Error:
            return
        total_rss = total_pss = 0
        for p in procs:
            if p.pid == self.me:
                continue
            try:
                with p.oneshot():
                    cpu = p.cpu_times()
                    used = cpu.user + cpu.system
                    if self.pss:
                        mem = p.memory_full_info()
                        rss, pss = mem.rss, getattr(mem, "pss", mem.rss)
                    else:
                        rss = pss = p.memory_info().rss
                    entry = self.procs.get(p.pid)
                    if entry is None:
                        born = p.create_time()
                        cmd = " ".join(p.cmdline())[:200]
                        entry = self.procs[p.pid] = {
                            "pid": p.pid,
                            "role": role(cmd, p.name(), self.root, p.pid),
                            "cmdline": cmd,
                            "cpu_first": 0.0 if born >= self.wall0 else used,
                            "cpu_last": used,
                            "peak_rss": rss,
                            "peak_pss": pss,
                        }
                    else:
                        if entry["role"] in ("ray worker", "ray::IDLE worker"):
                            cmd = " ".join(p.cmdline())[:200]
                            new_role = role(cmd, p.name(), self.root, p.pid)
                            if new_role not in ("ray worker", "ray::IDLE worker"):
                                entry["role"], entry["cmdline"] = new_role, cmd
                        entry["cpu_last"] = used
                        entry["peak_rss"] = max(entry["peak_rss"], rss)
                        entry["peak_pss"] = max(entry["peak_pss"], pss)
                total_rss += rss
                total_pss += pss
            except psutil.Error:
                continue
        self.peak_total_rss = max(self.peak_total_rss, total_rss)
        self.peak_total_pss = max(self.peak_total_pss, total_pss)
        self.samples += 1
        self.sys_cpu.append(psutil.cpu_percent(interval=None))
        self.t1 = time.perf_counter()

    def report(self) -> dict[str, Any]:
        """Per role and per process: CPU seconds in the window, peak RSS / PSS in MB."""
        wall = self.t1 - self.t0
        by_role: dict[str, dict[str, Any]] = {}
        rows = []
        for e in self.procs.values():
            cpu = max(0.0, e["cpu_last"] - e["cpu_first"])
            rows.append(
                {
                    "pid": e["pid"],
                    "role": e["role"],
                    "cpu_s": round(cpu, 3),
                    "peak_rss_mb": round(e["peak_rss"] / 2**20, 1),
                    "peak_pss_mb": round(e["peak_pss"] / 2**20, 1),
                    "cmdline": e["cmdline"][:120],
                }
            )
            r = by_role.setdefault(
                e["role"], {"count": 0, "cpu_s": 0.0, "peak_rss_mb": 0.0, "peak_pss_mb": 0.0}
            )
            r["count"] += 1
            r["cpu_s"] = round(r["cpu_s"] + cpu, 3)
            r["peak_rss_mb"] = round(r["peak_rss_mb"] + e["peak_rss"] / 2**20, 1)
            r["peak_pss_mb"] = round(r["peak_pss_mb"] + e["peak_pss"] / 2**20, 1)
        total_cpu = sum(r["cpu_s"] for r in rows)
        return {
            "wall_s": round(wall, 3),
            "cpu_s_total": round(total_cpu, 3),
            "cpu_util_of_2_cores": round(total_cpu / wall / 2, 3) if wall > 0 else None,
            "peak_total_rss_mb": round(self.peak_total_rss / 2**20, 1),
            "peak_total_pss_mb": round(self.peak_total_pss / 2**20, 1),
            "system_cpu_percent_p50": statistics.median(self.sys_cpu) if self.sys_cpu else None,
            "samples": self.samples,
            "by_role": dict(sorted(by_role.items(), key=lambda kv: -kv[1]["cpu_s"])),
            "processes": sorted(rows, key=lambda r: -r["cpu_s"])[:40],
        }


def _sampler_main(root: int, out: str, interval_s: float, pss: bool) -> None:
    import signal

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sampler = ProcSampler(root, interval_s, pss)
    sampler.scan()
    print("ready", flush=True)
    import psutil

    while not stop.wait(interval_s):
        if not psutil.pid_exists(root):  # the driver is gone: do not linger
            break
        sampler.scan()
    sampler.scan()
    dump(sampler.report(), out)


class Sampler:
    """A :class:`ProcSampler` in a separate process over this process and its descendants::

    with Sampler() as s:
        ...
    s.report  # the dict of ProcSampler.report()
    """

    def __init__(self, interval_s: float = 0.5, pss: bool = True) -> None:
        self.interval_s, self.pss = interval_s, pss
        self.report: dict[str, Any] = {}

    def __enter__(self) -> Sampler:
        import tempfile

        fd, self.out = tempfile.mkstemp(suffix=".json", prefix="sampler-")
        os.close(fd)
        code = (
            f"import sys; sys.path.insert(0, {BENCH_DIR!r}); import sampling; "
            f"sampling._sampler_main({os.getpid()}, {self.out!r}, {self.interval_s}, {self.pss})"
        )
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "ready": the first scan is done
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        try:
            with open(self.out) as f:
                self.report = json.load(f)
        except (OSError, ValueError):
            self.report = {"error": "the sampler wrote nothing"}
        os.unlink(self.out)


def idle_footprint(pss: bool = True) -> dict[str, Any]:
    """Total RSS / PSS of the driver and its descendants right now."""
    s = ProcSampler(os.getpid(), pss=pss)
    s.scan()
    r = s.report()
    return {
        "total_rss_mb": r["peak_total_rss_mb"],
        "total_pss_mb": r["peak_total_pss_mb"],
        "processes": len(r["processes"]),
        "by_role": {
            k: {"count": v["count"], "pss_mb": v["peak_pss_mb"]} for k, v in r["by_role"].items()
        },
    }


def worker_processes(report: dict[str, Any]) -> int:
    """Worker processes a sampler saw (idle ones included), not all alive at once."""
    roles = report.get("by_role") or {}
    return sum(v["count"] for role, v in roles.items() if "worker" in role)


GC_TIMES_DIR = "RG_BENCH_GC_DIR"
"""The environment variable naming the folder of :func:`time_collections`."""


def time_collections() -> None:
    """Add up the CPU time this process spends in garbage collections, in a file of the folder
    named by ``$RG_BENCH_GC_DIR`` (``<pid>``, rewritten every 0.2 s by a thread): a Ray worker
    setup hook, and for the driver itself. :func:`collection_times` reads the files."""
    import gc
    import threading

    folder = os.environ[GC_TIMES_DIR]
    spent = [0.0]
    began = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.thread_time()
        else:
            spent[0] += time.thread_time() - began[0]

    def report() -> None:
        path = os.path.join(folder, str(os.getpid()))
        while True:
            time.sleep(0.2)
            with open(path + ".tmp", "w") as f:
                f.write(repr(spent[0]))
            os.replace(path + ".tmp", path)

    gc.callbacks.append(timed)
    threading.Thread(target=report, daemon=True, name="gc-times").start()


def collection_times(folder: str) -> dict[int, float]:
    """CPU seconds in garbage collections so far, by process (:func:`time_collections`)."""
    out = {}
    for name in os.listdir(folder):
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError), open(os.path.join(folder, name)) as f:
                out[int(name)] = float(f.read())
    return out
