"""The KubeRay RayService of the HTTP API parses, names an application that exists (imported
here, as Serve imports it), listens beyond loopback only with a token, and keeps runs in S3."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def service() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "deploy/kuberay/rayservice.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def config(service: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(service["spec"]["serveConfigV2"])
    return loaded


def test_it_is_a_rayservice(service: dict[str, Any]) -> None:
    assert service["apiVersion"] == "ray.io/v1" and service["kind"] == "RayService"
    cluster = service["spec"]["rayClusterConfig"]
    assert cluster["headGroupSpec"]["template"]["spec"]["containers"]
    assert cluster["workerGroupSpecs"]


def test_its_application_is_the_examples_serve_app(config: dict[str, Any]) -> None:
    from ray import serve

    (application,) = config["applications"]
    module_name, _, attr = application["import_path"].partition(":")
    assert (ROOT / (module_name.replace(".", "/") + ".py")).is_file()
    module = importlib.import_module(module_name)
    assert isinstance(getattr(module, attr), serve.Application)
    assert application["route_prefix"] == "/"


def test_it_listens_beyond_loopback_only_with_a_token(
    service: dict[str, Any], config: dict[str, Any]
) -> None:
    assert config["http_options"]["host"] == "0.0.0.0"
    spec = service["spec"]["rayClusterConfig"]
    pods = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    for pod in pods:
        (container,) = pod["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert "secretKeyRef" in env["RAYGENTS_API_TOKEN"]["valueFrom"]
        assert env["RAYGENTS_STORE"]["value"].startswith("s3://")
    (application,) = config["applications"]
    assert application["runtime_env"]["env_vars"]["RAYGENTS_STORE"].startswith("s3://")
