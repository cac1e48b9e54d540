"""Kill agent actors, tool workers and stop actors; every run ends completed, and no finished
tool call runs twice; idempotent effects happen once per key."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import ray
from faultkit import Ledger, agent_actor, apply_effect_once, no_leaked_cpus, record, wait_for

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("faulty")


def pay_tool(seconds: float, num_cpus: float = 0) -> rg.Tool:
    @rg.tool(num_cpus=num_cpus)
    def pay(ctx: rg.ToolContext, amount: int) -> str:
        """Pay an amount (idempotent by key)."""
        path = ctx.context["ledger"]
        record(path, "start", ctx.idempotency_key)
        time.sleep(seconds)
        apply_effect_once(path, ctx.idempotency_key)
        record(path, "end", ctx.idempotency_key)
        return f"paid {amount}"

    return pay


def two_payments(latency_s: float = 0.0) -> FunctionModel:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(1 for m in req.messages if m.role == "tool")
        if done >= 2:
            return text(f"paid twice: {done}")
        return calls(call("pay", {"amount": 10 + done}, id=f"pay{done}"))

    return FunctionModel(reply, latency_s=latency_s)


def kill(actor: object) -> int:
    pid = ray.get(actor.ping.remote())  # type: ignore[attr-defined]
    os.kill(pid, signal.SIGKILL)
    return pid


def check(result: rg.RunResult, ledger: Ledger) -> None:
    assert result.final_output == "paid twice: 2"
    assert set(ledger.effects().values()) == {1}, ledger.entries()
    assert len(ledger.effects()) == 2


def test_kill_the_agent_actor_during_a_model_call(ledger: Ledger) -> None:
    agent = rg.Agent("payer_model", tools=[pay_tool(0.1)], model=two_payments(latency_s=1.5))
    handle = rg.start(agent, "pay", context={"ledger": str(ledger.path)})
    events = iter(handle.events())
    next(e for e in events if e.type == "tool_end")
    next(e for e in events if e.type == "checkpoint")  # results of the first batch are durable
    time.sleep(0.3)  # the second model call is in flight
    kill(agent_actor("payer_model"))
    result = handle.result(timeout_s=120)
    check(result, ledger)
    assert ledger.starts() == {key: 1 for key in ledger.effects()}, "no finished call ran again"
    recovered = [e for e in handle.events() if e.type == "recovered"]
    assert recovered and recovered[0].data["from_seq"] >= 1  # more while the actor restarts


def test_kill_the_agent_actor_while_its_tool_runs(ledger: Ledger) -> None:
    agent = rg.Agent("payer_tool", tools=[pay_tool(1.5)], model=two_payments())
    handle = rg.start(agent, "pay", context={"ledger": str(ledger.path)})
    next(e for e in handle.events() if e.type == "tool_start")
    time.sleep(0.3)
    kill(agent_actor("payer_tool"))
    result = handle.result(timeout_s=120)
    check(result, ledger)
    starts = ledger.starts()
    assert all(count <= 2 for count in starts.values()), "re-run at most once, with the same key"
    assert any(e.type == "recovered" for e in handle.events())
    no_leaked_cpus()


@rg.tool(num_cpus=0, max_retries=1)
def crash_once(ctx: rg.ToolContext) -> str:
    """Crash the worker on the first attempt."""
    marker = Path(ctx.context["ledger"]).with_suffix(".crashed")
    record(ctx.context["ledger"], "start", ctx.idempotency_key)
    if not marker.exists():
        marker.write_text("x")
        os._exit(1)
    return "survived"


def test_a_tool_whose_worker_dies_is_retried_by_ray(ledger: Ledger) -> None:
    model = FunctionModel(
        lambda req: (
            text(req.messages[-1].text)
            if req.messages[-1].role == "tool"
            else calls(call("crash_once", {}))
        )
    )
    result = rg.run(
        rg.Agent("crasher", tools=[crash_once], model=model),
        "x",
        context={"ledger": str(ledger.path)},
    )
    assert result.final_output == "survived"
    assert list(ledger.starts().values()) == [2], "two attempts, one idempotency key"


@pytest.mark.parametrize("faulty", ["sync", "exit"], indirect=True)
def test_a_stopped_actor_is_replaced_and_fenced(ledger: Ledger, faulty: str) -> None:
    agent = rg.Agent("payer_paused", tools=[pay_tool(0.2)], model=two_payments(latency_s=1.0))
    handle = rg.start(agent, "pay", context={"ledger": str(ledger.path)})
    events = iter(handle.events())
    next(e for e in events if e.type == "tool_end")
    actor = agent_actor("payer_paused")
    pid = ray.get(actor.ping.remote())
    os.kill(pid, signal.SIGSTOP)
    try:
        result = handle.result(timeout_s=120)
    finally:
        os.kill(pid, signal.SIGCONT)
    check(result, ledger)
    assert any(
        e.type == "recovered" and "stopped answering" in (e.error or "") for e in handle.events()
    )
    # The revived copy finishes its model call, then its checkpoint write is refused (fenced).
    # With `exit` durability it writes no record: it runs its second payment (the ledger
    # keeps the effect once) and ends, and its completion marker is refused (fenced). Either
    # way, nothing of the run but the recovered dispatch's marker is left in the store.
    root = Path(faulty[len("file://") :]) / "runs" / handle.run_id

    def names() -> list[str]:
        return sorted(p.name for p in root.iterdir()) if root.exists() else []

    def left() -> list[str]:
        return [name for name in names() if not name.startswith("done.")]

    if rg.runtime.driver.client.current().settings.durability == "exit":
        wait_for(lambda: 2 in ledger.starts().values(), 30)  # the revived copy's payment
        assert set(ledger.effects().values()) == {1}
    time.sleep(3)
    try:
        wait_for(lambda: not left(), 20)
    except TimeoutError:
        raise AssertionError(f"left in the store: {left()}") from None
    markers = [name for name in names() if name.startswith("done.")]
    assert len(markers) == 1 and int(markers[0].split(".")[1]) > 1, markers


@pytest.mark.timeout(600)
def test_a_hundred_runs_survive_the_death_of_their_actor(ledger: Ledger) -> None:
    # num_cpus=0.5 bounds the tool tasks (and Ray's worker processes) to 4 at a time on 2 CPUs
    agent = rg.Agent("crowd", tools=[pay_tool(0.3, 0.5)], model=two_payments(latency_s=0.5))
    handles = [
        rg.start(agent, f"pay {i}", context={"ledger": str(ledger.path)}) for i in range(100)
    ]
    wait_for(lambda: len(ledger.entries()) >= 50, 120)
    kill(agent_actor("crowd"))
    results = [h.result(timeout_s=300) for h in handles]
    assert all(r.final_output == "paid twice: 2" for r in results)
    effects = ledger.effects()
    assert len(effects) == 200 and set(effects.values()) == {1}
    assert all(
        r.status == "completed" for r in rg.runs() if r.run_id in {h.run_id for h in handles}
    )


@pytest.mark.timeout(300)
def test_recovery_gives_up_after_max_attempts(ledger: Ledger) -> None:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        os._exit(1)  # the actor dies on every model call

    agent = rg.Agent("doomed", model=FunctionModel(reply))
    with pytest.raises(rg.RaygentsError, match="lost 5 time") as info:
        rg.run(agent, "x")
    assert info.value.run_id
