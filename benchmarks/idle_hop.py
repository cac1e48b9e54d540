"""How long one Ray actor call takes on this machine after the processes were idle.

    python benchmarks/idle_hop.py [--n 60]

A bare async actor (no raygents) is called ``n`` times per idle gap (0, 1, 5, 20 and 100 ms
between calls), from an asyncio loop in a background thread (as the raygents driver does)
and with ``ray.get`` from the main thread. Each call carries the caller's
``time.perf_counter()`` (one monotonic clock for every process here), so the actor reports
the one-way time; the caller measures the round trip. Prints medians per gap.

This is the unit behind finding 4 of ``benchmarks/README.md``: a 2-turn run with 100 ms model
calls makes its hops (start, tool tasks, the result) right after 100 ms of idling, where each
costs about twice what it costs back to back. The Ray floor pays the same; the SDK, in one
process, pays none.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common as C

GAPS_S = (0.0, 0.001, 0.005, 0.02, 0.1)


def main() -> None:
    args = C.bare_ray_args(__doc__, 60)

    import ray

    @ray.remote(num_cpus=0, max_concurrency=10_000)
    class Stamp:
        async def call(self, sent: float) -> float:
            return time.perf_counter() - sent

    actor = Stamp.remote()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def from_loop() -> tuple[float, float]:
        sent = time.perf_counter()
        one_way = await actor.call.remote(sent)
        return one_way, time.perf_counter() - sent

    def from_get() -> tuple[float, float]:
        sent = time.perf_counter()
        one_way = ray.get(actor.call.remote(sent))
        return one_way, time.perf_counter() - sent

    def measure(call: Any, gap: float) -> tuple[float, float]:
        rows = []
        for _ in range(args.n):
            time.sleep(gap)
            rows.append(call())
        return (
            1e3 * statistics.median(r[0] for r in rows),
            1e3 * statistics.median(r[1] for r in rows),
        )

    def looped() -> tuple[float, float]:
        return asyncio.run_coroutine_threadsafe(from_loop(), loop).result()

    try:
        measure(from_get, 0.0)  # warm up
        print(
            "idle gap  | from an asyncio loop: one way, round trip | ray.get: one way, round trip"
        )
        for gap in GAPS_S:
            lw, lr = measure(looped, gap)
            gw, gr = measure(from_get, gap)
            print(
                f"{1e3 * gap:6.0f} ms | {lw:10.2f} ms {lr:10.2f} ms"
                f"                  | {gw:10.2f} ms {gr:10.2f} ms"
            )
    finally:
        loop.call_soon_threadsafe(loop.stop)
        ray.shutdown()


if __name__ == "__main__":
    main()
