"""A handle on its own: its event log (numbering, ``events(after=)``, and the bound of a log that
keeps the newest events only: a slow reader gets a ``lagged`` event, the writer never waits),
and a wait for its result that an interrupt ends."""

from __future__ import annotations

import _thread
import asyncio
import signal
import threading
import time

import pytest

from raygents.core.events import RunEvent
from raygents.errors import UserError
from raygents.runtime.driver.handle import EventLog, RunHandle
from raygents.runtime.link.drive import SuspendToken


def ev(seq: int | None, kind: str = "llm_delta", **data: object) -> RunEvent:
    return RunEvent(type=kind, run_id="r1", agent_name="a", seq=seq, data=data or None)  # type: ignore[arg-type]


def test_a_handle_numbers_its_events_from_where_the_run_left_off() -> None:
    handle = RunHandle("r1", None, SuspendToken("r1"), numbered_after=4)
    handle._emit(ev(None, "agent_start"))
    handle._emit(ev(None, "tool_start"))
    assert [e.seq for e in handle.events().snapshot()] == [5, 6]
    handle._emit(ev(9, "tool_end"))  # (numbered by the coordinator: kept, and numbers on)
    handle._emit(ev(None, "complete"))
    assert [e.seq for e in handle.events().snapshot()] == [5, 6, 9, 10]


def test_events_after_a_seq_skip_what_the_reader_saw_and_the_replayed_history() -> None:
    log = EventLog()
    for event in (
        ev(None, "agent_start", replayed=True),
        ev(1),
        ev(2),
        ev(3),
        ev(None, "lagged", missed=[4, 5]),
        ev(6, "complete"),
    ):
        log.append(event)
    log.close()
    got = [(e.type, e.seq) for e in log.after(2)]
    assert got == [("llm_delta", 3), ("lagged", None), ("complete", 6)]
    assert [e.seq for e in log.after(2).snapshot()] == [3, None, 6]

    async def read() -> list[int | None]:
        return [e.seq async for e in log.after(3)]

    assert asyncio.run(read()) == [None, 6]
    unnumbered_end = EventLog()
    unnumbered_end.append(ev(None, "error"))
    unnumbered_end.close()
    assert [e.type for e in unnumbered_end.after(10)] == ["error"]


def test_after_must_be_a_seq() -> None:
    handle = RunHandle("r1", None, SuspendToken("r1"))
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(UserError, match="after must be an int"):
            handle.events(after=bad)  # type: ignore[arg-type]


def test_a_bounded_log_never_waits_and_a_slow_reader_gets_a_lagged_event() -> None:
    log = EventLog(keep=8)
    reader = iter(log)
    log.append(ev(1))
    assert next(reader).seq == 1  # (then the reader stops reading)
    for seq in range(2, 101):
        log.append(ev(seq))
    log.close()
    assert len(log.snapshot()) <= 10
    rest = list(reader)
    assert rest[0].type == "lagged"
    first_kept = rest[1].seq
    assert first_kept is not None and rest[0].data == {"missed": [2, first_kept - 1]}
    assert [e.seq for e in rest[1:]] == list(range(first_kept, 101))


def test_a_bounded_log_lags_async_readers_too() -> None:
    log = EventLog(keep=4)
    for seq in range(1, 50):
        log.append(ev(seq))

    async def read() -> list[RunEvent]:
        out = []
        async for event in log:
            out.append(event)
        return out

    def close_soon() -> None:
        log.append(ev(50, "complete"))
        log.close()

    timer = threading.Timer(0.1, close_soon)
    timer.start()
    events = asyncio.run(read())
    timer.join()
    assert events[0].type == "lagged" and events[0].data is not None
    assert events[0].data["missed"][0] == 1
    assert events[-1].type == "complete"


def test_waiting_async_readers_hold_no_thread() -> None:
    log = EventLog()

    async def read() -> list[int | None]:
        return [e.seq async for e in log]

    async def main() -> tuple[int, list[list[int | None]]]:
        before = threading.active_count()
        readers = [asyncio.ensure_future(read()) for _ in range(50)]
        await asyncio.sleep(0.2)  # (every reader waits for the first event)
        waiting = threading.active_count() - before
        threading.Timer(0.05, lambda: (log.append(ev(1)), log.close())).start()
        return waiting, await asyncio.wait_for(asyncio.gather(*readers), 10)

    waiting, got = asyncio.run(main())
    assert waiting <= 0  # (none added; another test's thread may end meanwhile)
    assert got == [[1]] * 50


def test_a_wait_for_the_result_is_interrupted_at_once() -> None:
    """Ray cancels a plain task by raising ``KeyboardInterrupt`` in its thread (as
    ``_thread.interrupt_main`` does): a thread waiting for a run's result sees it within a
    fraction of a second, not when the run ends."""
    handle = RunHandle("r1", None, SuspendToken("r1"))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            handle.result(timeout_s=30)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 10, "the wait went on to its timeout"
