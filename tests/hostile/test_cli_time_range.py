"""A record or marker whose ``at`` is a finite number past any calendar (``1e300``, ``-1e18``)
is shown as an unknown time (``-``) by ``raygents runs`` and ``raygents gc``, which exit as
they would otherwise: never a raw ``OverflowError``, and never one after ``gc`` deleted."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from raygents.cli.main import main
from raygents.cli.output import run_row, wall_seconds, wall_text
from raygents.records import checkpoint, codec
from raygents.records.keptresult import done_marker
from raygents.records.runinfo import RunInfo, RunSummary
from raygents.stores.open import FileStore

OUT_OF_RANGE = [1e300, -1e300, 1e18, -1e18, 253402300800.0]  # (the last: the year 10000)


def _record(run_id: str, status: str, at: float) -> bytes:
    state = {"agent_name": "agent", "turns": 1, "epoch": 1}
    record = {
        "format": 1, "run_id": run_id, "seq": 1, "kind": "full", "status": status, "keep": 0,
        "append": [], "state": state, "at": at,
    }  # fmt: skip
    return codec.encode(record)


def _marker(run_id: str, at: float) -> bytes:
    result = RunSummary(final_output="out", messages=(), usage=None, turns=1, agent_name="agent")
    done = done_marker(RunInfo(run_id, "completed", "agent", 1, seq=1), 1, result)
    return codec.encode({**done, "at": at})


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


@pytest.mark.parametrize("at", OUT_OF_RANGE)
def test_a_run_row_shows_a_time_out_of_range_as_unknown(at: float) -> None:
    assert run_row("r1", "failed", "agent", 1, at, None)["updated"] is None


def test_a_wall_time_between_times_out_of_range_is_unknown() -> None:
    wall = wall_seconds("completed", -1.7e308, 1.7e308)
    assert wall is None and wall_text(wall) == "-"


def test_runs_and_gc_on_a_store_show_times_out_of_range_as_unknown(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for i, at in enumerate(OUT_OF_RANGE):
        store.put(checkpoint.key_for(f"failed-{i}", 1, 1), _record(f"failed-{i}", "failed", at))
        store.put(f"runs/done-{i}/done.1", _marker(f"done-{i}", at))
    store.put("runs/now/done.1", _marker("now", time.time()))
    url = f"file://{tmp_path}"

    code, text = _cli("runs", "--store", url)
    assert code == 0, text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:]}
    assert len(rows) == 2 * len(OUT_OF_RANGE) + 1
    assert all(row[4] == "-" for run_id, row in rows.items() if run_id != "now"), text
    code, text = _cli("runs", "--store", url, "--json")
    assert code == 0 and {r["updated"] for r in json.loads(text) if r["run_id"] != "now"} == {None}

    code, text = _cli("gc", "--store", url, "--older-than", "1d")
    assert code == 0, text
    deleted = sorted(line.split()[0] for line in text.splitlines()[2:])
    assert deleted == ["done-1", "done-3", "failed-1", "failed-3"], text  # (ended "before 1970")
    assert all(line.split()[3] == "-" for line in text.splitlines()[2:]), text
    left = sorted({k.split("/")[1] for k in store.list("runs/")})
    assert left == sorted(
        ["now", "done-0", "done-2", "done-4", "failed-0", "failed-2", "failed-4"]
    ), "a time in the future is never past retention"
