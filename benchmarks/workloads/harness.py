"""Driving batches of runs on each side and timing them."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class RecoveryCount(logging.Handler):
    """Counts raygents' ``run ... recovered`` log lines (a run dispatched again after its
    agent actor died or was judged stale) while attached to the ``raygents`` logger."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "recovered" in record.getMessage():
            self.count += 1

    def __enter__(self) -> RecoveryCount:
        self.count = 0
        logging.getLogger("raygents").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("raygents").removeHandler(self)


async def _rg_batch_async(agent: Any, inputs: list[str], **options: Any) -> dict[str, Any]:
    import raygents as rg

    loop = asyncio.get_running_loop()
    starter = ThreadPoolExecutor(1, thread_name_prefix="starter")
    latencies: list[float] = [0.0] * len(inputs)
    errors: list[str] = []

    async def follow(i: int, handle: Any, t_start: float) -> None:
        try:
            await handle
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
        latencies[i] = time.perf_counter() - t_start

    t0 = time.perf_counter()
    followers = []
    for i, text in enumerate(inputs):
        ts = time.perf_counter()
        handle = await loop.run_in_executor(starter, lambda t=text: rg.start(agent, t, **options))
        followers.append(asyncio.ensure_future(follow(i, handle, ts)))
    started = time.perf_counter() - t0
    await asyncio.gather(*followers)
    wall = time.perf_counter() - t0
    starter.shutdown()
    return {"wall_s": wall, "start_s": started, "latencies": latencies, "errors": errors}


def rg_batch(agent: Any, inputs: list[str], **options: Any) -> dict[str, Any]:
    """Start one raygents run per input (as a user would: ``raygents.start`` one after the
    other) and wait for them all; wall time, time to start them, per-run latency (start call
    to result), errors, and how many runs were recovered."""
    with RecoveryCount() as recovered:
        out = asyncio.run(_rg_batch_async(agent, inputs, **options))
    out["recovered"] = recovered.count
    return out


async def sdk_batch_async(agent: Any, inputs: list[str], max_turns: int = 10) -> dict[str, Any]:
    """The same with the SDK: ``Runner.run`` for each input, all concurrently."""
    from agents import Runner

    latencies: list[float] = [0.0] * len(inputs)
    errors: list[str] = []

    async def one(i: int, text: str) -> None:
        ts = time.perf_counter()
        try:
            await Runner.run(agent, text, max_turns=max_turns)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
        latencies[i] = time.perf_counter() - ts

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i, t) for i, t in enumerate(inputs)))
    return {
        "wall_s": time.perf_counter() - t0,
        "start_s": 0.0,
        "latencies": latencies,
        "errors": errors,
    }


async def floor_batch_async(calls: list[Any]) -> dict[str, Any]:
    """The Ray floor: a list of zero-argument functions, each returning an ObjectRef."""
    latencies: list[float] = [0.0] * len(calls)

    async def one(i: int, make: Any) -> None:
        ts = time.perf_counter()
        await make()
        latencies[i] = time.perf_counter() - ts

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i, c) for i, c in enumerate(calls)))
    return {
        "wall_s": time.perf_counter() - t0,
        "start_s": 0.0,
        "latencies": latencies,
        "errors": [],
    }


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)
