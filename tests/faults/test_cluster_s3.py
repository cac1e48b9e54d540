"""Runs on a simulated cluster with an S3 store: agent actors on worker nodes write their own
records; a worker node removed or the coordinator killed mid-load loses no run.

Each test runs ``scenarios/cluster_s3.py`` in a subprocess (a ``ray.cluster_utils.Cluster`` of
a head and two worker nodes, moto's S3 server behind a proxy that notes who sent each request).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SCENARIO = Path(__file__).parent / "scenarios" / "cluster_s3.py"
OUTPUT = "crunched 0 + helped"  # (the parent's tool and its agent-as-tool child's answer)


def _scenario(tmp_path: Path, mode: str, runs: int = 0) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("AWS_")}
    done = subprocess.run(
        [sys.executable, str(SCENARIO), str(tmp_path), mode, str(runs)],
        capture_output=True,
        text=True,
        timeout=560,
        env=env,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def _all_complete(report: dict[str, Any], runs: int) -> None:
    assert report["errors"] == []
    assert report["outputs"] == {OUTPUT: runs}
    assert report["keys"] == 2 * runs, "a tool call per run and one per child"
    assert report["effects"] == 2 * runs, "each idempotency key took effect (once: O_EXCL)"
    assert report.get("fault_after_starts", 0) < 2 * runs, "the fault came mid-load"


@pytest.mark.timeout(600)
def test_runs_on_worker_nodes_write_their_own_records_to_s3(tmp_path: Path) -> None:
    report = _scenario(tmp_path, "load", 200)
    _all_complete(report, 200)
    assert report["started_twice"] == 0 and report["recovered"] == 0
    writers = report["record_puts"]
    assert set(report["agent_nodes"]) <= set(report["workers"]), "agent actors on the workers"
    assert set(writers) == set(report["agent_nodes"]), "records come from their actors' nodes"
    assert sum(writers.values()) >= 2 * 200, "a record per tool batch, parents and children"


@pytest.mark.timeout(600)
def test_a_worker_node_lost_mid_load_loses_no_run(tmp_path: Path) -> None:
    report = _scenario(tmp_path, "node_loss", 100)
    _all_complete(report, 100)
    assert report["recovered"] >= 1, "the runs on the lost node were recovered"


@pytest.mark.timeout(600)
def test_a_coordinator_killed_mid_load_stops_no_run(tmp_path: Path) -> None:
    report = _scenario(tmp_path, "coordinator_kill", 100)
    _all_complete(report, 100)
    assert report["recovered"] == 0, "the agent actors went on while it restarted"
    assert report["started_twice"] == 0, "no run went back before its last record"


@pytest.mark.timeout(300)
def test_a_file_store_with_agent_actors_on_another_node_is_refused(tmp_path: Path) -> None:
    report = _scenario(tmp_path, "file_store")
    error = report["error"]
    assert error is not None and error.startswith("UserError:")
    assert report["head"][:12] in error and "s3://" in error
