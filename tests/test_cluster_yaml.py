"""Checks on the repository's Ray cluster launcher config (``cluster.yaml``).

The config is validated against the JSON schema that the installed ``ray``
package ships for cluster configs (``ray/autoscaler/ray-schema.json``), the
same schema ``ray up`` validates against. Nothing here starts Ray or talks to AWS.
"""

from __future__ import annotations

import copy
import json
import shlex
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

CLUSTER_YAML = Path(__file__).resolve().parents[1] / "cluster.yaml"


def _load_schema() -> dict[str, Any]:
    schema_file = resources.files("ray.autoscaler").joinpath("ray-schema.json")
    if not schema_file.is_file():  # pragma: no cover - depends on the ray build
        pytest.fail(f"ray does not ship its cluster schema at {schema_file}")
    schema: dict[str, Any] = json.loads(schema_file.read_text(encoding="utf-8"))
    return schema


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return _load_schema()


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    with CLUSTER_YAML.open(encoding="utf-8") as f:
        loaded = yaml.safe_load(f)
    assert isinstance(loaded, dict), "cluster.yaml must be a mapping"
    return loaded


def _worker_types(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    head = config["head_node_type"]
    return {name: spec for name, spec in config["available_node_types"].items() if name != head}


def _ray_start_args(command: str) -> list[str]:
    """Tokens of the ``ray start ...`` part of a (possibly ``;``-chained) command, after any
    ``NAME=value`` environment assignments."""
    for part in command.split(";"):
        tokens = shlex.split(part)
        while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
            tokens = tokens[1:]
        if tokens[:2] == ["ray", "start"]:
            return tokens[2:]
    return []


def test_schema_is_strict(schema: dict[str, Any]) -> None:
    # The negative test below relies on this; fail loudly if ray loosens it.
    assert schema.get("additionalProperties") is False


def test_cluster_yaml_matches_ray_schema(config: dict[str, Any], schema: dict[str, Any]) -> None:
    jsonschema.validate(config, schema)


def test_unknown_top_level_key_is_rejected(config: dict[str, Any], schema: dict[str, Any]) -> None:
    bad = copy.deepcopy(config)
    bad["not_a_ray_option"] = True
    with pytest.raises(jsonschema.ValidationError, match="not_a_ray_option"):
        jsonschema.validate(bad, schema)


def test_unknown_node_type_key_is_rejected(config: dict[str, Any], schema: dict[str, Any]) -> None:
    bad = copy.deepcopy(config)
    bad["available_node_types"][bad["head_node_type"]]["instance_type"] = "m6i.large"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_ray_launcher_accepts_config(config: dict[str, Any]) -> None:
    """Run the launcher's own local preparation/validation (no cloud calls)."""
    util = pytest.importorskip("ray.autoscaler._private.util")
    prepared = util.prepare_config(copy.deepcopy(config))
    util.validate_config(prepared)


def test_provider_is_aws(config: dict[str, Any]) -> None:
    assert config["provider"]["type"] == "aws"
    assert config["provider"]["region"]


def test_head_node_type_is_defined(config: dict[str, Any]) -> None:
    assert config["head_node_type"] in config["available_node_types"]


def test_has_cpu_and_gpu_worker_types(config: dict[str, Any]) -> None:
    workers = _worker_types(config)
    gpu = {n: s for n, s in workers.items() if s.get("resources", {}).get("GPU", 0) > 0}
    cpu = {n: s for n, s in workers.items() if s.get("resources", {}).get("GPU", 0) == 0}
    assert gpu, "expected a worker type advertising GPU resources"
    assert cpu, "expected a worker type without GPU resources"
    for spec in workers.values():
        assert spec.get("min_workers", 0) == 0, "workers should scale from zero"
        assert spec["max_workers"] >= 1
        assert spec["node_config"]["InstanceType"]
    assert config["max_workers"] >= max(s["max_workers"] for s in workers.values())


def test_setup_commands_install_raygents_with_s3(config: dict[str, Any]) -> None:
    commands = config["setup_commands"]
    assert any("pip install" in c and "raygents[s3]" in c for c in commands), commands


def test_checkpoint_store_is_documented() -> None:
    assert "RAYGENTS_STORE=s3://" in CLUSTER_YAML.read_text(encoding="utf-8")


def test_dashboard_binds_to_localhost(config: dict[str, Any]) -> None:
    head_args = [
        args
        for args in (_ray_start_args(c) for c in config["head_start_ray_commands"])
        if "--head" in args
    ]
    assert len(head_args) == 1, config["head_start_ray_commands"]
    args = head_args[0]
    assert "--dashboard-host=127.0.0.1" in args
    assert not any(
        a.startswith("--dashboard-host=") and a != "--dashboard-host=127.0.0.1" for a in args
    )
    assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in args


def test_nodes_keep_idle_workers_for_tool_tasks(config: dict[str, Any]) -> None:
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert any("RAY_num_workers_soft_limit=" in c for c in config[key]), key


def test_workers_join_the_head(config: dict[str, Any]) -> None:
    args = [a for c in config["worker_start_ray_commands"] for a in _ray_start_args(c)]
    assert "--address=$RAY_HEAD_IP:6379" in args
    assert "--head" not in args
