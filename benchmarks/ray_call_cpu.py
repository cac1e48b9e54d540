"""CPU seconds one Ray actor call costs on this machine, caller and callee.

    python benchmarks/ray_call_cpu.py [--n 1000]

A bare async actor (no raygents) answers ``n`` calls: one after another (each call alone, as
when runs finish at different times) and all at once (many calls in flight, as in a burst).
Prints the CPU time of the calling process and of the actor's process per call (user +
system, all threads), and the wall time per call. This is the unit behind the fan-out
finding in ``benchmarks/README.md``: every message a child run sends on its own costs about
this much.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common as C


def main() -> None:
    args = C.bare_ray_args(__doc__, 1000)

    import psutil
    import ray

    @ray.remote(num_cpus=0, max_concurrency=10_000)
    class Echo:
        async def call(self, payload: Any = None) -> int:
            return 0

        def pid(self) -> int:
            return os.getpid()

    echo = Echo.remote()
    callee = psutil.Process(ray.get(echo.pid.remote()))
    caller = psutil.Process()

    def cpu(p: Any) -> float:
        t = p.cpu_times()
        return float(t.user + t.system)

    def one_by_one(n: int, payload: Any) -> None:
        for _ in range(n):
            ray.get(echo.call.remote(payload))

    def all_at_once(n: int, payload: Any) -> None:
        ray.get([echo.call.remote(payload) for _ in range(n)])

    try:
        for label, fn in (("one after another", one_by_one), ("all at once", all_at_once)):
            for payload in (None, b"x" * 2048):
                fn(50, payload)  # warm up
                c0, e0, t0 = cpu(caller), cpu(callee), time.perf_counter()
                fn(args.n, payload)
                wall = time.perf_counter() - t0
                c1, e1 = cpu(caller), cpu(callee)
                size = "no argument" if payload is None else f"{len(payload)} B argument"
                print(
                    f"{label:17s} {size:15s} CPU per call: caller {1e3 * (c1 - c0) / args.n:.2f}"
                    f" ms, actor {1e3 * (e1 - e0) / args.n:.2f} ms; wall per call "
                    f"{1e3 * wall / args.n:.2f} ms"
                )
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
