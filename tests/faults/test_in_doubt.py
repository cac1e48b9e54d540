"""Kill the agent actor while an ``on_recovery="ask"`` tool runs: the call is not run again
on recovery, the run stops in doubt with that call, and each resolution completes it."""

from __future__ import annotations

import io
import os
import signal
import time
from typing import Any

import pytest
import ray
from faultkit import Ledger, agent_actor, record, wait_for

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("faulty")


def tools(charge_s: float, lookup_gate: str | None = None) -> list[rg.Tool]:
    """``charge`` (an ``ask`` tool) and ``lookup`` (a ``rerun`` one). ``lookup`` takes 1.5 s,
    or, with ``lookup_gate``, until that file exists: a test that must find it still running
    (however slow the machine) opens the gate once it is done with the first copy."""

    @rg.tool(num_cpus=0, on_recovery="ask")
    def charge(ctx: rg.ToolContext, amount: int) -> str:
        """Charge a card (the other side ignores idempotency keys)."""
        record(ctx.context["ledger"], "start", ctx.idempotency_key)
        time.sleep(charge_s)
        record(ctx.context["ledger"], "effect", ctx.idempotency_key)
        return f"charged {amount}"

    @rg.tool(num_cpus=0)
    def lookup(ctx: rg.ToolContext) -> str:
        """Look the customer up (safe to run again)."""
        record(ctx.context["ledger"], "start", ctx.idempotency_key)
        if lookup_gate is None:
            time.sleep(1.5)
        else:
            wait_for(lambda: os.path.exists(lookup_gate), 120)
        return "customer 7"

    return [charge, lookup]


def reply(req: rg.ModelRequest) -> rg.ModelResponse:
    answers = [m.text for m in req.messages if m.role == "tool"]
    if answers:
        return text(" | ".join(answers))
    return calls(call("charge", {"amount": 5}, id="charge0"), call("lookup", {}, id="look0"))


def kill(actor: Any) -> None:
    os.kill(ray.get(actor.ping.remote()), signal.SIGKILL)


def count(ledger: Ledger, event: str, key: str) -> int:
    return sum(1 for e in ledger.entries() if e["event"] == event and e["key"] == key)


def in_doubt(name: str, ledger: Ledger) -> tuple[rg.Agent, rg.RunHandle, rg.RunInDoubt]:
    agent = rg.Agent(name, tools=tools(charge_s=2.0), model=FunctionModel(reply))
    handle = rg.start(agent, "pay", context={"ledger": str(ledger.path)})
    next(e for e in handle.events() if e.type == "tool_start" and e.tool_name == "charge")
    wait_for(lambda: count(ledger, "start", f"{handle.run_id}:charge0") == 1)  # it runs
    kill(agent_actor(name))
    with pytest.raises(rg.RunInDoubt) as caught:
        handle.result(timeout_s=120)
    return agent, handle, caught.value


@pytest.mark.parametrize(
    ("resolution", "output", "charges"),
    [
        ("rerun", "charged 5 | customer 7", 1),
        (
            rg.ToolResult("charged 5 (checked by hand)"),
            "charged 5 (checked by hand) | customer 7",
            0,
        ),
        (rg.ToolResult("card declined", is_error=True), "card declined | customer 7", 0),
    ],
    ids=["rerun", "done", "failed"],
)
def test_a_call_in_doubt_is_not_run_again_and_each_resolution_completes_the_run(
    ledger: Ledger, resolution: Any, output: str, charges: int
) -> None:
    name = f"payer_{'rerun' if resolution == 'rerun' else 'given'}_{os.urandom(2).hex()}"
    agent, handle, error = in_doubt(name, ledger)
    key = f"{handle.run_id}:charge0"
    (doubt,) = error.calls
    assert (doubt.call_id, doubt.tool_name, doubt.agent_name) == ("charge0", "charge", name)
    assert doubt.idempotency_key == key and doubt.arguments == '{"amount": 5}'
    assert doubt.run_id == handle.run_id and doubt.started_at <= time.time()
    assert handle.status() == "in_doubt"
    listed = rg.runs(status="in_doubt")  # (the module's earlier runs ended otherwise)
    assert handle.run_id in {r.run_id for r in listed}
    assert {r.status for r in listed} == {"in_doubt"}
    time.sleep(2.5)  # whatever the lost copy's task was doing is over
    assert count(ledger, "start", key) == 1, "the call in doubt was not run again"
    effects = count(ledger, "effect", key)
    assert effects <= 1
    lookups = count(ledger, "start", f"{handle.run_id}:look0")

    result = rg.resume(handle.run_id, agent=agent, resolutions={"charge0": resolution}).result(120)
    assert result.final_output == output
    assert count(ledger, "start", key) == 1 + charges
    assert count(ledger, "effect", key) == effects + charges
    assert count(ledger, "start", f"{handle.run_id}:look0") == lookups + 1, "a rerun tool reruns"


