"""``attach`` to a run awaiting approval that this driver holds no handle of (another driver's,
or one whose handle is gone) shows its pending calls, and they can be approved from there."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@rg.tool(num_cpus=0, needs_approval=True)
def wire_money(to: str) -> str:
    """Wire money to someone."""
    return f"wired to {to}"


def _agent() -> rg.Agent:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        results = [m.text for m in req.messages if m.role == "tool"]
        if not results:
            return calls(call("wire_money", {"to": "alice"}, id="c_wire"))
        return text(" | ".join(results))

    return rg.Agent("banker", tools=[wire_money], model=FunctionModel(reply))


def _interrupted_run(agent: rg.Agent) -> str:
    """Start a run that stops for approval; returns its id, holding no handle of it."""
    handle = rg.start(agent, "pay alice")
    with pytest.raises(rg.RunInterrupted):
        handle.result(timeout_s=60)
    run_id = handle.run_id
    del handle
    gc.collect()
    from raygents.runtime.driver.client import current

    assert current().handles.get(run_id) is None, "this driver still holds the run's handle"
    return run_id


def _attach_sees_the_pending_call(run_id: str) -> None:
    attached = rg.attach(run_id)
    with pytest.raises(rg.RunInterrupted) as info:
        attached.result(timeout_s=60)
    assert [(p.call_id, p.tool_name, p.run_id) for p in info.value.pending] == [
        ("c_wire", "wire_money", run_id)
    ]
    assert attached.status() == "awaiting_approval"
    (event,) = [e for e in attached.events() if e.type == "interrupted"]
    assert [p["call_id"] for p in event.data["pending"]] == ["c_wire"]


def test_attach_shows_the_pending_calls_of_a_run_it_did_not_start() -> None:
    agent = _agent()
    run_id = _interrupted_run(agent)
    _attach_sees_the_pending_call(run_id)
    result = rg.resume(run_id, agent=agent, approvals={"c_wire": True}).result(timeout_s=60)
    assert result.final_output == "wired to alice"


@pytest.fixture
def file_store(own_raygents: None, tmp_path: Path) -> Iterator[str]:
    url = f"file://{tmp_path / 'ckpt'}"
    rg.shutdown()
    rg.init(namespace=f"attach-{os.urandom(3).hex()}", store=url)
    yield url
    rg.shutdown()


def test_attach_reads_the_pending_calls_from_the_store_after_a_coordinator_restart(
    file_store: str,
) -> None:
    from raygents.runtime.driver.client import current

    agent = _agent()
    run_id = _interrupted_run(agent)
    namespace = current().namespace
    rg.shutdown()  # a new coordinator rebuilds its run table from the store
    rg.init(namespace=namespace, store=file_store)
    _attach_sees_the_pending_call(run_id)
    result = rg.resume(run_id, agent=agent, approvals={"c_wire": True}).result(timeout_s=60)
    assert result.final_output == "wired to alice"
