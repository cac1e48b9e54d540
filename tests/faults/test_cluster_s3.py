"""Runs on a simulated cluster with an S3 store: agent actors on worker nodes write their own
records; a worker node removed or the coordinator killed mid-load loses no run.

The tests share one ``scenarios/cluster_s3.py`` process (a ``ray.cluster_utils.Cluster`` of a
head and two worker nodes, moto's S3 server behind a proxy that notes who sent each request),
started once for the module: each test runs its scenario there on a namespace, bucket and
folder of its own.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SCENARIO = Path(__file__).parent / "scenarios" / "cluster_s3.py"
OUTPUT = "crunched 0 + helped"  # (the parent's tool and its agent-as-tool child's answer)


class Scenarios:
    """The scenario process: a scenario per :meth:`run`, one after the other."""

    def __init__(self, work: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
        self.log = work / "scenario.log"  # (a file: a pipe nobody reads would fill up)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(SCENARIO), str(work), "serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )

    def run(self, mode: str, runs: int = 0) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{mode} {runs}\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:  # (the tests' timeouts bound the wait)
            report: dict[str, Any] = json.loads(line) if line.startswith("{") else {}
            if report.get("mode") == mode:  # (not the end of one a failed test left)
                return report
        raise AssertionError(f"the scenario process exited: {self.log.read_text()[-4000:]}")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # (it shuts its cluster down and exits)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenarios]:
    started = Scenarios(tmp_path_factory.mktemp("cluster"))
    yield started
    started.close()


def _all_complete(report: dict[str, Any], runs: int) -> None:
    assert report["errors"] == []
    assert report["outputs"] == {OUTPUT: runs}
    assert report["keys"] == 2 * runs, "a tool call per run and one per child"
    assert report["effects"] == 2 * runs, "each idempotency key took effect (once: O_EXCL)"
    assert report.get("fault_after_starts", 0) < 2 * runs, "the fault came mid-load"


@pytest.mark.timeout(600)
def test_runs_on_worker_nodes_write_their_own_records_to_s3(scenarios: Scenarios) -> None:
    # (100 runs: 200 tool calls, 200 or more record PUTs from the worker nodes; more shows
    # the same, at a CPU cost the suite feels)
    report = scenarios.run("load", 100)
    _all_complete(report, 100)
    assert report["started_twice"] == 0 and report["recovered"] == 0
    writers = report["record_puts"]
    assert set(report["agent_nodes"]) <= set(report["workers"]), "agent actors on the workers"
    assert set(writers) == set(report["agent_nodes"]), "records come from their actors' nodes"
    assert sum(writers.values()) >= 2 * 100, "a record per tool batch, parents and children"


@pytest.mark.timeout(600)
def test_a_worker_node_lost_mid_load_loses_no_run(scenarios: Scenarios) -> None:
    report = scenarios.run("node_loss", 100)
    _all_complete(report, 100)
    assert report["recovered"] >= 1, "the runs on the lost node were recovered"


@pytest.mark.timeout(600)
def test_a_coordinator_killed_mid_load_stops_no_run(scenarios: Scenarios) -> None:
    report = scenarios.run("coordinator_kill", 100)
    _all_complete(report, 100)
    assert report["recovered"] == 0, "the agent actors went on while it restarted"
    assert report["started_twice"] == 0, "no run went back before its last record"


@pytest.mark.timeout(300)
def test_a_file_store_with_agent_actors_on_another_node_is_refused(scenarios: Scenarios) -> None:
    report = scenarios.run("file_store")
    error = report["error"]
    assert error is not None and error.startswith("UserError:")
    assert report["head"][:12] in error and "s3://" in error


@pytest.mark.timeout(300)
def test_tools_run_on_the_nodes_that_have_what_they_reserve(scenarios: Scenarios) -> None:
    report = scenarios.run("placement")
    gpu, special = report["placed"]
    assert gpu == f"gpu@{report['gpu_node']}" and special == f"special@{report['special_node']}"
    fanned = report["fanned"]
    assert sorted(x.split("@")[0] for x in fanned) == ["cpu"] * 6 + ["gpu"] * 4
    assert {x.split("@")[1] for x in fanned if x.startswith("gpu")} == {report["gpu_node"]}
    gpus = sorted(
        (t["start"], t["end"], t["cpus_done"]) for t in report["times"] if t["kind"] == "gpu"
    )
    overlaps = [(a, b) for a, b in itertools.pairwise(gpus) if b[0] < a[1]]
    assert overlaps == [], "one GPU at a time"
    assert gpus[0][2] == 6, "the CPU tools ran while the first GPU tool held the GPU"


@pytest.mark.timeout(600)
def test_a_call_in_doubt_when_its_agents_node_is_lost_is_resolved_not_run_twice(
    scenarios: Scenarios,
) -> None:
    """``on_recovery="ask"``: the node of the agent actor goes while the call runs."""
    report = scenarios.run("in_doubt_node")
    assert report.get("error") is None, (report, scenarios.log.read_text()[-4000:])
    assert report["in_doubt"] == [["charge0", "charge"]] and report["status"] == "in_doubt"
    assert report["starts_before"] == 1, "the call in doubt was not run again on recovery"
    assert report["effects_before"] <= 1
    assert report["output"] == "charged 5"
    assert report["starts_after"] == 2, "resolved with rerun: it ran once more"
    assert report["effects_after"] == report["effects_before"] + 1
