"""Approval edge cases (B7 of the reliability plan): an approved call runs exactly once with
the approved arguments across a suspend, an actor's death and a timeout; a rejected call never
runs and the model is told; recovery never asks again and never skips the approval; a new call
with other arguments needs a new approval."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import ray
from faults import faultkit
from faults.faultkit import Ledger, agent_actor, apply_effect_once, record
from spaces import Namespaces

import raygents as rg
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text


@pytest.fixture
def guarded(module_raygents: Namespaces, rt: None, tmp_path: Path) -> Ledger:
    """raygents on the module's namespace (a file store, quick recovery); the test's ledger."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(faultkit)
    module_raygents.file_store(heartbeat_s=0.5, stale_after_s=5.0)
    return Ledger(tmp_path / "ledger.jsonl")


def wipe(seconds: float) -> rg.Tool:
    @rg.tool(num_cpus=0, needs_approval=True)
    def wipe(ctx: rg.ToolContext, target: str) -> str:
        """Wipe a target (idempotent by key); records its arguments."""
        path = ctx.context["ledger"]
        record(path, "start", ctx.idempotency_key, target=target)
        time.sleep(seconds)
        apply_effect_once(path, ctx.idempotency_key)
        return f"wiped {target}"

    return wipe


def wipe_then_answer(targets: tuple[str, ...] = ("db",), latency_s: float = 0.0) -> FunctionModel:
    """Asks to wipe each target in turn (one call a turn), then answers with the results."""

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        results = [m.text or "" for m in req.messages if m.role == "tool"]
        if len(results) < len(targets):
            n = len(results)
            return calls(call("wipe", {"target": targets[n]}, id=f"c_wipe{n}"))
        return text(" | ".join(results))

    return FunctionModel(reply, latency_s=latency_s)


def interrupted(handle: rg.RunHandle) -> list[tuple[str, str]]:
    with pytest.raises(rg.RunInterrupted) as info:
        handle.result(timeout_s=60)
    return [(p.call_id, p.arguments) for p in info.value.pending]


def ran_once_with(ledger: Ledger, target: str) -> None:
    starts = [e for e in ledger.entries() if e["event"] == "start"]
    assert {e["target"] for e in starts} == {target}, "only the approved arguments"
    assert list(ledger.effects().values()) == [1], ledger.entries()


def test_approve_then_suspend_while_it_runs_then_resume(guarded: Ledger) -> None:
    agent = rg.Agent("appr_suspend", tools=[wipe(1.0)], model=wipe_then_answer())
    context = {"ledger": str(guarded.path)}
    handle = rg.start(agent, "go", context=context)
    assert interrupted(handle) == [("c_wipe0", '{"target": "db"}')]
    approved = rg.resume(handle.run_id, agent=agent, approvals={"c_wipe0": True}, context=context)
    next(e for e in approved.events() if e.type == "tool_start")
    approved.suspend()
    with pytest.raises(rg.SuspendedError):
        approved.result(timeout_s=60)
    again = rg.resume(handle.run_id, agent=agent, context=context)  # no decisions: not asked
    assert again.result(timeout_s=60).final_output == "wiped db"
    assert list(guarded.starts().values()) == [1], "the tool finished before the suspend"
    ran_once_with(guarded, "db")


def test_approve_then_suspend_before_it_starts_neither_asks_again_nor_skips(
    guarded: Ledger,
) -> None:
    agent = rg.Agent("appr_early", tools=[wipe(0.0)], model=wipe_then_answer(latency_s=0.5))
    context = {"ledger": str(guarded.path)}
    handle = rg.start(agent, "go", context=context)
    interrupted(handle)
    approved = rg.resume(handle.run_id, agent=agent, approvals={"c_wipe0": True}, context=context)
    approved.suspend()  # before or while its batch runs: either way it runs once
    try:
        assert approved.result(timeout_s=60).final_output == "wiped db"
    except rg.SuspendedError:
        again = rg.resume(handle.run_id, agent=agent, context=context)  # not asked again
        assert again.result(timeout_s=60).final_output == "wiped db"
    ran_once_with(guarded, "db")


def test_approve_then_the_agent_actor_dies_and_the_run_is_recovered(guarded: Ledger) -> None:
    agent = rg.Agent("appr_killed", tools=[wipe(1.5)], model=wipe_then_answer())
    context = {"ledger": str(guarded.path)}
    handle = rg.start(agent, "go", context=context)
    interrupted(handle)
    approved = rg.resume(handle.run_id, agent=agent, approvals={"c_wipe0": True}, context=context)
    next(e for e in approved.events() if e.type == "tool_start")
    time.sleep(0.3)
    pid = ray.get(agent_actor("appr_killed").ping.remote())
    os.kill(pid, signal.SIGKILL)
    result = approved.result(timeout_s=120)  # recovery never raises RunInterrupted again
    assert result.final_output == "wiped db"
    assert any(e.type == "recovered" for e in approved.events())
    ran_once_with(guarded, "db")
    assert all(n <= 2 for n in guarded.starts().values()), "re-run at most once, same key"


