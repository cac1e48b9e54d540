"""Cancel works on every run that has not ended: a suspended or awaiting-approval run (and its
stopped agent-as-tool children) gets a ``cancelled`` record, so that a pending dangerous call
can no longer be approved; its records stay, and retention and ``gc`` then age it like any
ended run. The coordinator as a plain class over a ``memory://`` store, then through Ray."""

from __future__ import annotations

import argparse
import io
import json
import os
import time
from typing import Any

import pytest

import raygents as rg
from raygents.core.approvals import PendingApproval
from raygents.core.envelope import RunState
from raygents.core.messages import Message
from raygents.errors import CheckpointError
from raygents.records import checkpoint
from raygents.runtime.actor.children import child_run_id
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.link.settings import Settings
from raygents.stores.memory import MemoryStore
from raygents.testing import FunctionModel, call, calls, text

KEY = b"k" * 32
PAYMENT = PendingApproval(
    call_id="pay", agent_name="payer", tool_name="pay", arguments='{"to": "mallory"}'
)


def _url() -> str:
    return f"memory://cancel-{os.urandom(4).hex()}"


def _stopped(url: str, run_id: str, status: Any, key: bytes | None = None, **fields: Any) -> None:
    """A run stopped by an agent actor: one record (dispatch 1) at seq 1."""
    state = RunState(
        run_id=run_id,
        agent_name="payer",
        messages=(Message(role="user", content="pay mallory"),),
        turns=1,
        epoch=1,
        **fields,
    )
    _, record = checkpoint.make_record(state, status)
    data = checkpoint.encode(record, key=key)
    MemoryStore(url.removeprefix("memory://")).put(checkpoint.key_for(run_id, 1, 1), data)


async def _coordinator(url: str, key: bytes | None = None) -> Coordinator:
    coord = Coordinator("test", Settings(store=url, key=key))
    assert await coord.records.rebuilt(timeout_s=10.0)
    return coord


async def _last_record(coord: Coordinator, run_id: str, key: bytes | None = None) -> Any:
    taken, _, blobs, before = await coord.claim_and_load(run_id, "a-driver")
    assert taken is None and blobs
    coord.unclaim(run_id, before)
    return checkpoint.restore(blobs, run_id=run_id, key=key)


@pytest.mark.parametrize("status", ["awaiting_approval", "suspended"])
async def test_a_stopped_run_is_cancelled_where_it_lies(status: str) -> None:
    url = _url()
    _stopped(url, "r", status, KEY, pending=(PAYMENT,) if status == "awaiting_approval" else ())
    coord = await _coordinator(url, KEY)
    info = await coord.cancel("r")
    assert info is not None and info.status == "cancelled"
    assert coord.table.runs["r"].status == "cancelled"
    assert coord.table.admission.in_flight() == 0  # (its cancel took no slot, and holds none)
    state, last = await _last_record(coord, "r", KEY)
    assert last["status"] == "cancelled" and last["seq"] == 2
    assert state.pending == ()  # (nothing is left to approve)
    assert [m.content for m in state.messages] == ["pay mallory"]  # (its records stay)
    keys = MemoryStore(url.removeprefix("memory://")).list("runs/r/")
    assert checkpoint.key_for("r", 1, 1) in keys and checkpoint.key_for("r", 2, 2) in keys


async def test_a_cancelled_run_is_read_back_cancelled_and_gc_retires_it() -> None:
    url = _url()
    _stopped(url, "r", "awaiting_approval", pending=(PAYMENT,))
    coord = await _coordinator(url)
    await coord.cancel("r")
    again = await _coordinator(url)  # (a restarted coordinator reads the store back)
    assert again.table.runs["r"].status == "cancelled"
    _, rows = await again.gc(older_than_s=0.0)
    assert [(row["run_id"], row["status"]) for row in rows] == [("r", "cancelled")]
    assert MemoryStore(url.removeprefix("memory://")).list("runs/r/") == []


async def test_its_stopped_children_are_cancelled_with_it() -> None:
    url = _url()
    child = child_run_id("p", "call-1")
    _stopped(url, "p", "awaiting_approval", pending=(PAYMENT,))
    _stopped(url, child, "awaiting_approval", pending=(PAYMENT,), parent_run_id="p", depth=1)
    _stopped(url, "other", "awaiting_approval", pending=(PAYMENT,))
    coord = await _coordinator(url)
    coord.table.adopt(child)
    await coord.cancel("p")
    statuses = {run_id: info.status for run_id, info in coord.table.runs.items()}
    assert statuses == {"p": "cancelled", child: "cancelled", "other": "awaiting_approval"}


