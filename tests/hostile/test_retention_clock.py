"""Retention ages runs by the ``at`` their writer's clock put in their records and markers:
a time in the future (a node whose clock runs ahead, or a planted record) is age 0, never
past retention, and it does not hold back the expiry of the runs that are."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

from raygents.cli.main import main
from raygents.records import checkpoint, codec, retention
from raygents.records.keptresult import done_marker
from raygents.records.runinfo import RunInfo, RunSummary
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.link.settings import Settings
from raygents.stores.open import FileStore

YEAR = 365 * 86400.0


def _marker(run_id: str, at: float) -> bytes:
    result = RunSummary(final_output="out", messages=(), usage=None, turns=1, agent_name="agent")
    done = done_marker(RunInfo(run_id, "completed", "agent", 1, seq=1), 1, result)
    return codec.encode({**done, "at": at})


def _record(run_id: str, status: str, at: float) -> bytes:
    state = {"agent_name": "agent", "turns": 1, "epoch": 1}
    record = {
        "format": 1, "run_id": run_id, "seq": 1, "kind": "full", "status": status, "keep": 0,
        "append": [], "state": state, "at": at,
    }  # fmt: skip
    return codec.encode(record)


def test_a_run_that_ends_in_the_future_is_never_past_retention(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put("runs/ahead/done.1", _marker("ahead", time.time() + 5.0))
    store.put("runs/far-ahead/done.1", _marker("far-ahead", time.time() + YEAR))
    store.put(checkpoint.key_for("failed", 1, 1), _record("failed", "failed", time.time() + 60))
    for older_than in (0.0, -YEAR):  # (an age below 0 is none)
        expired, _ = retention.scan(store, None, retention.cutoff_of(older_than))
        assert expired == []
    out = io.StringIO()
    assert main(["gc", "--store", f"file://{tmp_path}", "--older-than", "0s", "--json"], out) == 0
    assert json.loads(out.getvalue())["runs"] == []
    assert len(store.list("runs/")) == 3


async def test_a_run_that_ends_in_the_future_does_not_hold_back_the_expiry_of_others(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path)
    store.put("runs/far-ahead/done.1", _marker("far-ahead", time.time() + YEAR))
    coord = Coordinator("test", Settings(store=f"file://{tmp_path}", retention_s=600.0))
    table = coord.table
    assert await coord.records.rebuilt(timeout_s=10.0)
    table._prune(table._completed, 0)  # forgotten first: the oldest end the expiry looks at
    for i in range(3):  # runs that end later, by the coordinator's clock
        table.update(RunInfo(f"r{i}", "completed", "agent", 1))
    table._prune(table._completed, 0)
    assert table.aging is not None and len(table.aging) == 4
    assert coord.cleaner.expire_due(time.time() + 1.0) == 3, "r0, r1 and r2 are past it"
    assert [run_id for _, run_id in table.aging] == ["far-ahead"], "never past retention"
