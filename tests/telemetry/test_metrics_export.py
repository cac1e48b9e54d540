"""raygents' Prometheus metrics on Ray's metrics endpoint, and JSON log lines that name their run,
from a driver in a subprocess with its own local Ray instance (``metrics_driver.py``)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).parent
RUNS = {"m-plain", "m-paused", "m-lost"}
_SAMPLE = re.compile(r"^ray_raygents_(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], str]]:
    """The driver's scraped raygents lines, and everything it printed."""
    store = f"file://{tmp_path_factory.mktemp('metrics') / 'store'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "OPENAI_"))}
    env |= {"RAYGENTS_LOG_FORMAT": "json", "RAY_DEDUP_LOGS": "0"}
    done = subprocess.run(
        [sys.executable, str(HERE / "metrics_driver.py"), str(_free_port()), store],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    found = [line for line in done.stdout.splitlines() if line.startswith('{"lines"')]
    assert found, done.stdout[-3000:] + done.stderr[-5000:]
    yield json.loads(found[0])["lines"], done.stdout + done.stderr


def _samples(lines: list[str]) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in lines:
        match = _SAMPLE.match(line)
        if match:
            name, labels, value = match.groups()
            out.append((name, dict(_LABEL.findall(labels)), float(value)))
    return out


def _total(samples: list[Any], name: str, **labels: str) -> float:
    """The sum over processes (Ray adds a WorkerId label) of ``name`` with ``labels``."""
    return sum(
        v
        for n, tags, v in samples
        if n == name and all(tags.get(k) == w for k, w in labels.items())
    )


def test_the_endpoint_serves_every_raygents_metric_with_its_labels(
    driven: tuple[list[str], str],
) -> None:
    samples = _samples(driven[0])
    assert samples, driven[0]
    # (Ray's endpoint may serve some processes' series a report late, and those of the killed
    # agent actor may be gone: the counts are lower bounds)
    agent = {"agent": "metered"}
    assert _total(samples, "runs_started_total", **agent, how="new") >= 2
    assert _total(samples, "runs_started_total", **agent, how="resumed") >= 1
    assert _total(samples, "runs_ended_total", **agent, status="completed") >= 1
    assert _total(samples, "runs_ended_total", **agent, status="suspended") >= 1
    assert _total(samples, "suspends_total", **agent) >= 1
    assert _total(samples, "recoveries_total", **agent) >= 1  # (counted by the driver)
    assert _total(samples, "turns_total", **agent) >= 3
    model = {"model": "metered-model"}
    assert _total(samples, "tokens_total", **model, direction="input") >= 40
    assert _total(samples, "tokens_total", **model, direction="output") >= 5
    assert _total(samples, "model_call_seconds_count", **agent, **model, outcome="ok") >= 3
    assert _total(samples, "rate_limit_wait_seconds_count", **model) >= 3
    for tool in ("nap", "note"):
        assert _total(samples, "tool_call_seconds_count", **agent, tool=tool, outcome="ok") >= 1
    for kind in ("full", "delta"):
        assert _total(samples, "checkpoint_bytes_count", **agent, kind=kind) >= 1
    assert _total(samples, "checkpoint_write_seconds_count", **agent) >= 1
    buckets = {t["le"] for n, t, _ in samples if n == "tool_call_seconds_bucket"}
    assert {"0.005", "1.0", "300.0", "+Inf"} <= buckets
    for _, tags, _ in samples:  # (no run ids as labels: bounded cardinality)
        assert "run_id" not in tags
        assert not RUNS & set(tags.values())


def test_the_agent_actors_log_json_lines_that_name_their_run(
    driven: tuple[list[str], str],
) -> None:
    docs = []
    for line in driven[1].splitlines():
        start = line.find('{"time"')
        if start >= 0:
            docs.append(json.loads(line[start:]))
    noted = [d for d in docs if d["logger"] == "raygents.e2e"]
    assert {d["run_id"] for d in noted} == RUNS, docs
    assert {(d["agent"], d["level"], d["message"]) for d in noted} == {
        ("metered", "WARNING", "noted in metered")
    }