def test_a_rejected_call_never_runs_and_the_model_is_told(guarded: Ledger) -> None:
    model = ScriptedModel(
        [
            calls(call("wipe", {"target": "db"}, id="c_wipe0")),
            lambda req: text(req.messages[-1].text or ""),
        ]
    )
    agent = rg.Agent("appr_reject", tools=[wipe(0.0)], model=model)
    context = {"ledger": str(guarded.path)}
    handle = rg.start(agent, "go", context=context)
    interrupted(handle)
    decision = rg.ApprovalDecision(False, "no: production data")
    result = rg.resume(
        handle.run_id, agent=agent, approvals={"c_wipe0": decision}, context=context
    ).result(timeout_s=60)
    assert result.final_output == "no: production data"
    assert model.calls[-1].messages[-1].role == "tool"
    assert guarded.entries() == [], "a rejected call never runs"


def test_an_approval_after_a_timeout_suspend_runs_the_call_once(guarded: Ledger) -> None:
    """The timeout fires while the model asks for the call: the run stops (suspended, or
    awaiting the approval); a resume asks for the approval (never skips it); the approval
    given long after the timeout runs the call once."""
    agent = rg.Agent("appr_timeout", tools=[wipe(0.0)], model=wipe_then_answer(latency_s=1.0))
    context = {"ledger": str(guarded.path)}
    handle = rg.start(agent, "go", context=context, timeout_s=0.3)
    try:
        pending = interrupted(handle)
    except rg.SuspendedError:  # suspended by the timeout: the resume asks
        pending = interrupted(rg.resume(handle.run_id, agent=agent, context=context))
    assert pending == [("c_wipe0", '{"target": "db"}')], "asked, not skipped"
    assert guarded.entries() == []
    done = rg.resume(handle.run_id, agent=agent, approvals={"c_wipe0": True}, context=context)
    assert done.result(timeout_s=60).final_output == "wiped db"
    ran_once_with(guarded, "db")


def test_a_timeout_while_the_approved_call_runs_suspends_and_it_runs_once(
    guarded: Ledger,
) -> None:
    agent = rg.Agent("appr_timeout_run", tools=[wipe(1.0)], model=wipe_then_answer())
    context = {"ledger": str(guarded.path)}
    handle = rg.start(agent, "go", context=context)
    interrupted(handle)
    approved = rg.resume(
        handle.run_id, agent=agent, approvals={"c_wipe0": True}, context=context, timeout_s=0.3
    )
    with pytest.raises(rg.SuspendedError):
        approved.result(timeout_s=60)
    again = rg.resume(handle.run_id, agent=agent, context=context)
    assert again.result(timeout_s=60).final_output == "wiped db"
    ran_once_with(guarded, "db")
    assert list(guarded.starts().values()) == [1]


def test_a_new_call_with_other_arguments_needs_a_new_approval(guarded: Ledger) -> None:
    agent = rg.Agent("appr_changed", tools=[wipe(0.0)], model=wipe_then_answer(("db", "all")))
    context = {"ledger": str(guarded.path)}
    handle = rg.start(agent, "go", context=context)
    interrupted(handle)
    first = rg.resume(handle.run_id, agent=agent, approvals={"c_wipe0": True}, context=context)
    assert interrupted(first) == [("c_wipe1", '{"target": "all"}')]
    ran_once_with(guarded, "db")
    last = rg.resume(
        handle.run_id, agent=agent, approvals={"c_wipe1": False}, context=context
    ).result(timeout_s=60)
    assert last.final_output.startswith("wiped db | ")
    ran_once_with(guarded, "db")


@rg.tool(num_cpus=0)
def slow_lookup(ctx: rg.ToolContext) -> str:
    """Look something up, slowly (it ends after its sibling child stopped for approval)."""
    record(ctx.context["ledger"], "start", ctx.idempotency_key)
    time.sleep(4.0)
    return "looked up"


def test_a_sibling_that_finished_after_a_child_stopped_is_not_run_again(guarded: Ledger) -> None:
    tag = os.urandom(2).hex()

    def child_reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = [m.text for m in req.messages if m.role == "tool"]
        return text(done[0]) if done else calls(call("wipe", {"target": "db"}, id="w1"))

    child = rg.Agent(f"wiper_{tag}", tools=[wipe(0.0)], model=FunctionModel(child_reply))

    def boss_reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = sorted(m.text or "" for m in req.messages if m.role == "tool")
        if done:
            return text(" + ".join(done))
        return calls(call(child.name, {"input": "wipe"}, id="c1"), call("slow_lookup", {}, id="l1"))

    boss = rg.Agent(
        f"boss_{tag}", tools=[child.as_tool(), slow_lookup], model=FunctionModel(boss_reply)
    )
    handle = rg.start(boss, "go", context={"ledger": str(guarded.path)})
    with pytest.raises(rg.RunInterrupted) as caught:
        handle.result(timeout_s=60)
    (pending,) = caught.value.pending
    result = rg.resume(handle.run_id, agent=boss, approvals={pending.call_id: True}).result(60)
    assert result.final_output.startswith("looked up + ")
    assert guarded.starts()[f"{handle.run_id}:l1"] == 1, "its result was in the stop's record"
