"""Suspend requests travel to an actor in batches (no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

from raygents.runtime.drive import SuspendToken


class _Suspend:
    def __init__(self) -> None:
        self.calls: list[list[tuple[str, str]]] = []

    def remote(self, requests: list[tuple[str, str]]) -> None:
        self.calls.append(list(requests))


class _Actor:
    def __init__(self, actor_id: str) -> None:
        self._actor_id = actor_id
        self.suspend = _Suspend()


def _tokens(actor: Any, n: int) -> list[SuspendToken]:
    tokens = [SuspendToken(f"run-{i}") for i in range(n)]
    for token in tokens:
        token.actor = actor
    return tokens


def test_requests_of_one_loop_turn_go_in_one_call_per_actor() -> None:
    a, b = _Actor("a"), _Actor("b")

    async def main() -> None:
        for token in _tokens(a, 3) + _tokens(b, 2):
            token.request("stop")
        assert a.suspend.calls == [] and b.suspend.calls == []  # sent at the loop's next turn
        await asyncio.sleep(0)
        assert a.suspend.calls == [[("run-0", "stop"), ("run-1", "stop"), ("run-2", "stop")]]
        assert b.suspend.calls == [[("run-0", "stop"), ("run-1", "stop")]]
        _tokens(a, 1)[0].request("again")
        await asyncio.sleep(0)
        assert a.suspend.calls[1:] == [[("run-0", "again")]]

    asyncio.run(main())


def test_the_first_cause_sticks_and_a_request_off_a_loop_goes_at_once() -> None:
    actor = _Actor("a")
    token = _tokens(actor, 1)[0]
    token.request("first")
    token.request("second")
    assert token.cause == "first"
    assert actor.suspend.calls == [[("run-0", "first")], [("run-0", "first")]]


def test_a_loop_that_stopped_before_sending_does_not_hold_later_requests() -> None:
    actor = _Actor("a")

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
    assert actor.suspend.calls == [[("run-0", "stop")]]
