"""Idle agent actors retire (``init(idle_actor_s=)``): the coordinator stops handing them out,
they exit, and the agent's next run gets a fresh actor; what keeps an actor, and a run sent to
one as it retires, which goes to the next actor in the same dispatch (no recovery)."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from actors import cached_actor

import raygents as rg
from raygents.runtime.driver.client import current
from raygents.runtime.link.handles import actor_key
from raygents.testing import FunctionModel, call, calls, text

IDLE_S = 1.0


def own_namespace(idle_actor_s: float | None) -> None:
    """raygents on a namespace of its own whose idle agent actors retire after
    ``idle_actor_s``."""
    rg.shutdown()
    rg.init(namespace=f"idle-{os.urandom(3).hex()}", store="memory://", idle_actor_s=idle_actor_s)


@pytest.fixture
def idle(own_raygents: None, rt: None) -> None:
    own_namespace(IDLE_S)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


def pid_model(latency_s: float = 0.0) -> FunctionModel:
    """Answers with the process id of the actor that called it."""
    return FunctionModel(lambda req: text(str(os.getpid())), latency_s=latency_s)


def run_pid(agent: rg.Agent) -> tuple[int, rg.RunHandle]:
    handle = rg.start(agent, "x")
    return int(handle.result(timeout_s=60).final_output), handle


def one_dispatch(handle: rg.RunHandle) -> None:
    """The run completed in its first dispatch: no recovery, no new epoch."""
    types = [event.type for event in handle.events()]
    assert "recovered" not in types, types
    (info,) = [i for i in rg.runs() if i.run_id == handle.run_id]
    assert info.attempts == 1, info


def test_an_idle_actor_retires_and_the_next_run_gets_a_fresh_one(idle: None) -> None:
    agent = rg.Agent("idle_basic", model=pid_model())
    first, _ = run_pid(agent)
    assert gone_within(first, 20 * IDLE_S), "the idle actor exits"
    second, handle = run_pid(agent)  # (this driver still holds the retired actor's handle)
    assert second != first and alive(second)
    one_dispatch(handle)


def test_a_run_in_flight_keeps_its_actor_and_so_does_a_parent_waiting_for_its_child(
    idle: None,
) -> None:
    """A model call, and an agent-as-tool child, each longer than the idle time."""
    child = rg.Agent("idle_child", model=pid_model(latency_s=3 * IDLE_S))
    pids: list[int] = []

    def parent_reply(req: rg.ModelRequest) -> rg.ModelResponse:
        pids.append(os.getpid())
        if not any(m.role == "tool" for m in req.messages):
            return calls(call("idle_child", {"input": "go"}, id="c1"))
        return text(f"{pids[0]} {os.getpid()}")

    parent = rg.Agent("idle_parent", tools=[child.as_tool()], model=FunctionModel(parent_reply))
    handle = rg.start(parent, "x")
    before, after = handle.result(timeout_s=60).final_output.split()
    assert before == after, "the parent's actor stayed while it waited for its child"
    one_dispatch(handle)
    slow = rg.Agent("idle_slow", model=pid_model(latency_s=3 * IDLE_S))
    pid, handle = run_pid(slow)
    one_dispatch(handle)
    assert gone_within(pid, 20 * IDLE_S), "idle once the run ended: it retires"


@rg.tool(num_cpus=0, needs_approval=True)
def wipe(target: str) -> str:
    """Wipe a target."""
    return f"wiped {target}"


def test_a_run_awaiting_approval_resumes_on_a_fresh_actor_after_its_own_retired(
    idle: None,
) -> None:
    """A parked run left nothing on its actor (its state is in its checkpoint): the actor
    retires like any idle one, and the resume finds the agent's next actor."""

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = [m.text for m in req.messages if m.role == "tool"]
        if not done:
            return calls(call("wipe", {"target": "db"}, id="c_wipe"))
        return text(f"{done[0]} by {os.getpid()}")

    agent = rg.Agent("idle_approval", tools=[wipe], model=FunctionModel(reply))
    handle = rg.start(agent, "x")
    with pytest.raises(rg.RunInterrupted):
        handle.result(timeout_s=60)
    parked_on = cached_actor("idle_approval")
    pid = current().ask(_pid_of(parked_on))
    assert gone_within(pid, 20 * IDLE_S)
    resumed = rg.resume(handle.run_id, agent=agent, approvals={"c_wipe": True})
    output = resumed.result(timeout_s=60).final_output
    assert output.startswith("wiped db by ") and int(output.split()[-1]) != pid
    assert "recovered" not in [event.type for event in resumed.events()]


