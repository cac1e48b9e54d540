"""Checkpoints written by earlier versions still load and resume to their recorded answer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import raygents as rg
from raygents.records import checkpoint

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def test_golden_records_replay_without_ray() -> None:
    import run_golden

    folder = GOLDEN / "runs" / run_golden.RUN_ID
    records = [checkpoint.decode(p.read_bytes(), source=p.name) for p in sorted(folder.iterdir())]
    state, last = checkpoint.replay(records)
    assert last["status"] == "suspended" and state.agent_name == "golden_adder"
    assert state.turns == 2 and [m.role for m in state.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]


@pytest.mark.usefixtures("rt")
def test_golden_suspended_run_resumes_to_its_answer(tmp_path: Path) -> None:
    import run_golden
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(run_golden)
    store = tmp_path / "store"
    shutil.copytree(GOLDEN / "runs", store / "runs")
    rg.shutdown()
    rg.init(namespace=f"golden-{os.urandom(3).hex()}", store=f"file://{store}")
    try:
        result = rg.resume(run_golden.RUN_ID, agent=run_golden.agent()).result(timeout_s=60)
        assert result.final_output == run_golden.FINAL
        assert result.turns == 4
    finally:
        rg.shutdown()
        rg.init(store="memory://")
