"""The driver's publisher: the events of this driver's runs, sent to the coordinator's relay
while someone in another process follows them (see :mod:`raygents.runtime.coordinator.relay`).

While this driver has runs in flight, one long poll at a time asks the relay which of them it
wants. A run nobody follows costs nothing more: its handle's tap is None. A wanted run's handle
gets a tap: what the handle holds of the run is sent, then each event as it comes, in batches,
one send at a time (in order: an async actor does not keep the order of calls in flight). A
coordinator that is slow to take them never holds the run: what waits is bounded per run, the
oldest dropped first (the follower sees the gap in the numbers).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import MutableMapping

from raygents.core.events import RunEvent
from raygents.runtime.coordinator.relay import KEEP, Want
from raygents.runtime.driver.handle import RunHandle
from raygents.runtime.link.coordinator_client import CoordinatorClient

__all__ = ["Publisher"]

log = logging.getLogger("raygents")

_POLL_S = 10.0  # how long one ask for the relay's wants waits for a change
_RETRY_S = 1.0  # pause after an ask that failed
_WINDOW_S = 0.005  # how long the first event of a batch waits for others


class Publisher:
    """Sends the relay the events of this driver's runs that it wants. Only used from the
    runtime's event loop.

    Args:
        owner: this driver's owner id (the run table's ``owner`` of its runs).
        client: the coordinator.
        handles: this driver's runs, by id.
    """

    def __init__(
        self, owner: str, client: CoordinatorClient, handles: MutableMapping[str, RunHandle]
    ) -> None:
        self._owner = owner
        self._client = client
        self._handles = handles
        self._running = 0
        self._version = 0
        self._taps: dict[str, str] = {}
        """The runs sent to the relay, with the token of the want they answer."""
        self._out: dict[str, list[RunEvent]] = {}
        self._poll: asyncio.Task[None] | None = None
        self._pump: asyncio.Task[None] | None = None

    def started(self) -> None:
        """A run of this driver started: ask the relay's wants while runs are in flight."""
        self._running += 1
        if self._poll is None or self._poll.done():
            self._poll = asyncio.get_running_loop().create_task(self._watch())

    def ended(self) -> None:
        """A run of this driver ended (its terminal event was emitted)."""
        self._running -= 1

    def stop(self) -> list[asyncio.Task[None]]:
        """Stop asking and sending (the runtime closes); returns the tasks cancelled."""
        tasks = [t for t in (self._poll, self._pump) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        return tasks

    async def _watch(self) -> None:
        while self._running > 0 or self._taps:
            try:
                version, wants = await self._client.relay_wanted(
                    self._owner, self._version, _POLL_S
                )
            except Exception as exc:  # (a coordinator that is gone, or of an older raygents)
                log.debug("cannot ask the relay which runs it wants: %s", exc)
                await asyncio.sleep(_RETRY_S)
                continue
            self._version = version
            self._apply(wants)

    def _apply(self, wants: dict[str, Want]) -> None:
        """Tap the runs newly wanted (sending what their handles hold past what the relay
        has), untap those no longer wanted."""
        for run_id, (token, have) in wants.items():
            if self._taps.get(run_id) == token:
                continue
            handle = self._handles.get(run_id)
            if handle is None:  # (not a run of this driver any more)
                continue
            self._taps[run_id] = token
            held = handle.events().snapshot()  # (sent even if empty: the relay knows then
            # that this driver answers)
            self._out[run_id] = [e for e in held if e.seq is not None and e.seq > have][-KEEP:]
            handle._tap = functools.partial(self._event, run_id)
            self._send_soon()
        for run_id in [r for r in self._taps if r not in wants]:
            del self._taps[run_id]
            handle = self._handles.get(run_id)
            if handle is not None:
                handle._tap = None

    def _event(self, run_id: str, event: RunEvent) -> None:
        out = self._out.setdefault(run_id, [])
        out.append(event)
        if len(out) > KEEP + KEEP // 4:  # (the coordinator does not keep up: the oldest go)
            del out[:-KEEP]
        self._send_soon()

    def _send_soon(self) -> None:
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        await asyncio.sleep(_WINDOW_S)
        while self._out:
            batches, self._out = self._out, {}
            try:
                await self._client.relay_publish(self._owner, batches)
            except Exception as exc:  # (a follower sees the gap; a new coordinator asks again)
                log.debug("cannot send the relay %d run(s)' events: %s", len(batches), exc)
