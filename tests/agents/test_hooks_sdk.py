"""Hooks see what the SDK's hooks see: ``on_llm_end``'s usage counts the call it reports, and
every agent that becomes active in a run gets ``on_agent_start``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import raygents as rg
from raygents.testing import ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


class Recorder(rg.RunHooks):
    def __init__(self, path: str) -> None:
        self.path = path

    def _log(self, *item: object) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(item) + "\n")

    async def on_run_start(self, ctx, agent, messages):  # type: ignore[no-untyped-def]
        self._log("run_start", agent.name)

    async def on_agent_start(self, ctx, agent):  # type: ignore[no-untyped-def]
        self._log("agent_start", agent.name, ctx.agent_name)

    async def on_llm_end(self, ctx, agent, response):  # type: ignore[no-untyped-def]
        usage = ctx.usage
        self._log("llm_end", agent.name, usage.requests, usage.input_tokens, usage.output_tokens)


def read(path: Path) -> list[list[object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_llm_end_counts_its_call_and_a_handoff_target_gets_agent_start(tmp_path: Path) -> None:
    log = tmp_path / "hooks.jsonl"
    target = rg.Agent(
        "fix_target",
        model=ScriptedModel([text("bye", input_tokens=100, output_tokens=7)]),
        hooks=Recorder(str(log)),
    )
    source = rg.Agent(
        "fix_source",
        handoffs=[target],
        model=ScriptedModel(
            [calls(call("transfer_to_fix_target", {}), input_tokens=10, output_tokens=3)]
        ),
        hooks=Recorder(str(log)),
    )
    assert rg.run(source, "hi").final_output == "bye"
    assert read(log) == [
        ["run_start", "fix_source"],
        ["agent_start", "fix_source", "fix_source"],
        ["llm_end", "fix_source", 1, 10, 3],
        ["agent_start", "fix_target", "fix_target"],
        ["llm_end", "fix_target", 2, 110, 10],
    ]
