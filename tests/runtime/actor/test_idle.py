"""An agent actor's idleness (no Ray): what keeps it, the clock runs and ends reset, the wait
before it retires, and what ``start`` answers once it retires."""

from __future__ import annotations

import asyncio
import time

import pytest

import raygents as rg
from raygents.core.envelope import Envelope, RunState
from raygents.core.messages import Message
from raygents.errors import UserError
from raygents.runtime.actor.actor import AgentActor
from raygents.runtime.actor.idle import Idleness, holds, watch
from raygents.runtime.actor.outbox import _OUTBOX_IDLE_S, Outboxes
from raygents.runtime.link.mailbox import RETIRED
from raygents.testing import ScriptedModel, text


async def test_runs_undelivered_items_and_fresh_early_suspends_keep_an_actor() -> None:
    outboxes = Outboxes()
    assert not holds({}, outboxes, {}, 60.0)
    assert holds({"r1": object()}, outboxes, {}, 60.0), "a run in flight"
    now = time.monotonic()
    assert holds({}, outboxes, {"r2": ("stop", now, None)}, 60.0), "a run may be on its way"
    assert not holds({}, outboxes, {"r2": ("stop", now - 61, None)}, 60.0), "an old request"
    outboxes.get("caller").post("r1", [])
    assert holds({}, outboxes, {}, 60.0), "its caller has not taken it yet"
    outboxes.get("caller").taken -= _OUTBOX_IDLE_S + 1
    assert not holds({}, outboxes, {}, 60.0), "a caller that stopped taking is gone"


async def test_the_wait_restarts_while_the_actor_is_busy_and_after_each_run() -> None:
    now, busy = [100.0], [True]
    idleness = Idleness(lambda: busy[0], clock=lambda: now[0])
    waiting = asyncio.ensure_future(watch(idleness, 0.05))
    await asyncio.sleep(0.1)
    now[0] += 10
    await asyncio.sleep(0.1)
    assert not waiting.done() and idleness.idle_for() == 0, "busy the whole time"
    busy[0] = False
    now[0] += 0.04
    await asyncio.sleep(0.1)
    assert not waiting.done(), "idle for less than 0.05 s since it was last busy"
    idleness.touch()  # a run came and went
    now[0] += 0.04
    await asyncio.sleep(0.1)
    assert not waiting.done(), "idle for less than 0.05 s since the last run"
    now[0] += 0.02
    await asyncio.wait_for(waiting, 5.0)
    assert idleness.idle_for() == pytest.approx(0.06)


async def test_a_retiring_actor_takes_no_run() -> None:
    agent = rg.Agent("solo", model=ScriptedModel([text("hi")]))
    actor = AgentActor({"solo": agent}, "solo", "fp", "ns", coordinator=object())
    actor.retiring = True
    state = RunState(run_id="r1", agent_name="solo", messages=(Message("user", "hi"),))
    assert await actor.start([Envelope(state, "fp")], "caller") == RETIRED
    assert not actor._active and not actor._runs, "it took none of them"


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "60", True])
def test_init_refuses_a_bad_idle_time_before_it_starts_anything(value: object) -> None:
    with pytest.raises(UserError, match="idle_actor_s must be a positive number of seconds"):
        rg.init(idle_actor_s=value)  # type: ignore[arg-type]


def _actor(name: str = "solo") -> AgentActor:
    agent = rg.Agent(name, model=ScriptedModel([text("hi")]))
    return AgentActor({name: agent}, name, "fp", "ns", coordinator=object())


def _envelope(agent_name: str, graph_fp: str) -> Envelope:
    state = RunState(run_id="r1", agent_name=agent_name, messages=(Message("user", "hi"),))
    return Envelope(state, graph_fp)


def _graph(name: str) -> bytes:
    from ray import cloudpickle

    return cloudpickle.dumps({name: rg.Agent(name, model=ScriptedModel([text("hi")]))})


async def test_an_idle_actor_takes_another_agent_and_refuses_runs_for_the_one_before() -> None:
    actor = _actor()
    assert actor.adopt(_graph("other"), "other", "fp2", {"other": "d2"}, 0.0)
    assert (actor.bound.agent.name, actor.bound.graph_fp) == ("other", "fp2")
    assert set(actor.bound.graph) == {"other"} and actor.bound.toolbox.agent is actor.bound.agent
    assert actor.adopt(_graph("third"), "third", "fp3", {"third": "d3"}, 0.0)
    assert set(actor.directory.graphs) == {"fp3"}, "only the graph it serves is kept"
    assert actor.directory.graphs["fp3"][2] == {"third": "d3"}, "registered again on restart"
    assert actor.adopt(_graph("other"), "other", "fp2", {"other": "d2"}, 0.0)
    assert await actor.start([_envelope("solo", "fp")], "caller") == RETIRED, "a stale caller"
    assert await actor.start([_envelope("other", "fp1")], "caller") == RETIRED, "another graph"
    assert not actor._active and not actor._runs, "it took none of them"
    assert actor._serves(_envelope("other", "fp2"))
    await actor.retire(serving=("fp", "solo"))  # (meant for what it served before: ignored)
    assert not actor._leaving


async def test_an_actor_takes_no_other_agent_unless_idle_long_enough_and_staying() -> None:
    actor = _actor()
    assert not actor.adopt(_graph("other"), "other", "fp2", None, 60.0), "idle for less"
    actor.retiring = True
    assert not actor.adopt(_graph("other"), "other", "fp2", None, 0.0), "it retires"
    actor = _actor()
    actor._leaving = True
    assert not actor.adopt(_graph("other"), "other", "fp2", None, 0.0), "told to retire"
    actor = _actor()
    actor._active["r9"] = object()  # type: ignore[assignment]
    assert not actor.adopt(_graph("other"), "other", "fp2", None, 0.0), "a run in flight"
    actor = _actor()
    assert actor.adopt(_graph("kept"), "kept", "fp1", None, 0.0)
    assert not actor.adopt(b"not a pickle", "other", "fp2", None, 0.0), "cannot load it"
    assert not actor.adopt(_graph("other"), "missing", "fp2", None, 0.0), "not in the graph"
    assert (actor.bound.agent.name, actor.bound.graph_fp) == ("kept", "fp1"), (
        "it still serves its own"
    )
    assert set(actor.directory.graphs) == {"fp1"} and set(actor.bound.graph) == {"kept"}


async def test_an_actor_whose_agent_holds_mcp_connections_takes_no_other() -> None:
    agent = rg.Agent("mcp_user", model=ScriptedModel([text("hi")]))
    agent.mcp_servers = [object()]
    actor = AgentActor({"mcp_user": agent}, "mcp_user", "fp", "ns", coordinator=object())
    assert not actor.adopt(_graph("other"), "other", "fp2", None, 0.0)
