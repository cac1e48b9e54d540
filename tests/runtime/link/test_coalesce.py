"""Coalescing calls of one loop turn or time window (no Ray)."""

from __future__ import annotations

import asyncio

from raygents.runtime.link.coalesce import Coalescer


async def test_items_of_one_loop_turn_go_in_one_send_per_key() -> None:
    sent: list[tuple[str, list[int]]] = []
    batches: Coalescer[str, int] = Coalescer(lambda key, items: sent.append((key, items)))
    for i in range(3):
        batches.add("a", i)
    batches.add("b", 9)
    assert sent == []
    await asyncio.sleep(0)
    assert sent == [("a", [0, 1, 2]), ("b", [9])]
    batches.add("a", 3)
    await asyncio.sleep(0)
    assert sent[2:] == [("a", [3])]


async def test_a_window_gathers_items_of_several_turns() -> None:
    sent: list[list[int]] = []
    batches: Coalescer[None, int] = Coalescer(lambda _, items: sent.append(items), 0.05)
    batches.add(None, 1)
    await asyncio.sleep(0)
    batches.add(None, 2)
    assert sent == []
    await asyncio.sleep(0.2)
    assert sent == [[1, 2]]


async def test_a_coroutine_send_is_kept_while_under_way_with_its_items() -> None:
    release = asyncio.Event()
    sent: list[list[str]] = []

    async def send(key: None, items: list[str]) -> None:
        await release.wait()
        sent.append(items)

    batches: Coalescer[None, str] = Coalescer(send)
    batches.add(None, "r1")
    assert list(batches.pending()) == ["r1"]  # not sent yet
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert list(batches.pending()) == ["r1"] and len(batches.sending) == 1  # under way
    release.set()
    await asyncio.wait(set(batches.sending))
    await asyncio.sleep(0)
    assert sent == [["r1"]] and not batches.sending and list(batches.pending()) == []


async def test_flush_all_sends_now_and_returns_what_is_under_way() -> None:
    sent: list[list[int]] = []

    async def send(key: str, items: list[int]) -> None:
        sent.append(items)

    batches: Coalescer[str, int] = Coalescer(send, window_s=60.0)
    batches.add("a", 1)
    batches.add("b", 2)
    under_way = batches.flush_all()
    assert len(under_way) == 2
    await asyncio.wait(under_way)
    assert sorted(sent) == [[1], [2]]
    assert batches.flush("a") is None  # nothing left to send


def test_batches_on_a_loop_that_stopped_do_not_hold_later_ones() -> None:
    sent: list[tuple[object, list[int]]] = []
    batches: Coalescer[object, int] = Coalescer(lambda key, items: sent.append((key, items)))
    first = asyncio.new_event_loop()

    def unsent() -> None:
        batches.add(first, 1)
        first.stop()  # the loop ends before its next turn, which would send it

    first.call_soon(unsent)
    first.run_forever()
    first.close()

    async def later() -> None:
        batches.add(asyncio.get_running_loop(), 2)
        await asyncio.sleep(0)

    asyncio.run(later())
    assert [items for _, items in sent] == [[2]]
