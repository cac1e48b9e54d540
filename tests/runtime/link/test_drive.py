"""Driving a run from the caller's side, against a scripted coordinator and actor (no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray.exceptions
from fakes import FakeHandle

from raygents.core.envelope import Envelope, RunState
from raygents.core.messages import Message
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.drive import SuspendToken, drive
from raygents.runtime.link.mailbox import RETIRED
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


class _Retiring:
    """An actor that retires: it refuses runs, or it is gone (Ray's error for a call to it)."""

    def __init__(self, gone: bool) -> None:
        self.gone = gone

    def start(self, envelopes: list[Envelope], caller: str) -> str:
        if self.gone:
            raise ray.exceptions.ActorDiedError()
        return RETIRED

    def ping(self) -> int:
        return 1


class _Registry:
    """Hands out the retiring actor until it is reported, then the next one; knows which
    actors retired, and records claims (a recovery's)."""

    def __init__(self, retiring: FakeHandle, successor: FakeHandle, retired: bool) -> None:
        self.handles = [retiring]
        self.successor = successor
        self.retired = {"old"} if retired else set()
        self.claims: list[Any] = []

    def settings(self) -> Settings:
        return Settings(recovery=Recovery(attempts=1, backoff_s=0.0))

    def agent_actors(self, graph_fp: str, name: str) -> list[Any]:
        return self.handles

    def actor_retiring(self, graph_fp: str, name: str, actor_id: str) -> None:
        self.retired.add(actor_id)
        self.handles = [self.successor]

    def actor_retired(self, actor_id: str) -> bool:
        if actor_id in self.retired:
            self.handles = [self.successor]
        return actor_id in self.retired

    def claim_many(self, claims: list[Any]) -> list[Any]:
        self.claims.extend(claims)
        self.handles = [self.successor]
        return [(None, 2) for _ in claims]

    def load(self, run_id: str) -> list[bytes]:
        return []  # (nothing durable: the run starts over from its input)


async def _drive_past(retiring: _Retiring, retired: bool) -> tuple[_Actor, _Registry]:
    successor = _Actor()
    registry = _Registry(
        FakeHandle(retiring, actor_id="old"), FakeHandle(successor, actor_id="new"), retired
    )
    directory = Directory("ns", FakeHandle(registry, actor_id="coordinator"))
    envelope = _envelope()
    envelope.state = envelope.state.evolve(epoch=1)
    with pytest.raises(_Stop):
        await asyncio.wait_for(
            drive(
                envelope,
                directory,
                SuspendToken("r1"),
                lambda event: None,
                client=directory.client,
                mailboxes=directory.mailboxes,
            ),
            5,
        )
    await asyncio.wait(directory.stop_watches(), timeout=1)
    return successor, registry


@pytest.mark.parametrize("gone", [False, True], ids=["refused", "gone"])
async def test_a_run_sent_to_a_retiring_actor_goes_to_the_next_in_the_same_dispatch(
    gone: bool,
) -> None:
    """The caller's handle names an actor that retires: it refuses the run, or it exited and
    the coordinator says it retired. The run goes to the agent's next actor as it was, with
    its epoch: no claim, no recovery."""
    successor, registry = await _drive_past(_Retiring(gone), retired=gone)
    assert [e.state.epoch for e in successor.started] == [1]
    assert not successor.started[0].resumed
    assert registry.claims == [] and registry.retired == {"old"}


async def test_a_lost_actor_that_did_not_retire_is_recovered_with_a_new_epoch() -> None:
    successor, registry = await _drive_past(_Retiring(gone=True), retired=False)
    assert [claim[0] for claim in registry.claims] == ["r1"]
    assert [e.state.epoch for e in successor.started] == [2]
