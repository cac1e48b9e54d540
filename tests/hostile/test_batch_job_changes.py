"""Batch jobs run again on Ray against what changed or was planted since: a job run with other
inputs (or another agent graph) under the same job id is refused, or runs the changed items
again under run ids of their own; a signed ledger's planted lines are not the job's; and a
namespace's ``max_concurrent_runs`` makes items wait for a slot, never fail."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import raygents as rg
from raygents.testing import FunctionModel, text

pytestmark = pytest.mark.usefixtures("rt")


def echo(latency_s: float = 0.0) -> FunctionModel:
    return FunctionModel(lambda req: text(f"echo {req.messages[-1].text}"), latency_s=latency_s)


def _namespace(url: str, **options: object) -> None:
    rg.shutdown()
    rg.init(namespace=f"changes-{os.urandom(3).hex()}", store=url, **options)


@pytest.fixture
def store(own_raygents: None, tmp_path: Path) -> Iterator[str]:
    url = f"file://{tmp_path / 'store'}"
    _namespace(url)
    yield url
    rg.shutdown()


def _outputs(result: rg.BatchResult) -> list[str | None]:
    return [item.output for item in result.items]


def test_other_inputs_under_the_same_job_id_are_refused_or_run_again(store: str) -> None:
    agent = rg.Agent("fp-echo", model=echo())
    first = rg.run_batch(agent, ["a", "b", "c"], job_id="fp", progress=False)
    assert _outputs(first) == ["echo a", "echo b", "echo c"]
    with pytest.raises(rg.UserError, match=r"batch 'fp': item 1 .*its input changed"):
        rg.run_batch(agent, ["a", "X", "c"], job_id="fp", progress=False)
    again = rg.run_batch(agent, ["a", "X", "c"], job_id="fp", progress=False, on_change="rerun")
    assert _outputs(again) == ["echo a", "echo X", "echo c"]
    assert [item.skipped for item in again.items] == [True, False, True]
    assert again.items[0].run_id == "fp.0"
    assert re.fullmatch(r"fp\.1-[0-9a-f]{16}", again.items[1].run_id)
    old = rg.attach("fp.1").result(timeout_s=30)  # (the old run and its result stay)
    assert old.final_output == "echo b"
    third = rg.run_batch(agent, ["a", "X", "c"], job_id="fp", progress=False)
    assert _outputs(third) == ["echo a", "echo X", "echo c"]
    assert all(item.skipped for item in third.items)


def test_another_agent_graph_under_the_same_job_id_is_refused(store: str) -> None:
    rg.run_batch(rg.Agent("fp-one", model=echo()), ["a"], job_id="graph", progress=False)
    other = rg.Agent("fp-one", instructions="Answer in French.", model=echo())
    with pytest.raises(rg.UserError, match=r"batch 'graph': item 0 .*the agent graph changed"):
        rg.run_batch(other, ["a"], job_id="graph", progress=False)


def test_on_change_is_checked(store: str) -> None:
    with pytest.raises(rg.UserError, match="on_change"):
        rg.start_batch(rg.Agent("fp-x", model=echo()), ["a"], job_id="j", on_change="ignore")  # type: ignore[arg-type]


def test_a_signed_ledger_refuses_planted_lines(
    own_raygents: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYGENTS_CHECKPOINT_KEY", "s" * 32)
    root = tmp_path / "signed"
    _namespace(f"file://{root}")
    agent = rg.Agent("sealed-echo", model=echo())
    rg.run_batch(agent, ["a"], job_id="sealed", progress=False)
    (shard,) = (root / "jobs" / "sealed").iterdir()
    line = json.loads(shard.read_text())
    assert isinstance(line.get("seal"), str)
    planted = {**line, "index": 1, "run_id": "sealed.1", "output": "attacker's"}
    (root / "jobs" / "sealed" / "sealed.0000000000000001-1.00000.jsonl").write_text(
        json.dumps(planted) + "\n"
    )
    result = rg.run_batch(agent, ["a", "b"], job_id="sealed", progress=False)
    assert _outputs(result) == ["echo a", "echo b"]
    assert [item.skipped for item in result.items] == [True, False]


def test_items_wait_for_their_tenants_slots(own_raygents: None, tmp_path: Path) -> None:
    _namespace(f"file://{tmp_path / 'limited'}", max_concurrent_runs=2)
    agent = rg.Agent("slot-echo", model=echo(latency_s=0.3))
    blocker = rg.start(rg.Agent("slot-holder", model=echo(latency_s=3.0)), "hold")
    handle = rg.start_batch(agent, [f"q{i}" for i in range(8)], job_id="slots", progress=False)
    most = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal most
        while not stop.is_set():
            most = max(most, handle.progress().running)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = handle.result(timeout_s=120)
    finally:
        stop.set()
        watcher.join()
    assert (result.completed, result.failed) == (8, 0), [i.error for i in result.items]
    assert most <= 2
    assert blocker.result(timeout_s=60).final_output == "echo hold"
