"""An agent actor's leases on its runs' dispatches: while one holds, a checked record needs no
fencing checks after its put (see :mod:`raygents.runtime.coordinator.leases`).

A run's lease is renewed when it has less than half of it left, by a request to the
coordinator sent beside the put that needs it; the requests of the runs that ask in one turn
of the event loop go together. A request that fails or is late grants nothing: the put is
checked, as without leases.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import ray

__all__ = ["Leases", "clock"]

log = logging.getLogger("raygents")

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def clock() -> float:
    """Seconds on a clock that never goes back and counts while the host sleeps
    (``CLOCK_BOOTTIME`` where there is one): a lease must never seem to last longer here
    than the coordinator counts it."""
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()


class Leases:
    """The leases of the runs on one agent actor.

    Args:
        ask: sends ``[(run_id, epoch), ...]`` to the coordinator's ``lease``; returns what
            can be awaited for the run ids granted (a Ray object ref).
        lease_s: how long a grant lasts, from before it was asked.
    """

    def __init__(self, ask: Callable[[list[tuple[str, int]]], Any], lease_s: float) -> None:
        self.lease_s = lease_s
        self._ask = ask
        self._until: dict[str, tuple[int, float]] = {}
        """Each run's dispatch (its epoch) and when its lease lapses, by :func:`clock`."""
        self._due: dict[str, int] = {}
        """Runs to ask for in the request that goes at the end of this turn of the loop."""
        self._asking: dict[str, asyncio.Future[None]] = {}
        """The request in flight that asks for each run."""
        self._next: asyncio.Future[None] | None = None
        self._pruned = clock()
        self._requests: set[asyncio.Future[None]] = set()
        """Requests in flight (the loop keeps only weak references to tasks)."""

    def holds(self, run_id: str, epoch: int, at: float) -> bool:
        """Whether dispatch ``epoch`` of the run held its lease at time ``at``."""
        held = self._until.get(run_id)
        return held is not None and held[0] == epoch and at < held[1]

    def renew(self, run_id: str, epoch: int) -> asyncio.Future[None] | None:
        """Have the run's lease renewed unless over half of it is left; what to await for the
        request that asks for it (None: none does). The future never fails."""
        asking = self._asking.get(run_id)
        if asking is not None:
            return asking
        held = self._until.get(run_id)
        if held is not None and held[0] == epoch and held[1] - clock() > self.lease_s / 2:
            return None
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(self._send)
        self._due[run_id] = epoch
        self._asking[run_id] = self._next
        return self._next

    def drop(self, run_id: str) -> None:
        """The run ended here."""
        self._until.pop(run_id, None)

    def _send(self) -> None:
        due, done = list(self._due.items()), self._next
        self._due, self._next = {}, None
        assert done is not None
        request = asyncio.ensure_future(self._request(due, done))
        self._requests.add(request)
        request.add_done_callback(self._requests.discard)

    async def _request(self, due: list[tuple[str, int]], done: asyncio.Future[None]) -> None:
        sent = clock()
        granted: set[str] = set()
        try:
            granted = set(await self._ask(due))
        except ray.exceptions.RayError as exc:  # (a coordinator restarting: no lease)
            log.debug("leases of %d runs not granted: %s", len(due), exc)
        finally:  # (whatever happened, nobody waits for this request any longer)
            for run_id, epoch in due:
                if self._asking.get(run_id) is done:
                    del self._asking[run_id]
                if run_id in granted:
                    self._until[run_id] = (epoch, sent + self.lease_s)
            done.set_result(None)
        if sent - self._pruned > self.lease_s:
            self._prune(sent)

    def _prune(self, now: float) -> None:
        """Forget leases that lapsed (runs that left without ending here)."""
        self._until = {r: held for r, held in self._until.items() if held[1] > now}
        self._pruned = now
