"""The agent actor's Ray API, on the actor class in this process (no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fakes import FakeHandle

import raygents as rg
from raygents.core.envelope import Envelope, Outcome, RunState
from raygents.core.messages import to_messages
from raygents.runtime.actor.actor import AgentActor
from raygents.runtime.link.mailbox import unpack
from raygents.runtime.link.settings import Settings
from raygents.testing import ScriptedModel, text


def _actor() -> AgentActor:
    agent = rg.Agent("outboxed", model=ScriptedModel([text("x")]))
    return AgentActor({"outboxed": agent}, "outboxed", "fp", "ns")


async def _take(actor: AgentActor, *args: Any) -> tuple[str, list[tuple[str, Any]]]:
    instance, blob = await actor.take(*args)
    return instance, unpack(blob)


async def test_a_take_answers_with_the_actors_incarnation() -> None:
    actor, other = _actor(), _actor()
    me, items = await _take(actor, "c", 0.01)
    assert items == [] and me != (await _take(other, "c", 0.01))[0]
    assert (await _take(actor, "c", 0.01, me))[0] == me


async def test_a_take_from_a_caller_that_saw_another_incarnation_returns_at_once() -> None:
    actor = _actor()
    me, items = await asyncio.wait_for(_take(actor, "c", 600.0, "an-older-one"), 30)
    assert me != "an-older-one" and items == []


async def test_a_run_whose_task_raises_still_sends_a_failed_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug in the actor's run code must not leave the caller waiting for an outcome."""
    actor = _actor()

    async def broken(*args: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(actor, "_run", broken)
    state = RunState(run_id="r1", agent_name="outboxed", messages=to_messages("hi"))
    me = await actor.start([Envelope(state, "fp", None)], "c")
    _, items = await _take(actor, "c", 600.0, me)
    [(run_id, outcome)] = items
    assert run_id == "r1" and isinstance(outcome, Outcome) and outcome.kind == "failed"
    assert "boom" in str(outcome.error)


class _Coordinator:
    """What a run that needs no record asks of the coordinator."""

    def settings(self) -> Settings:
        return Settings()


async def test_a_run_completes_and_its_outcome_reaches_the_caller() -> None:
    agent = rg.Agent("outboxed", model=ScriptedModel([text("x")]))
    actor = AgentActor(
        {"outboxed": agent}, "outboxed", "fp", "ns", coordinator=FakeHandle(_Coordinator())
    )
    actor._beater = object()  # type: ignore[assignment]  # (no beats outside Ray)
    actor.writer.use_store(None)  # (records through the coordinator: no Ray node to ask)
    state = RunState(run_id="r1", agent_name="outboxed", messages=to_messages("hi"))
    me = await actor.start([Envelope(state, "fp", None)], "c")
    items: list[tuple[str, Any]] = []
    while not items or not isinstance(items[-1][1], Outcome):
        items += (await _take(actor, "c", 600.0, me))[1]
    events = [e.type for _, batch in items[:-1] for e in batch]
    run_id, outcome = items[-1]
    assert run_id == "r1" and outcome.kind == "completed" and outcome.output == "x"
    assert events == ["agent_start", "agent_end"]


async def test_a_suspend_request_for_a_run_not_here_yet_waits_for_it() -> None:
    actor = _actor()
    await actor.suspend([("r1", "drain")])
    assert actor._early["r1"][0] == "drain"


async def test_a_request_waiting_for_a_run_holds_only_for_the_dispatch_it_was_made_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    actor = _actor()
    asked: dict[str, str | None] = {}

    async def run(envelope: Envelope, token: Any, emit: Any) -> Outcome:
        asked[envelope.state.run_id] = token.cause
        return Outcome("completed", envelope.state, output="x")

    monkeypatch.setattr(actor, "_run", run)
    await actor.suspend([("r1", "drain", 1)])  # (it came after the run's epoch 1 left here)
    await actor.suspend([("r2", "drain", 2)])  # (asked as epoch 2 was on its way here)
    await actor.suspend([("r3", "drain")])  # (of no dispatch in particular)
    for run_id in ("r1", "r2", "r3"):
        state = RunState(run_id=run_id, agent_name="outboxed", messages=to_messages("hi"), epoch=2)
        me = await actor.start([Envelope(state, "fp", None)], "c")
        await _take(actor, "c", 600.0, me)
    assert asked == {"r1": None, "r2": "drain", "r3": "drain"} and actor._early == {}
