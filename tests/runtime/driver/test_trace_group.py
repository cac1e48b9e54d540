"""``trace()`` on the real Ray fixture: ``runs()`` lists the runs started in a block with its
group id and trace id, while they run and once they ended."""

from __future__ import annotations

import pytest

import raygents as rg
from raygents.testing import FunctionModel, text

pytestmark = pytest.mark.usefixtures("rt")


def test_runs_started_in_a_block_carry_its_group_id() -> None:
    agent = rg.Agent("grouped", model=FunctionModel(lambda r: text("ok"), latency_s=0.5))
    with rg.trace("Two jokes", group_id="thread-7") as block:
        first = rg.start(agent, "one", run_id=f"grouped-{block.trace_id[-12:]}")  # claimed now
        running = {r.run_id: r for r in rg.runs()}[first.run_id]
        assert (running.group_id, running.trace_id) == ("thread-7", block.trace_id)
        second = rg.run(agent, "two")  # (a generated id: its claim goes in a batch)
    first.result(timeout_s=60)
    outside = rg.run(agent, "three")
    infos = {r.run_id: r for r in rg.runs()}
    for run_id in (first.run_id, second.run_id):
        assert infos[run_id].group_id == "thread-7"
        assert infos[run_id].trace_id == block.trace_id
    assert infos[outside.run_id].group_id is None and infos[outside.run_id].trace_id is None
