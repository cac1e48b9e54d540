"""The agent actor's side of run mailboxes: outboxes and relays (no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raygents.core.envelope import Envelope, Outcome, RunState
from raygents.core.messages import to_messages
from raygents.runtime.actor import outbox as outbox_module
from raygents.runtime.actor.outbox import Outboxes, Relay
from raygents.runtime.link.mailbox import unpack


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _take(boxes: Outboxes, caller: str, wait_s: float) -> list[tuple[str, Any]]:
    """A take, its items unpacked as the caller's mailbox does."""
    blob = await boxes.take(caller, wait_s, wait=True)
    assert isinstance(blob, bytes)
    return unpack(blob)


def _envelope(run_id: str, stream: bool) -> Envelope:
    state = RunState(run_id=run_id, agent_name="outboxed", messages=to_messages("hi"))
    return Envelope(state, "fp", None, stream=stream)


async def test_a_take_waits_for_items_and_hands_each_over_once() -> None:
    boxes = Outboxes()
    assert await _take(boxes, "c", 0.01) == []  # nothing: it waited, then answered empty
    taking = asyncio.ensure_future(_take(boxes, "c", 600.0))
    await _settle()
    assert not taking.done()
    outbox = boxes.get("c")
    outbox.post("r1", ["e1"])
    outbox.post("r2", ["e2"])
    assert await asyncio.wait_for(taking, 30) == [("r1", ["e1"]), ("r2", ["e2"])]
    assert await _take(boxes, "c", 0.01) == []
    assert "c" not in boxes  # no runs, nothing left: forgotten


async def test_a_take_that_must_not_wait_returns_at_once() -> None:
    boxes = Outboxes()
    boxes.get("c").post("r1", ["lazy"], urgent=False)
    blob = await asyncio.wait_for(boxes.take("c", 600.0, wait=False), 30)
    assert unpack(blob) == [("r1", ["lazy"])]


async def test_lazy_items_wait_for_an_urgent_one_which_sends_everything_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outbox_module, "_LAZY_EVENTS_S", 600.0)
    boxes = Outboxes()
    outbox = boxes.get("c")
    outbox.post("r1", ["lazy 1"], urgent=False)
    taking = asyncio.ensure_future(_take(boxes, "c", 600.0))
    await _settle()
    assert not taking.done()  # lazy: the take waits on
    outbox.post("r2", ["lazy 2"], urgent=False)
    outbox.post("r1", "outcome")
    assert await asyncio.wait_for(taking, 30) == [
        ("r1", ["lazy 1"]),
        ("r2", ["lazy 2"]),
        ("r1", "outcome"),
    ]


async def test_alone_lazy_items_go_once_the_oldest_waited_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outbox_module, "_LAZY_EVENTS_S", 0.05)
    boxes = Outboxes()
    outbox = boxes.get("c")
    outbox.post("r2", ["lazy 3"], urgent=False)
    deadline = outbox.timer
    assert deadline is not None
    taking = asyncio.ensure_future(_take(boxes, "c", 600.0))  # only the window can wake it
    await _settle()
    outbox.post("r2", ["lazy 4"], urgent=False)  # joins; does not push the deadline
    assert outbox.timer is deadline
    assert await asyncio.wait_for(taking, 30) == [("r2", ["lazy 3"]), ("r2", ["lazy 4"])]
    assert outbox.timer is None and not outbox.ready.is_set()
    assert not outbox.takes  # (a take that was woken, or timed out, leaves nothing behind)
    assert await _take(boxes, "c", 0.01) == []
    assert not outbox.takes


async def test_events_of_a_run_that_does_not_stream_join_its_list_in_the_outbox() -> None:
    """A run's lazy events gather in one list among the items until something else of the
    run (its outcome) or a take comes; then its next events start a new list."""
    outbox = Outboxes().get("c")
    outbox.add_lazy("r1", "e1")  # type: ignore[arg-type]  # (any value stands for an event)
    outbox.add_lazy("r2", "x1")  # type: ignore[arg-type]
    outbox.add_lazy("r1", "e2")  # type: ignore[arg-type]
    assert outbox.items == [("r1", ["e1", "e2"]), ("r2", ["x1"])]
    assert outbox.timer is not None and not outbox.ready.is_set()  # lazy: no take wakes
    outbox.post("r1", "outcome")  # type: ignore[arg-type]
    assert outbox.ready.is_set()
    outbox.add_lazy("r1", "after")  # type: ignore[arg-type]  # (a run handed back) goes after
    outbox.add_lazy("r2", "x2")  # type: ignore[arg-type]
    items = [("r1", ["e1", "e2"]), ("r2", ["x1", "x2"]), ("r1", "outcome"), ("r1", ["after"])]
    assert outbox.items == items
    assert outbox.drain() == items
    outbox.add_lazy("r2", "x3")  # type: ignore[arg-type]  # the lists taken are closed
    assert outbox.items == [("r2", ["x3"])]


async def test_outboxes_of_callers_gone_for_long_are_dropped() -> None:
    boxes = Outboxes()
    boxes.get("gone").post("r", ["never taken"])  # type: ignore[list-item]
    boxes.get("gone").taken -= outbox_module._OUTBOX_IDLE_S + 1
    boxes.get("here")  # a new caller's outbox sweeps out the stale ones
    assert boxes.callers() == {"here"}
    assert not boxes.awaited()


async def test_a_streamed_runs_events_go_in_batches_and_its_last_ones_with_its_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outbox_module, "_BATCH_WINDOW_S", 600.0)
    boxes = Outboxes()
    outbox = boxes.get("c")
    relay = Relay(outbox, _envelope("r1", stream=True))
    relay.emit("e1")  # type: ignore[arg-type]
    relay.emit("e2")  # type: ignore[arg-type]
    assert outbox.items == [] and outbox.runs == 1  # waiting for the run's next events
    done: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    outcome = Outcome("completed", _envelope("r1", stream=True).state, output="ok")
    done.set_result(outcome)
    relay.done(done)
    relay.emit("late")  # type: ignore[arg-type]  # nothing follows the outcome
    assert outbox.items == [("r1", (["e1", "e2"], outcome))] and outbox.runs == 0
    assert boxes.awaited()


async def test_a_run_whose_task_raised_still_sends_a_failed_outcome() -> None:
    """A bug in the actor's run code must not leave the caller waiting for an outcome."""
    outbox = Outboxes().get("c")
    relay = Relay(outbox, _envelope("r1", stream=False))

    async def broken() -> Outcome:
        raise RuntimeError("boom")

    task = asyncio.ensure_future(broken())
    await asyncio.wait([task])
    relay.done(task)
    [(run_id, outcome)] = outbox.items
    assert run_id == "r1" and isinstance(outcome, Outcome) and outcome.kind == "failed"
    assert "boom" in str(outcome.error)
