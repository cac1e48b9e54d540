"""A batch job's ticker outlives a failed flush: the error is logged and the flush is tried
again on a later tick (the ledger, an output in a store, the progress display)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from types import SimpleNamespace

import pytest

import raygents as rg
from raygents.batch import job as batch_job
from raygents.batch.job import BatchHandle
from raygents.batch.output import open_ledger
from raygents.errors import CheckpointError
from raygents.stores.memory import MemoryStore


def fresh_store() -> MemoryStore:
    """A memory store of its own (those of one name are shared in the process)."""
    return MemoryStore(os.urandom(6).hex())


class FlakyStore(MemoryStore):
    """A store whose first ``fails`` puts fail."""

    def __init__(self, fails: int) -> None:
        super().__init__(os.urandom(6).hex())
        self.fails = fails

    def _put(self, key: str, data: bytes) -> None:
        if self.fails:
            self.fails -= 1
            raise CheckpointError("put failed: service unavailable")
        super()._put(key, data)


def test_a_failed_ledger_flush_is_logged_and_retried(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(batch_job, "_TICK_S", 0.01)
    monkeypatch.setattr(batch_job, "_FLUSH_S", 0.0)
    store = FlakyStore(fails=2)
    handle = BatchHandle(SimpleNamespace(job_id="j"), [], 1, None, None)  # type: ignore[arg-type]
    handle._ledger = open_ledger(store, "j")
    handle._end(rg.BatchItem(0, "j.0", "completed", output="done"))

    async def tick_until_put() -> bool:
        loop = asyncio.get_running_loop()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            ticker = loop.create_task(handle._tick(loop, pool))
            for _ in range(300):
                await asyncio.sleep(0.01)
                if store.list("jobs/") or ticker.done():
                    break
            alive = not ticker.done()
            ticker.cancel()
            return alive

    with caplog.at_level(logging.WARNING, logger="raygents"):
        alive = asyncio.run(tick_until_put())
    assert alive
    assert len(store.list("jobs/j/")) == 1
    assert "service unavailable" in caplog.text and "'j'" in caplog.text
