"""The main job: ``raygents demo`` runs offline on a fresh local Ray instance."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(240)
def test_demo_runs_offline_and_shows_parallel_tool_tasks(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAY_ADDRESS"))}
    env["RAYGENTS_STORE"] = f"file://{tmp_path / 'store'}"
    done = subprocess.run(
        [sys.executable, "-m", "raygents", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=230,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "model: offline" in out
    assert out.count("in Ray worker pid") == 8
    assert len({line.split("pid ")[1] for line in out.splitlines() if "worker pid" in line}) >= 2
    assert "orchestrator -> writer (handoff)" in out
    assert "report: Market outlook" in out and "recommendation:" in out
    assert "summary: 5 runs, 11 turns, 8 tool tasks" in out
    assert "Task was destroyed" not in done.stderr, "shutdown left work of the runtime behind"


@pytest.mark.parametrize(
    ("name", "adapter"),
    [("gpt-4o", "OpenAIChatModel"), ("responses:gpt-5", "OpenAIResponsesModel")],
)
def test_demo_with_an_endpoint_uses_the_adapter_its_model_name_chooses(
    monkeypatch: pytest.MonkeyPatch, name: str, adapter: str
) -> None:
    import io

    from raygents.cli.demo import choose_model

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RAYGENTS_MODEL", name)
    out = io.StringIO()
    model = choose_model(out)
    assert type(model).__name__ == adapter
    assert out.getvalue() == f"model: {name.removeprefix('responses:')} via {adapter}\n"
    monkeypatch.delenv("OPENAI_BASE_URL")
    out = io.StringIO()
    assert type(choose_model(out)).__name__ == "FunctionModel", "offline by default"