async def _pid_of(actor: Any) -> int:
    return int(await actor.ping.remote())


def test_a_run_sent_to_an_actor_as_it_retires_goes_to_the_next_in_the_same_dispatch(
    idle: None,
) -> None:
    """The driver still holds the actor's handle when the actor, idle, has told the
    coordinator it retires and refuses runs (its grace before it exits): the run goes to a
    fresh actor with its first epoch, never through recovery."""
    agent = rg.Agent("idle_race", model=pid_model())
    first, _ = run_pid(agent)
    retiring = cached_actor("idle_race")
    client = current().directory.client
    deadline = time.monotonic() + 20 * IDLE_S
    while not current().ask(client.actor_retired(actor_key(retiring))):
        assert time.monotonic() < deadline, "the idle actor never retired"
        time.sleep(0.05)
    assert alive(first), "sent while the retiring actor is still there"
    second, handle = run_pid(agent)
    assert second != first
    one_dispatch(handle)
    assert gone_within(first, 20 * IDLE_S)


def test_without_an_idle_time_actors_stay(own_raygents: None, rt: None) -> None:
    own_namespace(None)
    agent = rg.Agent("idle_never", model=pid_model())
    first, _ = run_pid(agent)
    time.sleep(3 * IDLE_S)
    second, _ = run_pid(agent)
    assert second == first and alive(first)


ADOPT_IDLE_S = 8.0
"""The idle time for the adoption tests: an actor idle for 2 s may take another agent."""


@pytest.fixture
def adopting(own_raygents: None, rt: None) -> None:
    own_namespace(ADOPT_IDLE_S)


def test_an_idle_actor_serves_the_next_agent_instead_of_a_new_process(adopting: None) -> None:
    """An actor idle for a quarter of ``idle_actor_s`` takes an agent that has none; the
    agent it served before gets another actor, and this driver's handle for it (older than the
    switch) is refused and looked up again, with no recovery."""
    first = rg.Agent("adopt_first", model=pid_model())
    second = rg.Agent("adopt_second", model=pid_model())
    pid, _ = run_pid(first)
    time.sleep(ADOPT_IDLE_S / 4 + 0.5)
    took, handle = run_pid(second)
    assert took == pid, "the idle actor took the second agent"
    one_dispatch(handle)
    again, handle = run_pid(first)  # (this driver still holds the first agent's old handle)
    assert again != pid and alive(pid)
    one_dispatch(handle)
    still, _ = run_pid(second)
    assert still == pid, "the second agent keeps its actor"


def test_an_actor_with_a_run_in_flight_or_idle_briefly_serves_no_other_agent(
    adopting: None,
) -> None:
    slow = rg.Agent("adopt_slow", model=pid_model(latency_s=ADOPT_IDLE_S / 4 + 1.5))
    handle = rg.start(slow, "x")
    time.sleep(ADOPT_IDLE_S / 4 + 0.5)
    other, _ = run_pid(rg.Agent("adopt_other", model=pid_model()))
    third, _ = run_pid(rg.Agent("adopt_third", model=pid_model()))  # (the slow run goes on)
    slow_pid = int(handle.result(timeout_s=60).final_output)
    assert other != slow_pid, "busy: a new actor for the other agent"
    assert third not in (other, slow_pid), "one busy, the other idle for less than 2 s"
    one_dispatch(handle)
