"""A run context shared and written: tools, hooks and handoff callbacks write it, what runs
after sees it, checkpoints keep it, and the caller gets it back (the SDK's customer service
example, and the failure paths)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

import raygents as rg
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@dataclass
class AirlineContext:
    passenger_name: str | None = None
    confirmation_number: str | None = None
    seat_number: str | None = None
    flight_number: str | None = None
    log: list[str] = field(default_factory=list)


def set_flight(ctx: rg.RunContext) -> None:
    """The SDK's ``on_seat_booking_handoff``: a write in the triage agent's actor."""
    ctx.context.flight_number = "FLT-123"


@rg.tool(num_cpus=0)
def update_seat(ctx: rg.ToolContext, confirmation_number: str, new_seat: str) -> str:
    """Update the seat of a booking (a Ray task: it writes its own copy of the context)."""
    assert ctx.context.flight_number == "FLT-123", "the handoff callback's write is seen"
    ctx.context.confirmation_number = confirmation_number
    ctx.context.seat_number = new_seat
    ctx.context.log.append("seat")
    return f"Updated seat to {new_seat} for {confirmation_number}"


def seat_instructions(ctx: rg.RunContext, agent: rg.Agent) -> str:
    seat = ctx.context.seat_number
    return f"Seat booking agent. Flight {ctx.context.flight_number}, seat {seat}."


def test_the_customer_service_example_shares_its_context() -> None:
    seat_model = ScriptedModel(
        [
            calls(("update_seat", {"confirmation_number": "C1", "new_seat": "12A"})),
            text("Your seat is 12A."),
        ]
    )
    seat_agent = rg.Agent("cs_seat", seat_instructions, tools=[update_seat], model=seat_model)
    triage = rg.Agent(
        "cs_triage",
        handoffs=[rg.handoff(seat_agent, on_handoff=set_flight)],
        model=ScriptedModel([calls(("transfer_to_cs_seat", {}))]),
    )
    context = AirlineContext(passenger_name="Ann")
    result = rg.run(triage, "Change my seat", context=context)
    assert result.final_output == "Your seat is 12A."
    assert result.context == AirlineContext("Ann", "C1", "12A", "FLT-123", ["seat"])
    assert context is result.context, "the caller's object holds the run's writes"
    # the seat agent's instructions, made as it became active, saw the callback's write
    assert seat_model.calls[0].system == "Seat booking agent. Flight FLT-123, seat None."


@rg.tool(num_cpus=0)
def slow_write(ctx: rg.ToolContext) -> str:
    """Write after the other call of the batch did."""
    time.sleep(0.5)
    ctx.context["winner"] = "first call"
    ctx.context["seen"].append("slow")
    ctx.context["slow"] = True
    return "slow"


@rg.tool(num_cpus=0)
def quick_write(ctx: rg.ToolContext) -> str:
    ctx.context["winner"] = "second call"
    ctx.context["seen"].append("quick")
    ctx.context["quick"] = True
    return "quick"


def test_writes_of_one_batch_apply_in_call_order() -> None:
    """Both calls ran in parallel on the same context: both writes stay, appends add up,
    and on one field the later call in call order wins, though it finished first."""

    def reply(request: rg.ModelRequest) -> rg.ModelResponse:
        if request.messages[-1].role == "tool":
            return text("done")
        return calls(call("slow_write", {}, id="a"), call("quick_write", {}, id="b"))

    agent = rg.Agent("ctx_order", tools=[slow_write, quick_write], model=FunctionModel(reply))
    result = rg.run(agent, "go", context={"seen": []})
    assert result.context == {
        "seen": ["slow", "quick"],
        "winner": "second call",
        "slow": True,
        "quick": True,
    }


class Recorder(rg.RunHooks):
    """Agent hooks run in the agent's actor, on the run's own context object."""

    def on_tool_start(self, ctx: rg.RunContext, agent: rg.Agent, call: Any) -> None:
        ctx.context["hooked"] = ctx.context.get("hooked", 0) + 1

    def on_agent_end(self, ctx: rg.RunContext, agent: rg.Agent, output: Any) -> None:
        ctx.context["ended"] = True


@rg.tool(remote=False)
def in_actor(ctx: rg.ToolContext) -> str:
    ctx.context["local"] = "written in the actor"
    return "ok"


def test_hooks_and_in_actor_tools_write_the_same_context() -> None:
    agent = rg.Agent(
        "ctx_hooks",
        tools=[in_actor],
        hooks=Recorder(),
        model=ScriptedModel([calls(("in_actor", {})), text("done")]),
    )
    result = rg.run(agent, "go", context={})
    assert result.context == {"hooked": 1, "local": "written in the actor", "ended": True}


@rg.tool(num_cpus=0)
def count(ctx: rg.ToolContext) -> str:
    ctx.context["count"] = ctx.context.get("count", 0) + 1
    return str(ctx.context["count"])


def test_a_resumed_run_keeps_the_context_written_before_it_suspended() -> None:
    def reply(request: rg.ModelRequest) -> rg.ModelResponse:
        done = [m for m in request.messages if m.role == "tool"]
        if len(done) < 2:
            return calls(call("count", {}, id=f"c{len(done)}"))
        return text(",".join(m.text for m in done))

    slow = FunctionModel(reply, latency_s=0.3)
    agent = rg.Agent("ctx_resume", tools=[count], model=slow)
    handle = rg.start(agent, "count twice", context={"count": 0, "owner": "ann"})
    next(e for e in handle.events() if e.type == "tool_end")
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    result = rg.resume(handle.run_id, agent=agent).result(timeout_s=60)  # no context given
    assert result.final_output == "1,2", "the second call saw the first call's write"
    assert result.context == {"count": 2, "owner": "ann"}


def test_a_context_that_is_not_plain_data_is_refused_before_the_run() -> None:
    agent = rg.Agent("ctx_refused", model=ScriptedModel([]))
    with pytest.raises(rg.UserError, match=r"cannot be stored as plain data.*NotDurable"):
        rg.start(agent, "go", context={"lock": threading.Lock()})
    assert not [r for r in rg.runs() if r.agent_name == "ctx_refused"], "nothing started"
    too_big = {"blob": "x" * (rg.MAX_PAYLOAD_BYTES["run input"] + 1)}
    with pytest.raises(rg.PayloadTooLarge, match=r"run input \(the run context\)"):
        rg.start(agent, "go", context=too_big)


@rg.tool(remote=False)
def uses_client(ctx: rg.ToolContext) -> str:
    return type(ctx.context["client"]).__name__


def test_a_not_durable_context_runs_without_checkpoints_of_it() -> None:
    agent = rg.Agent(
        "ctx_not_durable",
        tools=[uses_client],
        model=ScriptedModel([calls(("uses_client", {})), text("done")]),
    )
    value = {"client": ClientLike()}
    result = rg.run(agent, "go", context=rg.NotDurable(value))
    assert next(m.text for m in result.messages if m.role == "tool") == "ClientLike"
    assert result.context is value


class ClientLike:
    """Not plain data (an object), but picklable."""


@rg.tool(num_cpus=0)
def breaks_context(ctx: rg.ToolContext) -> str:
    ctx.context["bad"] = ClientLike()
    return "wrote an object"


def test_a_tool_that_leaves_an_object_in_the_context_gets_an_error_result() -> None:
    agent = rg.Agent(
        "ctx_bad_write",
        tools=[breaks_context],
        model=ScriptedModel([calls(("breaks_context", {})), text("done")]),
    )
    result = rg.run(agent, "go", context={"ok": 1})
    tool = next(m for m in result.messages if m.role == "tool")
    assert "it wrote to the run context" in tool.text and "ClientLike" in tool.text
    assert result.context == {"ok": 1}, "the write was not taken"


@rg.tool(num_cpus=0)
def note(ctx: rg.ToolContext, text: str) -> str:
    ctx.context["notes"].append(text)
    return "noted"


def test_an_agent_tool_child_writes_the_parents_context() -> None:
    child = rg.Agent(
        "ctx_child",
        tools=[note],
        model=ScriptedModel([calls(("note", {"text": "from the child"})), text("child done")]),
    )
    parent = rg.Agent(
        "ctx_parent",
        tools=[child.as_tool()],
        model=ScriptedModel([calls(("ctx_child", {"input": "note it"})), text("parent done")]),
    )
    result = rg.run(parent, "go", context={"notes": ["start"]})
    assert result.context == {"notes": ["start", "from the child"]}


def test_attach_gives_the_final_context_too() -> None:
    from raygents.runtime.driver.client import current

    agent = rg.Agent(
        "ctx_attach",
        tools=[count],
        model=ScriptedModel([calls(("count", {})), text("done")]),
    )
    ran = rg.run(agent, "go", context={"count": 41})
    current().handles.pop(ran.run_id, None)  # (as another driver: from the run table)
    attached = rg.attach(ran.run_id).result(timeout_s=60)
    assert attached.context == ran.context == {"count": 42}
