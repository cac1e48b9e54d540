"""What it costs to bring a run's events back, per run: a Ray stream per run against one call
per run plus a shared long-polling call (what raygents does), on a bare async actor.

    python benchmarks/transport.py              # 1000 concurrent "runs" of 3 items, 3 rounds
    python benchmarks/transport.py --n 300 --items 5 --rounds 5

Each "run" waits 30 ms before each item (like a run between event batches). Reported per
round and way: wall time, and CPU seconds of the caller (this process) and of the actor.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

import psutil
import ray


@ray.remote(num_cpus=0, max_concurrency=10000)
class Runs:
    def __init__(self) -> None:
        self.box: list[tuple[int, list[int]]] = []
        self.ready = asyncio.Event()
        self.relays: set[asyncio.Future[None]] = set()

    def pid(self) -> int:
        return os.getpid()

    async def stream(self, items: int) -> Any:
        for i in range(items):
            await asyncio.sleep(0.03)
            yield [i] * 5

    async def start(self, key: int, items: int) -> bool:
        task = asyncio.ensure_future(self._relay(key, items))
        self.relays.add(task)
        task.add_done_callback(self.relays.discard)
        return True

    async def _relay(self, key: int, items: int) -> None:
        for i in range(items):
            await asyncio.sleep(0.03)
            self.box.append((key, [i] * 5))
            self.ready.set()

    async def take(self) -> list[tuple[int, list[int]]]:
        if not self.box:
            self.ready.clear()
            await self.ready.wait()
        taken, self.box = self.box, []
        return taken


async def _streams(actor: Any, n: int, items: int) -> int:
    async def one() -> int:
        got = 0
        async for ref in actor.stream.remote(items):
            await ref
            got += 1
            if got == items:
                break
        return got

    return sum(await asyncio.gather(*(one() for _ in range(n))))


async def _mailbox(actor: Any, n: int, items: int) -> int:
    got = 0

    async def poll() -> None:
        nonlocal got
        while got < n * items:
            got += len(await actor.take.remote())

    poller = asyncio.ensure_future(poll())
    await asyncio.gather(*(actor.start.remote(k, items) for k in range(n)))
    await poller
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--items", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    actor = Runs.remote()  # type: ignore[attr-defined]
    actor_proc = psutil.Process(ray.get(actor.pid.remote()))
    me = psutil.Process()
    ways = {"stream per run": _streams, "start + shared take": _mailbox}
    for round_ in range(args.rounds):
        for name, way in ways.items():
            cpu0, acpu0 = sum(me.cpu_times()[:2]), sum(actor_proc.cpu_times()[:2])
            t0 = time.perf_counter()
            got = asyncio.run(way(actor, args.n, args.items))
            wall = time.perf_counter() - t0
            cpu = sum(me.cpu_times()[:2]) - cpu0
            acpu = sum(actor_proc.cpu_times()[:2]) - acpu0
            assert got == args.n * args.items
            print(
                f"round {round_ + 1} {name:20s} wall {wall:.2f} s  caller CPU {cpu:.2f} s  "
                f"actor CPU {acpu:.2f} s  ({(cpu + acpu) / args.n * 1e3:.2f} ms per run)",
                flush=True,
            )
    ray.shutdown()


if __name__ == "__main__":
    main()