def test_resolutions_must_cover_exactly_the_calls_in_doubt(ledger: Ledger) -> None:
    agent, handle, _ = in_doubt(f"payer_bad_{os.urandom(2).hex()}", ledger)
    for bad, missing, unknown in [
        ({}, ["charge0"], []),
        ({"charge0": "rerun", "look0": "rerun"}, [], ["look0"]),
        ({"nope": "rerun"}, ["charge0"], ["nope"]),
    ]:
        with pytest.raises(rg.ResolutionsMismatch) as caught:
            rg.resume(handle.run_id, agent=agent, resolutions=bad)
        assert (caught.value.missing, caught.value.unknown) == (missing, unknown)
    with pytest.raises(rg.UserError, match='must be "rerun" or a ToolResult'):
        rg.resume(handle.run_id, agent=agent, resolutions={"charge0": "done"})
    assert handle.status() == "in_doubt"  # nothing was claimed: it still waits
    given = {"charge0": rg.ToolResult("ok")}
    result = rg.resume(handle.run_id, agent=agent, resolutions=given).result(120)
    assert result.final_output == "ok | customer 7"


def test_an_ask_call_whose_result_is_journaled_is_never_in_doubt(ledger: Ledger) -> None:
    def quick_charge(req: rg.ModelRequest) -> rg.ModelResponse:
        return reply(req)

    name = f"payer_journaled_{os.urandom(2).hex()}"
    gate = f"{ledger.path}.gate"
    agent = rg.Agent(name, tools=tools(0.05, gate), model=FunctionModel(quick_charge))
    handle = rg.start(agent, "pay", context={"ledger": str(ledger.path)})
    events = iter(handle.events())
    next(e for e in events if e.type == "tool_end" and e.tool_name == "charge")
    next(e for e in events if e.type == "checkpoint")  # its journal record
    kill(agent_actor(name))  # (lookup is still running: its gate is closed)
    open(gate, "w").close()
    result = handle.result(timeout_s=120)
    assert result.final_output == "charged 5 | customer 7"
    assert count(ledger, "start", f"{handle.run_id}:charge0") == 1
    assert count(ledger, "start", f"{handle.run_id}:look0") == 2, "a rerun tool reruns"


def test_a_call_in_doubt_in_an_agent_as_tool_child_surfaces_at_the_root(ledger: Ledger) -> None:
    tag = os.urandom(2).hex()
    child = rg.Agent(f"cashier_{tag}", tools=tools(charge_s=2.0), model=FunctionModel(reply))

    def boss(req: rg.ModelRequest) -> rg.ModelResponse:
        answers = [m.text for m in req.messages if m.role == "tool"]
        if answers:
            return text(f"boss: {answers[0]}")
        return calls(call(child.name, {"input": "pay"}, id="ask_cashier"))

    root = rg.Agent(f"boss_{tag}", tools=[child.as_tool()], model=FunctionModel(boss))
    handle = rg.start(root, "go", context={"ledger": str(ledger.path)})
    wait_for(lambda: any(k.endswith(":charge0") for k in ledger.starts()), 60)
    (key,) = [k for k in ledger.starts() if k.endswith(":charge0")]
    kill(agent_actor(child.name))
    with pytest.raises(rg.RunInDoubt) as caught:
        handle.result(timeout_s=120)
    (doubt,) = caught.value.calls
    assert (doubt.call_id, doubt.agent_name, doubt.idempotency_key) == ("charge0", child.name, key)
    assert doubt.run_id != handle.run_id and key.startswith(doubt.run_id)
    assert handle.status() == "in_doubt"
    with pytest.raises(rg.ResolutionsMismatch):
        rg.resume(handle.run_id, agent=root, resolutions={})
    given = {"charge0": rg.ToolResult("charged 5 (checked)")}
    result = rg.resume(handle.run_id, agent=root, resolutions=given).result(120)
    assert result.final_output == "boss: charged 5 (checked) | customer 7"
    assert ledger.starts()[key] == 1


