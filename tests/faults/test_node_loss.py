"""F5: remove a worker node (agents and tool tasks on it) mid-run, then add a replacement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCENARIO = Path(__file__).parent / "scenarios" / "node_loss.py"


def _scenario(tmp_path: Path, runs: int, timeout_s: float) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, str(SCENARIO), str(tmp_path), str(runs)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    report: dict[str, Any] = json.loads(lines[-1])
    assert report["errors"] == []
    assert report["outputs"] == ["done 2"] * runs
    assert len(report["effects"]) == 2 * runs and set(report["effects"].values()) == {1}
    assert report["recovered_events"] >= 1
    assert report["cpus_free"]
    return report


@pytest.mark.timeout(600)
def test_runs_survive_the_loss_of_their_node(tmp_path: Path) -> None:
    _scenario(tmp_path, 10, 580)


@pytest.mark.timeout(600)
def test_a_hundred_runs_survive_the_loss_of_their_node(tmp_path: Path) -> None:
    report = _scenario(tmp_path, 100, 580)
    assert report["recovered_events"] >= 10, "the runs on the lost node were recovered"
