"""Kept results end to end: completed runs (one that wrote records, one that did not) keep
their output, usage and conversation in the store through a full restart of Ray, where
``runs()``, ``attach().result()`` and ``raygents show`` (on the cluster and from the store
alone) find them; ``raygents gc`` then deletes them. The drivers (``kept_driver.py``) run in
subprocesses, each with a private Ray instance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from driver_process import driver_process, ready_json

pytestmark = pytest.mark.timeout(400)

HERE = Path(__file__).parent
DRIVER = str(HERE / "kept_driver.py")
NAMESPACE = "kept"
ANSWER = {"city": "Paris", "population": 2100000}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "OPENAI_"))}
    return env | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(32).hex()}


def _cli(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "raygents", *args],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout)


def test_completed_runs_keep_their_results_through_a_restart_of_ray(tmp_path: Path) -> None:
    store = f"file://{tmp_path / 'store'}"
    env = _env()
    first = subprocess.run(
        [sys.executable, DRIVER, "run", store],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    ran = json.loads(first.stdout.splitlines()[-1])
    assert ran["geo"]["output"] == ANSWER and ran["quick"]["output"] == "quick answer"
    runs_dir = tmp_path / "store" / "runs"
    for run_id in ("kept-geo", "kept-quick"):  # records gone, the marker with the result kept
        assert sorted(p.name for p in (runs_dir / run_id).iterdir()) == ["done.1"], run_id

    # Ray is gone: the store alone
    shown = _cli(env, "show", "kept-geo", "--store", store, "--json")
    geo_turns, geo_roles = ran["geo"]["turns"], ran["geo"]["roles"]
    assert geo_roles[:3] == ["user", "assistant", "tool"] and geo_roles[-1] == "assistant"
    assert ran["geo"]["usage"]["requests"] == geo_turns > 1
    assert (shown["status"], shown["agent"], shown["turns"]) == ("completed", "geo", geo_turns)
    assert json.loads(shown["output"]) == ANSWER
    assert [m["role"] for m in shown["messages"]] == geo_roles
    assert shown["usage"] == ran["geo"]["usage"]
    rows = {r["run_id"]: r["status"] for r in _cli(env, "runs", "--store", store, "--json")}
    assert rows == {"kept-geo": "completed", "kept-quick": "completed"}

    with driver_process([DRIVER, "head", store], cwd=HERE, env=env) as head:
        found = ready_json(head, "the second driver")
        assert found["runs"]["kept-geo"] == ["completed", "geo", geo_turns]
        assert found["runs"]["kept-quick"] == ["completed", "quick", 1]
        untyped, typed = found["untyped"], found["typed"]
        assert untyped["type"] == "str" and json.loads(untyped["output"]) == ANSWER
        assert (typed["type"], typed["output"]) == ("Answer", ANSWER)  # the agent is known now
        for result in (untyped, typed):
            assert result["roles"] == geo_roles
            assert (result["usage"], result["turns"]) == (ran["geo"]["usage"], geo_turns)
            assert (result["agent"], result["input_count"]) == ("geo", 1)
        assert found["quick"] == {**ran["quick"]}

        on_cluster = env | {"RAY_ADDRESS": found["address"]}
        ns = ("--namespace", NAMESPACE)
        shown = _cli(on_cluster, "show", "kept-quick", "--json", *ns)
        assert (shown["status"], shown["output"]) == ("completed", "quick answer")
        assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]

        dry = _cli(on_cluster, "gc", "--older-than", "0s", "--dry-run", "--json", *ns)
        assert dry["dry_run"] and {r["run_id"] for r in dry["runs"]} == {
            "kept-geo",
            "kept-quick",
            "kept-warm",
        }
        assert (runs_dir / "kept-geo" / "done.1").exists()
        done = _cli(on_cluster, "gc", "--older-than", "0s", "--json", *ns)
        assert {r["run_id"] for r in done["runs"]} == {"kept-geo", "kept-quick", "kept-warm"}
        left = list(runs_dir.iterdir()) if runs_dir.exists() else []
        assert left == [], "their records and kept results are gone"
        assert _cli(on_cluster, "runs", "--json", *ns) == []
