"""F5: remove a worker node (agents and tool tasks on it) mid-run, then add a replacement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).parent / "scenarios" / "node_loss.py"


@pytest.mark.timeout(600)
def test_runs_survive_the_loss_of_their_node(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, str(SCENARIO), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=580,
        env=env,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(lines[-1])
    assert report["errors"] == []
    assert report["outputs"] == ["done 2"] * 10
    assert len(report["effects"]) == 20 and set(report["effects"].values()) == {1}
    assert report["recovered_events"] >= 1
    assert report["cpus_free"]
