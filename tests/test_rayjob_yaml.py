"""The KubeRay RayJob for the batch example parses, names a script that exists, and keeps its
checkpoints in S3."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def job() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "deploy/kuberay/rayjob.yaml").read_text())
    return loaded


def test_it_is_a_rayjob(job: dict[str, Any]) -> None:
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"]


def test_its_entrypoint_runs_the_batch_example_with_options_it_takes(job: dict[str, Any]) -> None:
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[0] == "python"
    script = ROOT / argv[1]
    assert script.is_file() and argv[1] == "examples/batch_job.py"
    source = script.read_text()
    for flag in (a for a in argv[2:] if a.startswith("--")):
        assert f'"{flag}"' in source, f"{flag} is not an option of {argv[1]}"


def test_checkpoints_go_to_s3_everywhere(job: dict[str, Any]) -> None:
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert runtime_env["env_vars"]["RAYGENTS_STORE"].startswith("s3://")
    cluster = job["spec"]["rayClusterSpec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    for group in groups:
        for container in group["template"]["spec"]["containers"]:
            env = {e["name"]: e.get("value") or e.get("valueFrom") for e in container["env"]}
            assert env.get("RAYGENTS_STORE", "").startswith("s3://"), container["name"]
            assert env.get("RAYGENTS_CHECKPOINT_KEY") == {  # (an s3:// store needs the key)
                "secretKeyRef": {"name": "raygents-key", "key": "key"}
            }, container["name"]
