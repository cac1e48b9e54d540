"""Batch jobs on Ray: items in input order, lazy inputs, failures, stop and re-run of a job,
output shards, and a re-run that finds its completed items in the store only."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


def echo_model(fail: str = "bad") -> FunctionModel:
    """Answers ``echo <input>``; an input containing ``fail`` makes the model raise."""

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        said = req.messages[-1].text
        if fail in said:
            raise ValueError(f"cannot answer {said!r}")
        return text(f"echo {said}", input_tokens=3, output_tokens=2)

    return FunctionModel(reply)


@pytest.fixture
def file_store(own_raygents: None, tmp_path: Path) -> Iterator[str]:
    """raygents on a fresh namespace with a file store (its coordinator goes at the end)."""
    url = f"file://{tmp_path / 'store'}"
    rg.shutdown()
    rg.init(namespace=f"batch-{os.urandom(3).hex()}", store=url)
    yield url
    rg.shutdown()


def test_items_come_back_in_input_order_with_failures_counted() -> None:
    agent = rg.Agent("batch-echo", model=echo_model())
    inputs = (
        "bad" if i % 7 == 3 else ({"input": f"q{i}", "context": i} if i % 2 else f"q{i}")
        for i in range(40)  # (six failures among them, and more items than the concurrency)
    )
    result = rg.run_batch(agent, inputs, job_id="order", concurrency=16, progress=False)
    assert [item.index for item in result.items] == list(range(40))
    assert [item.run_id for item in result.items[:2]] == ["order.0", "order.1"]
    failed = [i for i in range(40) if i % 7 == 3]
    assert [item.index for item in result.items if item.status == "failed"] == failed
    assert result.failed == len(failed) and result.completed == 40 - len(failed)
    assert result.items[5].output == "echo q5"
    assert result.items[5].usage == rg.Usage(3, 2, requests=1)
    bad = result.items[3]
    assert "cannot answer 'bad'" in (bad.error or "") and "Traceback" not in (bad.error or "")
    assert result.usage.input_tokens == 3 * result.completed
    assert result.stopped is None


def test_inputs_are_read_lazily_with_at_most_concurrency_in_flight() -> None:
    agent = rg.Agent("batch-lazy", model=echo_model())
    holder: list[rg.BatchHandle] = []
    widest = [0]

    def inputs() -> Iterator[str]:
        for i in range(50):  # (ten times the concurrency)
            if holder:
                widest[0] = max(widest[0], i - holder[0].progress().ended)
            yield f"q{i}"

    handle = rg.start_batch(agent, inputs(), job_id="lazy", concurrency=5, progress=False)
    holder.append(handle)
    seen = [item.index for item in handle.results()]
    assert sorted(seen) == list(range(50))
    assert widest[0] <= 5  # (read when a slot is free: the runs in flight are the others)
    assert handle.progress().done == 50 and handle.progress().pending is None


def test_items_started_together_are_claimed_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from raygents.runtime.link.coordinator_client import CoordinatorClient

    groups: list[list[str]] = []
    single = []
    claim_runs, claim = CoordinatorClient.claim_runs, CoordinatorClient.claim

    async def claim_runs_counted(self: Any, claims: Any) -> Any:
        groups.append([run_id for run_id, *_ in claims])
        return await claim_runs(self, claims)

    async def claim_counted(self: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
        single.append(run_id)
        return await claim(self, run_id, *args, **kwargs)

    monkeypatch.setattr(CoordinatorClient, "claim_runs", claim_runs_counted)
    monkeypatch.setattr(CoordinatorClient, "claim", claim_counted)
    agent = rg.Agent("batch-grouped", model=echo_model())
    result = rg.run_batch(
        agent, (f"q{i}" for i in range(60)), job_id="grouped", concurrency=20, progress=False
    )
    assert result.completed == 60
    assert single == []
    assert sorted(run_id for group in groups for run_id in group) == sorted(
        f"grouped.{i}" for i in range(60)
    )
    assert len(groups) < 60 and max(len(group) for group in groups) > 1, groups


def test_a_run_id_running_in_this_driver_is_refused_before_its_claim(tmp_path: Path) -> None:
    from raygents.runtime.driver.runs import start_each

    gate = tmp_path / "open"

    async def reply(request: rg.ModelRequest) -> rg.ModelResponse:
        if request.messages[-1].role == "tool":
            return text("done")
        while not gate.exists():
            await asyncio.sleep(0.02)
        return calls(("noop", {}))  # (its record comes after the claim: a fenced one fails)

    def noop() -> str:
        """Does nothing."""
        return "ok"

    agent = rg.Agent("batch-held", model=FunctionModel(reply), tools=[rg.tool(noop)])
    running = rg.start(agent, "first", run_id="held.0")
    refused, started = start_each(agent, [("held.0", "again", None), ("held.1", "other", None)])
    assert isinstance(refused, rg.UserError) and "already running in this driver" in str(refused)
    assert isinstance(started, rg.RunHandle)
    gate.touch()
    assert running.result(timeout_s=60).final_output == "done"  # (not fenced by a claim)
    assert started.result(timeout_s=60).final_output == "done"


def test_an_invalid_item_fails_alone() -> None:
    agent = rg.Agent("batch-invalid", model=echo_model())
    result = rg.run_batch(
        agent, ["a", 42, {"input": "b", "extra": 1}, "c"], job_id="invalid", progress=False
    )
    assert [i.status for i in result.items] == ["completed", "failed", "failed", "completed"]
    assert "extra" in (result.items[2].error or "")
    assert result.items[1].error


def test_max_failures_stops_the_job() -> None:
    agent = rg.Agent("batch-failing", model=echo_model(fail="q"))
    result = rg.run_batch(
        agent,
        (f"q{i}" for i in range(200)),
        job_id="failing",
        concurrency=2,
        max_failures=3,
        progress=False,
    )
    assert result.stopped is not None and "max_failures" in result.stopped
    assert result.failed >= 4 and result.total < 200


def gated_tool(gate: Path, ledger: Path) -> rg.Tool:
    """``work``: waits for ``gate`` when asked to (``slow``), then records its idempotency key."""

    @rg.tool(num_cpus=0)
    def work(ctx: rg.ToolContext, slow: bool) -> str:
        """Do the work."""
        while slow and not gate.exists():
            time.sleep(0.02)
        with ledger.open("a") as f:
            f.write(ctx.idempotency_key + "\n")
        return "worked"

    return work


def work_then_answer() -> FunctionModel:
    """Calls ``work`` (slow for inputs starting with ``slow``), then answers."""

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        first = req.messages[0].text
        if not any(m.role == "tool" for m in req.messages):
            return calls(call("work", {"slow": first.startswith("slow")}, id="w"))
        return text(f"done {first}")

    return FunctionModel(reply)


def test_a_stopped_job_run_again_skips_completed_and_resumes_suspended(tmp_path: Path) -> None:
    gate, ledger = tmp_path / "gate", tmp_path / "ledger"
    agent = rg.Agent("batch-gated", model=work_then_answer(), tools=[gated_tool(gate, ledger)])
    inputs = [f"slow{i}" if i % 4 == 0 else f"fast{i}" for i in range(12)]
    handle = rg.start_batch(agent, inputs, job_id="gated", concurrency=12, progress=False)
    while handle.progress().done < 9:
        time.sleep(0.05)
    handle.suspend()
    time.sleep(1.0)  # (the suspend requests reach the runs; one that misses it completes)
    gate.touch()  # (the slow tools end; their runs then suspend before the next model call)
    first = handle.result(timeout_s=60)
    assert first.stopped == "suspended"
    assert first.completed + first.suspended == 12 and first.completed >= 9
    suspended = [i.index for i in first.items if i.status == "suspended"]
    assert set(suspended) <= {0, 4, 8}

    again = rg.run_batch(agent, inputs, job_id="gated", concurrency=12, progress=False)
    assert again.completed == 12 and again.skipped == first.completed
    assert all(i.output == f"done {inputs[i.index]}" for i in again.items)
    assert [i.index for i in again.items if not i.skipped] == suspended
    keys = ledger.read_text().split()
    assert sorted(keys) == sorted(f"gated.{i}:w" for i in range(12))  # each effect once


def test_a_sigterm_stops_a_running_job_before_its_driver_exits(
    file_store: str, tmp_path: Path
) -> None:
    """What a SIGTERM does (``suspend_all``) stops the job too: no item starts once its runs
    are suspended, so none is cut off midway when the driver exits right after; the next
    driver's run of the job resumes them, each tool effect once."""
    from raygents.runtime.driver.client import current

    gate, ledger, started = tmp_path / "gate", tmp_path / "ledger", tmp_path / "started"
    started.mkdir()

    @rg.tool(num_cpus=0)
    def work(ctx: rg.ToolContext, slow: bool) -> str:
        """Do the work: say it started, wait for ``gate``, then record the effect."""
        (started / ctx.idempotency_key).touch()
        while not gate.exists():
            time.sleep(0.02)
        with ledger.open("a") as f:
            f.write(ctx.idempotency_key + "\n")
        return "worked"

    agent = rg.Agent("batch-sigterm", model=work_then_answer(), tools=[work])
    inputs = [f"slow{i}" for i in range(12)]
    handle = rg.start_batch(agent, inputs, job_id="sigterm", concurrency=3, progress=False)
    while len(list(started.iterdir())) < 3:  # (three runs wait in their tools)
        time.sleep(0.05)
    rt = current()
    suspending = threading.Thread(target=rt.suspend_all, args=(60.0,))
    suspending.start()
    time.sleep(1.0)  # (the suspend requests reach the runs)
    gate.touch()
    suspending.join(60)
    assert [h.run_id for h in rt.handles.values() if not h.done()] == []
    effects = ledger.read_text().split()
    first = handle.result(timeout_s=60)
    assert first.stopped == "suspended"
    assert first.completed + first.suspended == len(effects) == 3
    assert ledger.read_text().split() == effects  # (nothing ran after the driver's stop)

    rg.shutdown()  # (the driver exits; another runs the job again)
    rg.init(namespace=f"batch-{os.urandom(3).hex()}", store=file_store)
    again = rg.run_batch(agent, inputs, job_id="sigterm", concurrency=3, progress=False)
    assert again.completed == 12 and again.skipped == first.completed
    keys = ledger.read_text().split()
    assert sorted(keys) == sorted(f"sigterm.{i}:w" for i in range(12))  # each effect once


