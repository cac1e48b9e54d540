"""How an attached handle takes a run's events from the relay (no Ray: a scripted coordinator):
in order, a gap in the numbers said with a ``lagged`` event, and where it stops."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from raygents.core.events import RunEvent
from raygents.runtime.driver import attach
from raygents.runtime.driver.handle import RunHandle
from raygents.runtime.link.drive import SuspendToken
from raygents.runtime.link.follow import Follow


class Relay:
    """The coordinator's ``relay_follow``, answering from a script; records each ``after``."""

    def __init__(self, *replies: Follow) -> None:
        self.replies = list(replies)
        self.asked: list[tuple[int, float]] = []

    async def relay_follow(self, run_id: str, after: int, wait_s: float) -> Follow:
        self.asked.append((after, wait_s))
        return self.replies.pop(0)


def ev(seq: int, kind: str = "llm_delta") -> RunEvent:
    return RunEvent(type=kind, run_id="r1", agent_name="a", seq=seq)  # type: ignore[arg-type]


def follow(*replies: Follow) -> tuple[bool | None, list[RunEvent], Relay]:
    relay = Relay(*replies)
    rt: Any = SimpleNamespace(directory=SimpleNamespace(client=relay))
    handle = RunHandle("r1", rt, SuspendToken("r1"))
    got = asyncio.run(attach._relay(rt, handle))
    return got, handle.events().snapshot(), relay


def test_events_come_in_order_and_a_gap_is_a_lagged_event() -> None:
    got, events, relay = follow(
        Follow((ev(1), ev(2)), "live"),
        Follow((), "live"),
        Follow((ev(7), ev(8, "complete")), "live"),
    )
    assert got is True
    assert [(e.type, e.seq) for e in events] == [
        ("llm_delta", 1),
        ("llm_delta", 2),
        ("lagged", None),
        ("llm_delta", 7),
        ("complete", 8),
    ]
    assert events[2].data == {"missed": [3, 6]}
    assert [after for after, _ in relay.asked] == [0, 2, 2]
    assert relay.asked[0][1] < relay.asked[1][1]  # (the first ask waits less)


def test_a_feed_that_ended_before_the_seq_asked_for_stops_at_once() -> None:
    got, events, _ = follow(Follow((), "ended"))
    assert (got, events) == (True, [])


def test_no_feed_and_a_silent_driver_are_told_apart() -> None:
    assert follow(Follow((), "none"))[0] is None
    got, events, _ = follow(Follow((), "waiting"))
    assert (got, events) == (False, [])
    got, events, _ = follow(Follow((ev(1),), "waiting"), Follow((ev(2, "error"),), "live"))
    assert got is True and [e.seq for e in events] == [1, 2]  # (it answered meanwhile)
