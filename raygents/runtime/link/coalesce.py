"""Coalescing: calls made within one turn of the event loop (or a short window) go as one."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Coalescer"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class Coalescer(Generic[K, T]):
    """Gathers items per key and hands each key's items to ``send`` in one list.

    The first item of a key schedules the send for the loop's next turn (or ``window_s``
    later), so everything added until then travels together: a storm of a thousand suspends,
    starts or claims becomes one call per actor instead of a thousand. A coroutine ``send``
    returns runs as a task, kept until it ends (see :attr:`sending`).

    Args:
        send: called as ``send(key, items)`` on the event loop.
        window_s: how long the first item of a batch waits for others; 0 is one loop turn.
    """

    def __init__(self, send: Callable[[K, list[T]], Any], window_s: float = 0.0) -> None:
        self._send = send
        self.window_s = window_s
        self._pending: dict[K, list[T]] = {}
        self._timers: dict[K, asyncio.TimerHandle | asyncio.Handle] = {}
        self.sending: dict[asyncio.Future[Any], list[T]] = {}
        """The sends under way (coroutines), with the items each one carries."""

    def add(self, key: K, item: T) -> None:
        """Add ``item`` to ``key``'s next batch; call on the event loop that sends it."""
        batch = self._pending.get(key)
        if batch is None:
            batch = self._pending[key] = []
            loop = asyncio.get_running_loop()
            if self.window_s > 0:
                self._timers[key] = loop.call_later(self.window_s, self.flush, key)
            else:
                self._timers[key] = loop.call_soon(self.flush, key)
        batch.append(item)

    def flush(self, key: K) -> asyncio.Future[Any] | None:
        """Send ``key``'s batch now; the send under way, if ``send`` is a coroutine."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        items = self._pending.pop(key, None)
        if not items:
            return None
        result = self._send(key, items)
        if not inspect.isawaitable(result):
            return None
        sending = asyncio.ensure_future(result)
        self.sending[sending] = items
        sending.add_done_callback(self._sent)
        return sending

    def flush_all(self) -> set[asyncio.Future[Any]]:
        """Send every batch now; returns every send still under way."""
        for key in list(self._pending):
            self.flush(key)
        return set(self.sending)

    def pending(self) -> Iterator[T]:
        """The items not sent yet, and those of the sends under way."""
        for items in list(self._pending.values()):
            yield from items
        for items in list(self.sending.values()):
            yield from items

    def _sent(self, sending: asyncio.Future[Any]) -> None:
        self.sending.pop(sending, None)