def test_output_shards_hold_each_item_once_across_runs_of_the_job(tmp_path: Path) -> None:
    out = tmp_path / "out"
    agent = rg.Agent("batch-out", model=echo_model())
    inputs = ["bad" if i == 7 else f"q{i}" for i in range(60)]
    handle = rg.start_batch(
        agent, inputs, job_id="shards", concurrency=8, output=str(out), progress=False
    )
    streamed = list(handle.results())
    result = handle.result()
    assert result.items == () and result.output == str(out) and result.completed == 59
    assert sorted(i.index for i in streamed) == list(range(60))
    again = rg.run_batch(agent, inputs, job_id="shards", output=str(out), progress=False)
    assert again.skipped == 59 and again.failed == 1
    lines = [json.loads(x) for p in sorted(out.iterdir()) for x in p.read_text().splitlines()]
    completed = sorted(x["index"] for x in lines if x["status"] == "completed")
    assert completed == [i for i in range(60) if i != 7]
    assert [x["index"] for x in lines if x["status"] == "failed"] == [7, 7]


def test_a_rerun_on_a_new_coordinator_finds_completed_items_in_the_store(
    file_store: str,
) -> None:
    agent = rg.Agent("batch-durable", model=echo_model())
    first = rg.run_batch(agent, [f"q{i}" for i in range(30)], job_id="durable", progress=False)
    assert first.completed == 30
    rg.shutdown()  # the coordinator goes, and what it kept in memory with it
    rg.init(namespace=f"batch-{os.urandom(3).hex()}", store=file_store)
    again = rg.run_batch(agent, [f"q{i}" for i in range(30)], job_id="durable", progress=False)
    assert again.skipped == again.completed == 30
    assert [i.output for i in again.items] == [f"echo q{i}" for i in range(30)]
    assert [i.usage for i in again.items] == [i.usage for i in first.items]
    assert again.usage == rg.Usage()  # (skipped items cost nothing again)


def test_an_item_awaiting_approval_is_interrupted() -> None:
    @rg.tool(needs_approval=True, num_cpus=0)
    def risky() -> str:
        """A risky thing."""
        return "done"

    def reply(req: rg.ModelRequest) -> Any:
        if req.messages[0].text == "ask":
            return calls(call("risky", {}, id="r"))
        return text("fine")

    agent = rg.Agent("batch-approval", model=FunctionModel(reply), tools=[risky])
    result = rg.run_batch(agent, ["ask", "plain"], job_id="approval", progress=False)
    assert [i.status for i in result.items] == ["interrupted", "completed"]
    assert result.interrupted == 1
