"""Run hooks fire inside the agent actors, in order, paired, and never break a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import raygents as rg
from raygents.testing import ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


class Recorder(rg.RunHooks):
    def __init__(self, path: str, fail: bool = False) -> None:
        self.path = path
        self.fail = fail

    def _log(self, *item: object) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps([str(i) for i in item]) + "\n")

    async def on_run_start(self, ctx, agent, messages):  # type: ignore[no-untyped-def]
        self._log("run_start", agent.name)
        if self.fail:
            raise RuntimeError("hook exploded")

    async def on_run_end(self, ctx, agent, output, error):  # type: ignore[no-untyped-def]
        self._log("run_end", agent.name, output)

    def on_llm_start(self, ctx, agent, request):  # type: ignore[no-untyped-def]
        self._log("llm_start", agent.name)

    async def on_llm_end(self, ctx, agent, response):  # type: ignore[no-untyped-def]
        self._log("llm_end", agent.name)

    async def on_tool_start(self, ctx, agent, call):  # type: ignore[no-untyped-def]
        self._log("tool_start", call.name)

    async def on_tool_end(self, ctx, agent, call, result):  # type: ignore[no-untyped-def]
        self._log("tool_end", call.name, result.is_error)

    async def on_handoff(self, ctx, source, target):  # type: ignore[no-untyped-def]
        self._log("handoff", source.name, target.name)

    async def on_checkpoint(self, ctx, agent, seq, status):  # type: ignore[no-untyped-def]
        self._log("checkpoint", status)

    async def on_agent_end(self, ctx, agent, output):  # type: ignore[no-untyped-def]
        self._log("agent_end", agent.name, output)


@rg.tool(num_cpus=0)
def broken() -> str:
    """Fail."""
    raise ValueError("no")


def read(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_hooks_fire_in_order_and_a_failing_hook_is_harmless(tmp_path: Path) -> None:
    log = tmp_path / "hooks.jsonl"
    target = rg.Agent("hook_target", model=ScriptedModel([text("bye")]), hooks=Recorder(str(log)))
    source = rg.Agent(
        "hook_source",
        tools=[broken],
        handoffs=[target],
        model=ScriptedModel(
            [calls(call("broken", {})), calls(call("transfer_to_hook_target", {}))]
        ),
        hooks=Recorder(str(log), fail=True),
    )
    assert rg.run(source, "hi").final_output == "bye"
    names = [entry[0] for entry in read(log)]
    # the record of the tool batch is written while the next model call runs: its
    # on_checkpoint comes between that call's on_llm_start and on_llm_end
    assert names == [
        "run_start",
        "llm_start",
        "llm_end",
        "checkpoint",
        "tool_start",
        "tool_end",
        "llm_start",
        "checkpoint",
        "llm_end",
        "checkpoint",
        "handoff",
        "checkpoint",
        "llm_start",
        "llm_end",
        "agent_end",
        "run_end",
    ]
    entries = read(log)
    assert ["tool_end", "broken", "True"] in entries
    assert ["handoff", "hook_source", "hook_target"] in entries
    assert entries[-2:] == [["agent_end", "hook_target", "bye"], ["run_end", "hook_target", "bye"]]
