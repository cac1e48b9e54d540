"""The coordinator's clean-up keeps up with runs ending by the thousand: it does the chores
queued by then in one trip to its thread, so its queue cannot grow without bound (no Ray)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from raygents.records.runinfo import RunInfo
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.link.settings import Settings

RUNS = 1000


def _end(coord: Coordinator, run_ids: list[str]) -> None:
    coord.noted([(r, 1, 1, b"record", ("running", "agent", 1, None), True) for r in run_ids], [])
    result: dict[str, Any] = {"final_output": "done", "messages": [], "usage": None}
    for run_id in run_ids:
        coord._finish(RunInfo(run_id, "completed", "agent", 1, seq=1), {**result, "turns": 1})


async def test_a_thousand_ended_runs_are_cleaned_in_a_few_trips_to_the_thread() -> None:
    coord = Coordinator("test", Settings(store=f"memory://clean-{os.urandom(4).hex()}"))
    run_ids = [f"run-{i}" for i in range(RUNS)]
    await coord.apply([("claim", (r, "t", "agent")) for r in run_ids])
    trips = 0
    submit = coord.cleaner._thread.submit

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal trips
        trips += 1
        return submit(*args, **kwargs)

    coord.cleaner._thread.submit = counted  # type: ignore[method-assign]
    _end(coord, run_ids)
    queue = coord.cleaner._queue
    assert queue is not None and queue.qsize() == RUNS
    for _ in range(200):  # (each trip is a hop to the thread and back)
        await asyncio.sleep(0.01)
        if queue.empty() and trips:
            break
    assert queue.empty()
    assert trips <= 10, f"{trips} trips to the clean-up thread for {RUNS} chores"
