"""Driving a run from the caller's side, against a scripted coordinator and actor (no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fakes import FakeHandle

from raygents.core.envelope import Envelope, RunState
from raygents.core.messages import Message
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.drive import SuspendToken, drive
from raygents.runtime.link.settings import Recovery, Settings


class _Stop(Exception):
    """Ends the drive once the actor got its start."""


class _Actor:
    def __init__(self) -> None:
        self.started: list[Envelope] = []

    def start(self, envelopes: list[Envelope], caller: str) -> str:
        self.started.extend(envelopes)
        raise _Stop("started")

    def ping(self) -> int:
        return 1


class _Coordinator:
    """Hands out one actor, once ``ready`` is set (an actor being created)."""

    def __init__(self, actor: FakeHandle) -> None:
        self.actor = actor
        self.ready = asyncio.Event()

    def settings(self) -> Settings:
        return Settings(recovery=Recovery(heartbeat_s=5.0, stale_after_s=10.0))

    async def agent_actors(self, graph_fp: str, name: str) -> list[Any]:
        await self.ready.wait()
        return [self.actor]


def _envelope() -> Envelope:
    state = RunState(run_id="r1", agent_name="a", messages=(Message("user", "hi"),))
    return Envelope(state, "fp")


@pytest.mark.parametrize("when", ["before", "while the actor is looked up"])
async def test_a_suspend_asked_before_the_run_reaches_its_actor_goes_with_it(when: str) -> None:
    actor = _Actor()
    coordinator = _Coordinator(FakeHandle(actor, actor_id="agent-actor"))
    directory = Directory("ns", FakeHandle(coordinator, actor_id="coordinator"))
    token = SuspendToken("r1")
    if when == "before":
        token.request("stop")
        coordinator.ready.set()
    driving = asyncio.ensure_future(
        drive(
            _envelope(),
            directory,
            token,
            lambda event: None,
            client=directory.client,
            mailboxes=directory.mailboxes,
        )
    )
    if when != "before":
        await asyncio.sleep(0.05)  # the drive waits for its actor
        token.request("stop")
        coordinator.ready.set()
    with pytest.raises(_Stop):
        await asyncio.wait_for(driving, 5)
    assert [e.suspend_cause for e in actor.started] == ["stop"]
    await asyncio.wait(directory.stop_watches(), timeout=1)