async def test_an_ended_or_unknown_run_is_left_as_it_is() -> None:
    url = _url()
    _stopped(url, "r", "failed")
    coord = await _coordinator(url)
    assert (await coord.cancel("r")).status == "failed"  # type: ignore[union-attr]
    assert await coord.cancel("nobody") is None
    assert len(MemoryStore(url.removeprefix("memory://")).list("runs/r/")) == 1


async def test_a_run_whose_records_cannot_be_read_is_left_as_it_was() -> None:
    url = _url()
    store = MemoryStore(url.removeprefix("memory://"))
    store.put(checkpoint.key_for("r", 1, 1), b"damaged")  # (its newest record is fine)
    state = RunState(run_id="r", agent_name="payer", seq=1, epoch=1, pending=(PAYMENT,))
    _, record = checkpoint.make_record(state, "awaiting_approval")
    store.put(checkpoint.key_for("r", 2, 1), checkpoint.encode(record))
    coord = await _coordinator(url)
    assert coord.table.runs["r"].status == "awaiting_approval"
    with pytest.raises(CheckpointError):
        await coord.cancel("r")
    assert coord.table.runs["r"].status == "awaiting_approval"
    assert coord.table.admission.in_flight() == 0
    assert len(store.list("runs/r/")) == 2


# --- through Ray: raygents.cancel, then resume and approve are refused ------------------


@rg.tool(num_cpus=0, needs_approval=True)
def wire(to: str, amount: int) -> str:
    """Send money."""
    return f"sent {amount} to {to}"


def _wire_once(request: rg.ModelRequest) -> rg.ModelResponse:
    if any(m.role == "tool" for m in request.messages):
        return text("done")
    return calls(call("wire", {"to": "mallory", "amount": 1_000_000}, id="big"))


@pytest.mark.usefixtures("rt")
def test_cancel_retires_a_run_awaiting_approval() -> None:
    agent = rg.Agent("wirer", tools=[wire], model=FunctionModel(_wire_once))
    with pytest.raises(rg.RunInterrupted) as interrupted:
        rg.run(agent, "pay")
    run_id = interrupted.value.run_id
    rg.cancel(run_id)
    assert {i.run_id: i.status for i in rg.runs()}[run_id] == "cancelled"
    with pytest.raises(rg.UserError, match="was cancelled"):
        rg.resume(run_id, agent=agent, approvals={"big": True})
    with pytest.raises(rg.RunCancelled):
        rg.attach(run_id).result(timeout_s=30)
    rg.cancel(run_id)  # (ended: nothing changes)


@pytest.mark.usefixtures("rt")
def test_the_command_cancels_a_run_awaiting_approval_and_approve_then_refuses() -> None:
    from raygents.cli.runs import CommandFailed, _approve, _cancel

    agent = rg.Agent("wirer_cli", tools=[wire], model=FunctionModel(_wire_once))
    with pytest.raises(rg.RunInterrupted) as interrupted:
        rg.run(agent, "pay")
    run_id = interrupted.value.run_id
    out = io.StringIO()
    assert _cancel(argparse.Namespace(run_id=run_id, json=True, timeout=60.0), out) == 0
    assert json.loads(out.getvalue())["status"] == "cancelled"
    approve = argparse.Namespace(
        run_id=run_id, agent=agent, all=True, approve=[], deny=[], json=False, timeout=60.0
    )
    with pytest.raises(CommandFailed, match="cancelled, not awaiting approval"):
        _approve(approve, io.StringIO())


@pytest.mark.usefixtures("rt")
def test_the_handle_of_a_run_awaiting_approval_cancels_it_too() -> None:
    agent = rg.Agent("wirer_handle", tools=[wire], model=FunctionModel(_wire_once))
    handle = rg.start(agent, "pay")
    with pytest.raises(rg.RunInterrupted):
        handle.result(timeout_s=60)
    handle.cancel()
    deadline = time.monotonic() + 30
    while {i.run_id: i.status for i in rg.runs()}[handle.run_id] != "cancelled":
        assert time.monotonic() < deadline, "the run was not cancelled"
        time.sleep(0.05)
    with pytest.raises(rg.UserError, match="was cancelled"):
        rg.resume(handle.run_id, agent=agent, approvals={"big": True})
