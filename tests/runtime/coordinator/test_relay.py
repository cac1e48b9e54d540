"""The coordinator's relay on its own (no Ray): feeds, follows, wants of drivers, bounds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

import pytest

from raygents.core.events import RunEvent
from raygents.records.runinfo import RunInfo
from raygents.runtime.coordinator import relay as relay_module
from raygents.runtime.coordinator.relay import KEEP, EventRelay

T = TypeVar("T")


def _run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def ev(seq: int, kind: str = "llm_delta", run_id: str = "r1") -> RunEvent:
    fields = {"delta": f"d{seq}"} if kind == "llm_delta" else {}
    return RunEvent(type=kind, run_id=run_id, agent_name="a", seq=seq, **fields)  # type: ignore[arg-type]


def running(owner: str | None = "d1", events: int = 0) -> RunInfo:
    return RunInfo("r1", "running", "a", owner=owner, events=events)


def test_a_follower_gets_the_events_after_its_seq_then_the_end() -> None:
    async def main() -> None:
        relay = EventRelay()
        relay.open("r1")
        relay.append("r1", [ev(1), ev(2), ev(3)])
        reply = await relay.follow("r1", 1, 0.0)
        assert ([e.seq for e in reply.events], reply.state) == ([2, 3], "live")
        relay.append("r1", [ev(4, "complete")])
        reply = await relay.follow("r1", 3, 0.0)
        assert ([e.seq for e in reply.events], reply.state) == ([4], "ended")
        again = await relay.follow("r1", 4, 5.0)  # (a reconnect after the end: at once)
        assert (again.events, again.state) == ((), "ended")

    _run(main())


def test_a_waiting_follower_wakes_on_the_next_event() -> None:
    async def main() -> None:
        relay = EventRelay()
        relay.open("r1")
        follow = asyncio.ensure_future(relay.follow("r1", 0, 10.0))
        await asyncio.sleep(0.05)
        assert not follow.done()
        start = time.monotonic()
        relay.append("r1", [ev(1)])
        reply = await follow
        assert [e.seq for e in reply.events] == [1]
        assert time.monotonic() - start < 1.0

    _run(main())


def test_a_feed_keeps_the_newest_events_only_and_never_waits_for_followers() -> None:
    async def main() -> None:
        relay = EventRelay()
        relay.open("r1")
        stuck = asyncio.ensure_future(relay.follow("r1", 0, 10.0))  # (never asks again)
        await asyncio.sleep(0)
        for seq in range(1, 3 * KEEP + 1):
            relay.append("r1", [ev(seq)])
        feed = relay._feeds["r1"]
        assert len(feed.events) <= KEEP + KEEP // 4
        assert feed.events[-1].seq == 3 * KEEP
        late = await relay.follow("r1", 5, 0.0)  # (behind the oldest kept: a gap)
        assert late.events[0].seq is not None and late.events[0].seq > KEEP
        assert len(late.events) == relay_module.BATCH
        answer = await asyncio.wait_for(stuck, 1.0)  # (it was woken, and held nothing up)
        assert answer.events[0].seq is not None and answer.events[0].seq > KEEP

    _run(main())


def test_following_a_drivers_run_asks_its_driver_and_stops_at_the_end() -> None:
    async def main() -> None:
        relay = EventRelay()
        version, wants = await relay.wanted("d1", 0, 0.0)
        assert wants == {}
        follow = asyncio.ensure_future(relay.follow("r1", 0, 10.0, running()))
        version, wants = await relay.wanted("d1", version, 10.0)
        assert list(wants) == ["r1"] and wants["r1"][1] == 0
        relay.publish("d2", {"r1": [ev(1)]})  # (not its driver: ignored)
        relay.publish("d1", {"r1": [ev(1), ev(2)]})
        reply = await follow
        assert ([e.seq for e in reply.events], reply.state) == ([1, 2], "live")
        relay.publish("d1", {"r1": [ev(3, "suspended")]})
        version, wants = await relay.wanted("d1", version, 0.0)
        assert wants == {}  # (it ended: the driver stops sending)
        reply = await relay.follow("r1", 2, 0.0)
        assert ([e.type for e in reply.events], reply.state) == (["suspended"], "ended")

    _run(main())


def test_a_driver_that_never_answers_leaves_the_follower_waiting_then_none() -> None:
    async def main() -> None:
        relay = EventRelay()
        reply = await relay.follow("r1", 0, 0.05, running())
        assert (reply.events, reply.state) == ((), "waiting")
        ended = RunInfo("r1", "failed", "a", owner="d1")
        reply = await relay.follow("r1", 0, 0.05, ended)
        assert reply.state == "none"
        assert (await relay.wanted("d1", 0, 0.0))[1] == {}

    _run(main())


def test_an_ended_run_without_a_feed_has_none() -> None:
    async def main() -> None:
        relay = EventRelay()
        done = RunInfo("r1", "completed", "a", events=7)
        assert (await relay.follow("r1", 0, 1.0, done)).state == "none"
        assert (await relay.follow("r2", 0, 1.0, None)).state == "none"

    _run(main())


def test_a_resumed_run_numbers_on_and_its_old_drive_goes() -> None:
    async def main() -> None:
        relay = EventRelay()
        follow = asyncio.ensure_future(relay.follow("r1", 0, 10.0, running()))
        await asyncio.sleep(0)
        relay.publish("d1", {"r1": [ev(1), ev(2, "interrupted")]})
        assert (await follow).state == "ended"
        again = running(owner="d2", events=2)  # (resumed by another driver, after seq 2)
        follow = asyncio.ensure_future(relay.follow("r1", 0, 10.0, again))
        _, wants = await relay.wanted("d2", 0, 10.0)
        assert wants["r1"][1] == 2
        relay.publish("d2", {"r1": [ev(3), ev(4)]})
        reply = await follow
        assert ([e.seq for e in reply.events], reply.state) == ([3, 4], "live")

    _run(main())


def test_a_feed_nobody_follows_goes_and_its_driver_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def main() -> None:
        relay = EventRelay()
        await relay.follow("r1", 0, 0.0, running())
        version, wants = await relay.wanted("d1", 0, 0.0)
        assert list(wants) == ["r1"]
        monkeypatch.setattr(relay_module, "IDLE_S", 0.0)
        relay._swept = 0.0
        version, wants = await relay.wanted("d1", version, 0.0)
        assert wants == {} and not relay.live("r1")

    _run(main())


def test_ended_feeds_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        monkeypatch.setattr(relay_module, "ENDED_FEEDS", 3)
        relay = EventRelay()
        for i in range(6):
            relay.open(f"r{i}")
            relay.append(f"r{i}", [ev(1, "complete", run_id=f"r{i}")])
        relay._swept = 0.0
        await relay.wanted("d1", -1, 0.0)  # (any call sweeps)
        assert sorted(relay._feeds) == ["r3", "r4", "r5"]

    _run(main())
