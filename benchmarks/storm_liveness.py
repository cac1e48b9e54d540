"""Heartbeats during a storm of zero-CPU tool tasks: how late Ray delivers calls to a busy
actor, whether the actor's own calls still flow, and whether raygents judges it stale.

    python benchmarks/storm_liveness.py                  # N=1000 runs, stale_after_s=8, 2 reps
    python benchmarks/storm_liveness.py --side floor     # the bare Ray actor only
    python benchmarks/storm_liveness.py --stale 30 --reps 3

``raygents`` side: N concurrent 2-turn runs, 4 ``num_cpus=0`` tool tasks each, 100 ms model
latency, ``sync`` on the file store (workload 2's ``raygents_task``), with ``stale_after_s``
lowered to ``--stale`` so that a storm like that of the full benchmark's N=1000 (where the
default 30 s was crossed) crosses it too. Reported per repetition: wall time, how many runs
were recovered (``recovered`` log lines), and the latency of each heartbeat ping the driver
sent to the agent actor.

``floor`` side: the Ray floor's bare async actor doing the same work (sleep, 4 bare tasks,
sleep) N times at once, pinged every second from a driver thread, while a thread in the actor
calls a sink actor every 0.5 s: the largest gap between those calls' arrivals at the sink.

Run it on a quiet machine: the storm is Ray starting hundreds of worker processes.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import threading
import time
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import common as C  # noqa: E402
from workloads import harness as H  # noqa: E402


def raygents_side(n: int, reps: int, stale_s: float) -> None:
    import raygents as rg
    from raygents.runtime import directory

    pings: list[tuple[float, float | None]] = []
    real_ping = directory._ping

    async def timed_ping(actor: Any) -> Any:
        sent = time.monotonic()
        pings.append((sent, None))
        index = len(pings) - 1
        answer = await real_ping(actor)
        pings[index] = (sent, time.monotonic() - sent)
        return answer

    directory._ping = timed_ping  # type: ignore[assignment]
    C.init_raygents(
        store=f"file://{C.scratch('rgstorm-')}/store",
        durability="sync",
        stale_after_s=stale_s,
    )
    agent = rg.Agent("storm", tools=C.rg_tools("task"), model=C.rg_model(C.ToolTurns(k=4), 0.1))
    H.rg_batch(agent, [f"k=4 warm {i}" for i in range(10)])
    for rep in range(reps):
        pings.clear()
        t0 = time.monotonic()
        out = H.rg_batch(agent, [f"k=4 run {i}" for i in range(n)])
        late = [
            f"{s - t0:.1f}s: {'unanswered' if lat is None else f'{lat:.2f}s'}" for s, lat in pings
        ]
        print(
            f"raygents rep {rep}: wall {out['wall_s']:.1f} s, errors {len(out['errors'])}, "
            f"recovered {out['recovered']} of {n}, load {os.getloadavg()[0]:.1f}; "
            f"pings (sent at: latency) {late}",
            flush=True,
        )
        time.sleep(3.0)
    rg.shutdown()


def floor_side(n: int, reps: int) -> None:
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    bare = C.floor()["bare_task"]

    @ray.remote(num_cpus=0)
    class Sink:
        def __init__(self) -> None:
            self.arrivals: list[float] = []

        def beat(self) -> None:
            self.arrivals.append(time.time())

        def since(self, t: float) -> list[float]:
            return [a for a in self.arrivals if a >= t]

    @ray.remote(num_cpus=0, max_concurrency=10_000)
    class Floor:
        def __init__(self, sink: Any) -> None:
            self.sink = sink
            threading.Thread(target=self._beat, daemon=True).start()

        def _beat(self) -> None:
            while True:
                self.sink.beat.remote()
                time.sleep(0.5)

        async def ping(self) -> int:
            return os.getpid()

        async def work(self) -> None:
            await asyncio.sleep(0.1)
            await asyncio.gather(*(bare.remote(j) for j in range(4)))
            await asyncio.sleep(0.1)

    sink = Sink.remote()
    actor = Floor.remote(sink)
    ray.get(actor.ping.remote())
    latencies: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            sent = time.time()
            ray.get(actor.ping.remote())
            latencies.append(time.time() - sent)
            stop.wait(max(0.0, 1.0 - (time.time() - sent)))

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    for rep in range(reps):
        latencies.clear()
        t0 = time.time()
        out = H.run_async(H.floor_batch_async([lambda: actor.work.remote()] * n))
        arrivals = ray.get(sink.since.remote(t0))
        gaps = [b - a for a, b in itertools.pairwise(arrivals)]
        print(
            f"floor rep {rep}: wall {out['wall_s']:.1f} s, load {os.getloadavg()[0]:.1f}; "
            f"slowest ping {max(latencies, default=0):.2f} s; "
            f"largest gap between the actor's own calls {max(gaps, default=0):.2f} s",
            flush=True,
        )
        time.sleep(3.0)
    stop.set()
    prober.join()
    ray.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", default="both", choices=("both", "raygents", "floor"))
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--stale", type=float, default=8.0, help="stale_after_s for raygents")
    args = ap.parse_args()
    if args.side in ("both", "floor"):
        floor_side(args.n, args.reps)
    if args.side in ("both", "raygents"):
        raygents_side(args.n, args.reps, args.stale)


if __name__ == "__main__":
    main()
