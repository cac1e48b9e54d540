"""Admission control on a real local Ray: runs in flight per tenant (plan L2)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import raygents as rg
from raygents.testing import FunctionModel, calls, text

pytestmark = pytest.mark.timeout(240)

LIMIT = 2


@pytest.fixture
def limited(own_raygents: None, rt: None) -> Iterator[None]:
    """raygents on its own namespace with ``max_concurrent_runs=LIMIT``."""
    rg.shutdown()
    rg.init(
        namespace=f"tenants-{os.urandom(3).hex()}", store="memory://", max_concurrent_runs=LIMIT
    )
    yield
    rg.shutdown()


def noop() -> str:
    """Does nothing."""
    return "ok"


def _gated(gate: Path) -> rg.Agent:
    """An agent whose model calls ``noop`` once ``gate`` exists, then answers: its runs stay in
    flight until then, and a suspend asked meanwhile lands before the tool runs."""

    async def reply(request: Any) -> Any:
        if request.messages[-1].role == "tool":
            return text("done")
        while not gate.exists():
            await asyncio.sleep(0.02)
        return calls(("noop", {}))

    return rg.Agent("gated", model=FunctionModel(reply), tools=[rg.tool(noop)])


def test_a_tenant_past_its_limit_is_refused_and_another_is_not_starved(
    limited: None, tmp_path: Path
) -> None:
    gate = tmp_path / "open"
    agent = _gated(gate)
    admitted = [rg.start(agent, f"a{i}", tenant="acme") for i in range(LIMIT)]
    for i in range(LIMIT):  # twice the limit for acme: the excess is refused at once
        with pytest.raises(rg.TooManyRuns) as refused:
            rg.start(agent, f"over{i}", tenant="acme")
        assert (refused.value.tenant, refused.value.limit) == ("acme", LIMIT)
        assert "acme" in str(refused.value) and "max_concurrent_runs" in str(refused.value)
    burst = [rg.start(agent, f"b{i}", tenant="globex") for i in range(LIMIT)]  # its own quota
    with pytest.raises(rg.TooManyRuns):
        rg.start(agent, "b-over", tenant="globex")
    gate.touch()
    for handle in admitted + burst:
        assert handle.result(timeout_s=60).final_output == "done"
    # the ended runs gave their slots back; refused runs left nothing in the run table
    again = [rg.start(agent, f"again{i}", tenant="acme") for i in range(LIMIT)]
    assert [h.result(timeout_s=60).final_output for h in again] == ["done"] * LIMIT
    assert not [info for info in rg.runs() if "over" in info.run_id]


def test_batch_items_past_the_limit_wait_for_a_slot_and_leave_none_taken(
    limited: None, tmp_path: Path
) -> None:
    gate = tmp_path / "open"
    agent = _gated(gate)
    handle = rg.start_batch(
        agent, [f"i{i}" for i in range(6)], job_id="limited", concurrency=6, progress=False
    )
    time.sleep(2.0)  # (the admitted ones wait at the gate, the others for a slot)
    progress = handle.progress()
    assert (progress.failed, progress.running) == (0, LIMIT), progress
    gate.touch()
    result = handle.result(timeout_s=60)
    assert (result.completed, result.failed) == (6, 0), [i.error for i in result.items]
    again = [rg.start(agent, f"after{i}") for i in range(LIMIT)]
    assert [h.result(timeout_s=60).final_output for h in again] == ["done"] * LIMIT


def test_runs_without_a_tenant_share_the_default_one(limited: None, tmp_path: Path) -> None:
    gate = tmp_path / "open"
    agent = _gated(gate)
    admitted = [rg.start(agent, f"d{i}") for i in range(LIMIT)]
    with pytest.raises(rg.TooManyRuns) as refused:
        rg.start(agent, "one more")
    assert refused.value.tenant == "default"
    gate.touch()
    for handle in admitted:
        handle.result(timeout_s=60)


def test_a_suspended_run_gives_its_slot_back_and_takes_one_to_resume(
    limited: None, tmp_path: Path
) -> None:
    gate = tmp_path / "open"
    agent = _gated(gate)
    first = rg.start(agent, "first", tenant="acme", run_id="suspend-me")
    second = rg.start(agent, "second", tenant="acme")
    first.suspend()
    gate.touch()  # (the suspend lands at the run's next safe point, after this reply)
    with pytest.raises(rg.SuspendedError):
        first.result(timeout_s=60)
    second.result(timeout_s=60)
    gate.unlink()
    third = rg.start(agent, "third", tenant="acme")
    fourth = rg.start(agent, "fourth", tenant="acme")
    with pytest.raises(rg.TooManyRuns):  # the resume needs a slot, and acme has none left
        rg.resume("suspend-me", agent=agent)
    gate.touch()
    third.result(timeout_s=60)
    fourth.result(timeout_s=60)
    assert rg.resume("suspend-me", agent=agent).result(timeout_s=60).final_output == "done"


def test_the_limit_is_checked_before_anything_starts() -> None:
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(rg.UserError, match="max_concurrent_runs"):
            rg.init(store="memory://", max_concurrent_runs=bad)  # type: ignore[arg-type]


def test_a_tenant_is_one_id_segment(limited: None) -> None:
    agent = rg.Agent("a", model=FunctionModel(lambda request: text("x")))
    for bad in ("", "a/b", "x" * 200, "..", "tenant with spaces"):
        with pytest.raises(rg.UserError, match="tenant"):
            rg.start(agent, "x", tenant=bad)
