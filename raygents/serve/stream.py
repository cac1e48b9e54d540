"""The event stream of a run as Server-Sent Events: each event with ``id:`` (its sequence in
the run), ``event:`` (its type) and ``data:`` (its JSON), from after a given id (a client's
``Last-Event-ID``), with heartbeat comments while idle; it ends after the run's terminal
event. This module is the one place that numbers events.

Where raygents' runtime numbers the events of a run (``RunEvent.seq``: 1, 2, 3..., the same in
every process, with ``attach(run_id).events(after=n)``), those numbers are the ids; else an
event's id is its position (from 1) in what ``raygents.attach(run_id).events()`` gives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import raygents as rg
from raygents.core.events import TERMINAL_EVENTS, RunEvent
from raygents.serve.document import event_document

__all__ = ["last_event_id", "sse"]

_POLL_S = 0.05
_RELAYED = "seq" in RunEvent.model_fields
"""Whether the runtime numbers a run's events (its live relay)."""


def last_event_id(header: str | None) -> int:
    """The sequence a reconnecting client saw last (-1: none, or not a sequence; ids start
    at 1)."""
    text = (header or "").strip()
    if not text.isdigit() or len(text) > 18:
        return -1
    return int(text)


def frame(seq: int | None, event: RunEvent) -> bytes:
    """One event as an SSE frame (its JSON is one line: JSON escapes line breaks); an event
    without a sequence (replayed history, a lag marker) goes without ``id:``."""
    data = json.dumps(event_document(event), separators=(",", ":"), ensure_ascii=False)
    data = data.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {event.type}\ndata: {data}\n\n".encode()


def _ends(event: RunEvent) -> bool:
    return event.type in TERMINAL_EVENTS and event.path == ()


async def _positions(run_id: str, after: int) -> AsyncGenerator[tuple[int | None, RunEvent], None]:
    """The events of ``attach(run_id)`` numbered 1, 2, 3... by position, those after
    ``after``, polled (a waiting reader holds no thread)."""
    handle: Any = await asyncio.to_thread(rg.attach, run_id)
    log = handle.events()
    index = max(after, 0)
    while True:
        seen = log.snapshot()
        for i in range(index, len(seen)):
            yield i + 1, seen[i]
            if _ends(seen[i]):
                return
        index = max(index, len(seen))
        if handle.done() and len(log.snapshot()) <= index:
            return
        await asyncio.sleep(_POLL_S)


async def _relayed(run_id: str, after: int) -> AsyncGenerator[tuple[int | None, RunEvent], None]:
    """The run's events as the runtime numbers them, those after ``after``."""
    handle: Any = await asyncio.to_thread(rg.attach, run_id)
    events = handle.events(after=after) if after >= 0 else handle.events()
    async for event in events:
        yield getattr(event, "seq", None), event
        if _ends(event):
            return


async def sse(run_id: str, after: int, heartbeat_s: float) -> AsyncIterator[bytes]:
    """The SSE body for a run's events after ``after``, with a comment every
    ``heartbeat_s`` while none comes."""
    yield b": raygents event stream\nretry: 1000\n\n"
    source = (_relayed if _RELAYED else _positions)(run_id, after)
    waiting: asyncio.Task[tuple[int | None, RunEvent]] | None = None
    try:
        while True:
            if waiting is None:
                waiting = asyncio.ensure_future(anext(source))
            done, _ = await asyncio.wait({waiting}, timeout=heartbeat_s)
            if not done:
                yield b": heartbeat\n\n"
                continue
            try:
                seq, event = waiting.result()
            except StopAsyncIteration:
                return
            waiting = None
            yield frame(seq, event)
    finally:  # (the client went away, or the stream ended)
        if waiting is not None and not waiting.done():
            waiting.cancel()
            with contextlib.suppress(BaseException):
                await waiting
        with contextlib.suppress(RuntimeError):
            await source.aclose()
