"""Leases: how long an agent actor may take a run's dispatch as its own without asking the store.

A checked record (a ``sync`` tool batch's intent, see :mod:`raygents.runtime.actor.writer`) is
followed by the store's fencing checks: did a later dispatch of the run mark the store, were the
run's records deleted. On S3 those are two round trips after the put, on the run's path. A
lease replaces them while it holds: the coordinator grants a copy of a run a lease of
``lease_s`` on its dispatch (its epoch is the run's newest, and the run is running), and a
dispatch that replaces it (:meth:`Coordinator._dispatch`) waits until every lease it granted
the earlier dispatch has lapsed before it marks the store and reads the run. So a copy whose
put *returned* within its lease knows the record landed before any later dispatch read the
run: that dispatch finds it (and treats its tools as possibly run), as it would after the
checks. A copy past its lease checks, as before.

The actor counts its lease from before it asked (its clock), the coordinator from when it
granted (its own), later: each side measures only its own elapsed time, and the coordinator
adds :data:`MARGIN_S` (and 1%) for the clocks' rates. A coordinator that starts (or restarts)
knows none of its predecessor's grants: it waits ``lease_s`` from its start before a
replacing dispatch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

__all__ = ["MARGIN_S", "LeaseBook"]

MARGIN_S = 0.1
"""Added to a lease before a replacing dispatch goes on (with 1% of it): clocks' rates."""


class LeaseBook:
    """The coordinator's side: when it last granted each run's dispatch a lease.

    Args:
        lease_s: how long a grant lasts (:attr:`Recovery.lease_s`).
        current: whether ``(run_id, epoch)`` is a running run's newest dispatch.
        clock: seconds on a clock that never goes back (``time.monotonic``).
    """

    def __init__(
        self,
        lease_s: float,
        current: Callable[[str, int], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease_s = lease_s
        self._current = current
        self._clock = clock
        self._granted: dict[str, float] = {}
        """When each run's dispatch was last granted a lease, for the runs this coordinator
        dispatched or granted (``-inf``: dispatched here, never granted)."""
        self._started = clock()
        """A predecessor's grants lapse :attr:`lasts` after this at the latest."""

    @property
    def lasts(self) -> float:
        """How long after its grant a lease surely lapsed, by this clock."""
        return self.lease_s * 1.01 + MARGIN_S

    def grant(self, runs: Iterable[tuple[str, int]]) -> list[str]:
        """Grant each ``(run_id, epoch)`` that is its run's running dispatch a lease from
        now; the run ids granted."""
        now = self._clock()
        granted = [run_id for run_id, epoch in runs if self._current(run_id, epoch)]
        for run_id in granted:
            self._granted[run_id] = now
        return granted

    def dispatched(self, run_id: str) -> None:
        """This coordinator dispatched the run: every grant to it is known here."""
        self._granted[run_id] = -math.inf

    def lapse_in(self, run_id: str) -> float:
        """Seconds until every lease granted the run's earlier dispatches has lapsed (0:
        they have), counting a predecessor's for a run not dispatched here. Call it once a
        new dispatch replaced them (no grant goes to them after that); the grant is kept
        until :meth:`dispatched`, for a claim of the run that comes meanwhile."""
        granted = self._granted.get(run_id, self._started)
        return max(0.0, granted + self.lasts - self._clock())

    def forget(self, run_id: str) -> None:
        """The run left the run table."""
        self._granted.pop(run_id, None)