def test_the_cli_shows_and_resolves_the_calls_in_doubt(ledger: Ledger) -> None:
    from raygents.cli.main import parser
    from raygents.cli.runs import run_command

    agent, handle, _ = in_doubt(f"payer_cli_{os.urandom(2).hex()}", ledger)
    out = io.StringIO()
    assert run_command(parser().parse_args(["show", handle.run_id]), out) == 0
    shown = out.getvalue()
    assert "status      in_doubt" in shown and "calls in doubt" in shown
    assert f"charge0  {agent.name}: charge" in shown and f"key {handle.run_id}:charge0" in shown

    def resolve(*options: str) -> int:
        args = parser().parse_args(["resolve", handle.run_id, "--agent", "m:a", *options])
        args.agent = agent  # (what check() makes of --agent)
        return run_command(args, out)

    with pytest.raises(rg.ResolutionsMismatch, match=r"missing \['charge0'\]"):
        resolve("--done", "look0=ok")
    assert handle.status() == "in_doubt"
    assert resolve("--failed", "charge0=card declined") == 0
    assert "failed: card declined" in out.getvalue()
    assert rg.attach(handle.run_id).result(60).final_output == "card declined | customer 7"


@pytest.mark.parametrize("faulty", ["async", "exit"], indirect=True)
def test_the_start_of_an_ask_call_is_durable_in_every_mode(ledger: Ledger, faulty: str) -> None:
    agent, handle, error = in_doubt(f"payer_mode_{os.urandom(2).hex()}", ledger)
    assert [c.call_id for c in error.calls] == ["charge0"]
    key = f"{handle.run_id}:charge0"
    time.sleep(2.5)
    assert count(ledger, "start", key) == 1
    result = rg.resume(handle.run_id, agent=agent, resolutions={"charge0": "rerun"}).result(120)
    assert result.final_output == "charged 5 | customer 7"
    assert count(ledger, "start", key) == 2


@rg.tool(num_cpus=0, on_recovery="ask")
def charge_and_crash(ctx: rg.ToolContext, amount: int) -> str:
    """Charge a card; the first call's worker dies in it."""
    record(ctx.context["ledger"], "start", ctx.idempotency_key)
    marker = ctx.context["ledger"] + ".crashed"
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return f"charged {amount}"


def test_an_ask_call_whose_task_is_lost_is_in_doubt(ledger: Ledger) -> None:
    def model(req: rg.ModelRequest) -> rg.ModelResponse:
        done = [m.text for m in req.messages if m.role == "tool"]
        return text(done[0]) if done else calls(call("charge_and_crash", {"amount": 5}, id="c1"))

    agent = rg.Agent("payer_lost_task", tools=[charge_and_crash], model=FunctionModel(model))
    handle = rg.start(agent, "pay", context={"ledger": str(ledger.path)})
    with pytest.raises(rg.RunInDoubt) as caught:
        handle.result(timeout_s=120)
    (doubt,) = caught.value.calls
    assert (doubt.call_id, doubt.tool_name) == ("c1", "charge_and_crash")
    key = f"{handle.run_id}:c1"
    assert ledger.starts() == {key: 1}, "Ray did not retry it"
    result = rg.resume(handle.run_id, agent=agent, resolutions={"c1": "rerun"}).result(120)
    assert result.final_output == "charged 5"
    assert ledger.starts() == {key: 2}


def test_a_run_in_doubt_is_seen_by_attach_and_can_be_cancelled(ledger: Ledger) -> None:
    agent, handle, _ = in_doubt(f"payer_cancel_{os.urandom(2).hex()}", ledger)
    with pytest.raises(rg.RunInDoubt) as caught:
        rg.attach(handle.run_id).result(60)
    assert [c.call_id for c in caught.value.calls] == ["charge0"]
    rg.cancel(handle.run_id)
    assert rg.attach(handle.run_id).status() == "cancelled"
    with pytest.raises(rg.UserError, match="cancelled"):
        rg.resume(handle.run_id, agent=agent, resolutions={"charge0": "rerun"})
