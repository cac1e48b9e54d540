"""Suspend requests travel to an actor in batches (no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

from fakes import FakeHandle

from raygents.errors import CANCEL
from raygents.runtime.link.drive import SuspendToken


class _Actor:
    """An agent actor that only takes suspend requests."""

    def suspend(self, requests: list[tuple[str, str]]) -> None:
        pass


def _actor(actor_id: str) -> FakeHandle:
    return FakeHandle(_Actor(), actor_id=actor_id, fire_and_forget=True)


def _sent(actor: FakeHandle) -> list[list[tuple[str, str]]]:
    return [list(requests) for (requests,) in actor.calls["suspend"]]


def _tokens(actor: Any, n: int) -> list[SuspendToken]:
    tokens = [SuspendToken(f"run-{i}") for i in range(n)]
    for token in tokens:
        token.actor = actor
    return tokens


async def test_requests_of_one_loop_turn_go_in_one_call_per_actor() -> None:
    a, b = _actor("a"), _actor("b")
    for token in _tokens(a, 3) + _tokens(b, 2):
        token.request("stop")
    assert _sent(a) == [] and _sent(b) == []  # sent at the loop's next turn
    await asyncio.sleep(0)
    assert _sent(a) == [[("run-0", "stop"), ("run-1", "stop"), ("run-2", "stop")]]
    assert _sent(b) == [[("run-0", "stop"), ("run-1", "stop")]]
    _tokens(a, 1)[0].request("again")
    await asyncio.sleep(0)
    assert _sent(a)[1:] == [[("run-0", "again")]]


def test_the_first_cause_sticks_and_a_request_off_a_loop_goes_at_once() -> None:
    actor = _actor("a")
    token = _tokens(actor, 1)[0]
    token.request("first")
    token.request("second")
    assert token.cause == "first"
    assert _sent(actor) == [[("run-0", "first")]]


def test_a_request_goes_once_with_its_dispatchs_epoch_and_a_cancel_after_it() -> None:
    """A copy sent again could reach the actor after the run left it, and wait there for
    its next dispatch; the epoch keeps it from suspending one that comes later."""
    actor = _actor("a")
    token = _tokens(actor, 1)[0]
    token.epoch = 3
    token.request("stop")
    token.request("stop")
    token.request(CANCEL)
    token.request(CANCEL)
    assert _sent(actor) == [[("run-0", "stop", 3)], [("run-0", CANCEL, 3)]]


def test_a_loop_that_stopped_before_sending_does_not_hold_later_requests() -> None:
    actor = _actor("a")

    loop = asyncio.new_event_loop()

    def unsent() -> None:
        _tokens(actor, 1)[0].request("lost with its loop")
        loop.stop()  # the loop ends before its next turn, which would send it

    loop.call_soon(unsent)
    loop.run_forever()
    loop.close()

    async def later() -> None:
        _tokens(actor, 1)[0].request("stop")
        await asyncio.sleep(0)

    asyncio.run(later())
    assert _sent(actor) == [[("run-0", "stop")]]


def test_a_cancel_wins_over_an_earlier_suspend_and_stays() -> None:
    token = SuspendToken("r")
    token.request("drain")
    token.request(CANCEL)
    assert token.cause == CANCEL
    token.request("drain")
    assert token.cause == CANCEL
