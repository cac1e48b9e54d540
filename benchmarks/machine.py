"""The machine and the Ray instance a benchmark runs on: starting raygents on a private local
instance, waiting for a quiet machine and an idle worker pool, describing the machine, moto's
S3 server, and the scratch folders, result files and log lines of a run."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)


SHARED_MODULES = ("fakes", "machine", "rayfloor", "sampling", "stats")
"""The benchmark modules the workloads import (next to ``run.py``, not installed)."""

CPUS_ENV = "RGBENCH_CPUS"
"""How many CPUs each workload's Ray instance declares (``run.py --cpus``)."""
BIG_ENV = "RGBENCH_BIG"
"""Set to ``1`` by ``run.py --big``: the workloads that scale take their big sizes."""


def cpus() -> int:
    """The CPUs of each workload's private Ray instance: ``run.py --cpus``, 2 by default."""
    return int(os.environ.get(CPUS_ENV) or 2)


def big() -> bool:
    """Whether ``run.py --big`` asked for the sizes of a bigger machine."""
    return os.environ.get(BIG_ENV) == "1"


def register_by_value() -> None:
    """Make the benchmark modules travel to Ray workers by value (they are not installed)."""
    from ray import cloudpickle

    for name, module in list(sys.modules.items()):
        if name in SHARED_MODULES or name == "workloads" or name.startswith("workloads."):
            cloudpickle.register_pickle_by_value(module)


def init_raygents(store: str, durability: str = "sync", **kwargs: Any) -> None:
    """A private local Ray instance (:func:`cpus` CPUs, no dashboard) with raygents on it."""
    import raygents as rg

    register_by_value()
    rg.init(
        num_cpus=cpus(),
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        store=store,
        durability=durability,
        handle_sigterm=False,
        **kwargs,
    )


def load() -> dict[str, Any]:
    """The machine's load right now."""
    import psutil

    return {"loadavg": list(os.getloadavg()), "cpu_percent": psutil.cpu_percent(interval=None)}


def settle(
    max_s: float = 60.0, busy_percent: float = 15.0, window_s: float = 2.0
) -> dict[str, Any]:
    """Wait until the machine is quiet: CPU use over ``window_s`` below ``busy_percent`` (of
    all CPUs), for at most ``max_s``. The processes of the previous workload (its Ray
    instance shutting down, its tool workers exiting) would otherwise run into the next one.
    Returns how long it waited and the last reading."""
    import psutil

    began = time.time()
    while True:
        busy = psutil.cpu_percent(interval=window_s)
        waited = time.time() - began
        if busy < busy_percent or waited >= max_s:
            return {"waited_s": round(waited, 1), "cpu_percent": busy}


def idle_workers() -> int:
    """How many idle Ray worker processes (``ray::IDLE``) run below this driver."""
    import psutil

    count = 0
    for p in psutil.Process().children(recursive=True):
        try:
            if " ".join(p.cmdline()).startswith("ray::IDLE"):
                count += 1
        except psutil.Error:
            continue
    return count


KEPT_IDLE_WORKERS = 8
"""Idle workers Ray keeps on the benchmarks' 2-CPU instance: raygents' ``init`` sets
``num_workers_soft_limit`` to four per CPU, at least 8 (docs/perf-log.md)."""


def settle_workers(limit: int, max_s: float = 30.0, steady_s: float = 5.0) -> dict[str, Any]:
    """Wait until at most ``limit`` idle Ray workers are left (at least
    :data:`KEPT_IDLE_WORKERS`), or their number has not gone down for ``steady_s``, for at
    most ``max_s``.

    A side whose zero-CPU tasks made Ray start a worker per pending task leaves dozens of
    idle workers behind, which Ray stops over the next seconds; the next side would
    otherwise carry their memory and their idle CPU. Returns how long it waited and how many
    were left."""
    limit = max(limit, KEPT_IDLE_WORKERS)
    began = last_drop = time.time()
    fewest = idle_workers()
    while True:
        left = idle_workers()
        now = time.time()
        if left < fewest:
            fewest, last_drop = left, now
        if left <= limit or now - last_drop >= steady_s or now - began >= max_s:
            return {"waited_s": round(now - began, 1), "idle_workers": left}
        time.sleep(0.25)


def machine_info() -> dict[str, Any]:
    """What ran the benchmarks."""
    import psutil

    versions: dict[str, str] = {}
    for pkg in ("ray", "raygents", "openai-agents", "openai", "pydantic", "msgpack", "moto"):
        try:
            from importlib.metadata import version

            versions[pkg] = version(pkg)
        except Exception:
            versions[pkg] = "?"
    try:
        rev = subprocess.run(
            ["git", "-C", REPO_DIR, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", REPO_DIR, "status", "--porcelain", "raygents"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except Exception:
        rev, dirty = "?", ""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "versions": versions,
        "git": rev + ("+dirty(raygents/)" if dirty else ""),
        "loadavg": list(os.getloadavg()),
    }


def scratch(prefix: str) -> str:
    """A new temporary folder, removed when the process exits (stores, hooks, builds)."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def dump(obj: Any, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, default=str)


def log(*parts: Any) -> None:
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


class Moto:
    """moto's S3 server in a subprocess on 127.0.0.1 (so its CPU is its own, and sampled)."""

    def __init__(self) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            # A throwaway moto store: its records are checksummed, not signed, as measured.
            "RAYGENTS_UNSIGNED_OK": "1",
        }

    def start(self) -> None:
        exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
        self.proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import urllib.request

        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).read()
                break
            except Exception:
                time.sleep(0.2)
        os.environ.update(self.env)  # before Ray starts: the coordinator inherits it

    def bucket(self, name: str) -> str:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint).create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
