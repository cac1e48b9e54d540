"""The relay: the live events of runs, kept in the coordinator for followers in any process.

A run's *feed* holds its newest events (at most :data:`KEEP`, the oldest dropped first), each
numbered by the process that drives the run. A run the coordinator drives (detached) has a
feed from its start. A run a driver drives has one only while someone follows it: the first
follower makes the relay *want* the run from its driver (the run table's owner), whose
publisher (:mod:`raygents.runtime.driver.publisher`), long-polling :meth:`EventRelay.wanted`,
sends what it holds of the run and then each event as it comes. Nobody following, nothing
is sent: the run's path pays nothing.

Followers pull (:meth:`EventRelay.follow`, a long poll per batch), so a slow or stuck follower
holds nothing: the run never waits for it, and a follower that falls more than ``KEEP``
events behind finds a gap in the numbers (see :class:`~raygents.core.events.RunEvent`).
A feed nobody followed for :data:`IDLE_S` goes (its driver stops sending); an ended run's feed
stays for :data:`ENDED_KEEP_S` (at most :data:`ENDED_FEEDS` of them), for reconnects.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from raygents.core.events import RunEvent
from raygents.records.runinfo import RunInfo
from raygents.runtime.link.follow import Follow

__all__ = ["ENDED_FEEDS", "ENDED_KEEP_S", "IDLE_S", "KEEP", "EventRelay", "Want"]

KEEP = 10_000
"""Events a run's feed keeps (the newest), for followers that come late or fall behind."""
IDLE_S = 60.0
"""A driver-published feed nobody followed for this long goes, and its driver stops sending."""
ENDED_KEEP_S = 300.0
"""How long an ended run's feed stays, for followers that reconnect."""
ENDED_FEEDS = 64
"""How many ended runs' feeds stay at most (the oldest ends go first)."""
BATCH = 1_000
"""Events one answer to a follower carries at most."""
_MAX_WAIT_S = 30.0

Want = tuple[str, int]
"""What the relay wants of a driver's run: ``(token, have)``: a token new to the driver means
"send what you hold of the run numbered after ``have``, then every event as it comes"."""


@dataclass
class _Feed:
    owner: str | None
    """The driver that publishes it; None for a run the coordinator drives."""
    events: list[RunEvent] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    floor: int = 0
    """The seq of the last event of the run's earlier drives (not kept here)."""
    ended_at: float | None = None
    answered: bool = False
    """Whether its driver sent anything since the relay asked (its driver is alive)."""
    followed_at: float = field(default_factory=time.monotonic)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def last(self) -> int:
        return self.seqs[-1] if self.seqs else self.floor

    def restart(self, owner: str | None) -> None:
        """The run was resumed: a new drive numbers on after the ended one, whose events go
        (a follower of the new drive reads the run's history from its messages)."""
        self.floor = self.last
        self.events, self.seqs = [], []
        self.owner, self.ended_at, self.answered = owner, None, False

    def add(self, events: Iterable[RunEvent]) -> bool:
        """Append what is newer than the newest event held; True if the run ended with it."""
        ended = False
        for event in events:
            seq = event.seq
            if seq is None or seq <= self.last:  # (sent twice, or a stray of an older drive)
                continue
            self.events.append(event)
            self.seqs.append(seq)
            if event.is_terminal:
                self.ended_at = time.monotonic()
                ended = True
        if len(self.seqs) > KEEP + KEEP // 4:  # (trimmed in chunks: a slice is not free)
            del self.events[:-KEEP], self.seqs[:-KEEP]
        self.changed.set()
        self.changed = asyncio.Event()
        return ended

    def newer(self, seq: int) -> bool:
        """Whether it holds an event numbered after ``seq``."""
        return bool(self.seqs) and self.seqs[-1] > seq

    def after(self, seq: int) -> tuple[RunEvent, ...]:
        start = bisect.bisect_right(self.seqs, seq)
        return tuple(self.events[start : start + BATCH])


class EventRelay:
    """The feeds of the runs followed (and of those the coordinator drives), and what each
    driver is asked to send. Only used from the coordinator's event loop."""

    def __init__(self) -> None:
        self._feeds: dict[str, _Feed] = {}
        self._wants: dict[str, dict[str, Want]] = {}
        self._versions: dict[str, int] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._swept = time.monotonic()

    # --- the driving side ---------------------------------------------------------------
    def open(self, run_id: str) -> None:
        """A run the coordinator drives starts (or resumes): its feed is kept from now on,
        followed or not (its events come through :meth:`append`)."""
        feed = self._feeds.get(run_id)
        if feed is None:
            self._feeds[run_id] = _Feed(None)
            return
        if feed.owner is not None:
            self._unwant(feed.owner, run_id)
        if feed.ended_at is not None:
            feed.restart(None)
        feed.owner = None

    def append(self, run_id: str, events: Iterable[RunEvent]) -> None:
        """Numbered events of a run, in order (from its driver, or the coordinator's drive)."""
        feed = self._feeds.get(run_id)
        if feed is None:  # (nobody follows it any more)
            return
        if feed.add(events) and feed.owner is not None:
            self._unwant(feed.owner, run_id)

    def publish(self, owner: str, batches: dict[str, list[RunEvent]]) -> None:
        """A driver's events of the runs the relay wants of it."""
        for run_id, events in batches.items():
            feed = self._feeds.get(run_id)
            if feed is not None and feed.owner == owner:
                feed.answered = True
                self.append(run_id, events)

    async def wanted(self, owner: str, version: int, wait_s: float) -> tuple[int, dict[str, Want]]:
        """What the relay wants of ``owner``'s runs, once it differs from what ``version``
        said (or after ``wait_s``): ``(version, {run_id: want})``."""
        self._sweep()
        if self._versions.get(owner, 0) == version:
            wake = self._wake.setdefault(owner, asyncio.Event())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), min(max(wait_s, 0.0), _MAX_WAIT_S))
        return self._versions.get(owner, 0), dict(self._wants.get(owner, {}))

    # --- the following side -------------------------------------------------------------
    def live(self, run_id: str) -> bool:
        """Whether the relay has a feed of the run that did not end (:meth:`follow` then
        needs no run table entry)."""
        feed = self._feeds.get(run_id)
        return feed is not None and feed.ended_at is None and (feed.owner is None or feed.answered)

    async def follow(
        self, run_id: str, after: int, wait_s: float, info: RunInfo | None = None
    ) -> Follow:
        """The run's events numbered after ``after``, waiting up to ``wait_s`` for some;
        ``info``: the run's entry in the run table, where the relay has no feed of it (a
        running run's owner is then asked for its events)."""
        self._sweep()
        feed = self._feed(run_id, info)
        if feed is None:
            return Follow((), "none")
        deadline = time.monotonic() + min(max(wait_s, 0.0), _MAX_WAIT_S)
        while not feed.newer(after) and feed.ended_at is None:
            feed.followed_at = time.monotonic()
            remaining = deadline - feed.followed_at
            if remaining <= 0:
                break
            try:
                await asyncio.wait_for(feed.changed.wait(), remaining)
            except asyncio.TimeoutError:
                break
        feed.followed_at = time.monotonic()
        events = feed.after(after)
        if feed.ended_at is not None and (not events or events[-1].seq == feed.last):
            return Follow(events, "ended")
        live = feed.owner is None or feed.answered
        return Follow(events, "live" if live else "waiting")

    def _feed(self, run_id: str, info: RunInfo | None) -> _Feed | None:
        """The run's feed for a follower (made, restarted or handed to the driver that now
        runs it, as ``info`` says), or None when there is none and the run is not running."""
        feed = self._feeds.get(run_id)
        running = info is not None and info.status == "running"
        if info is None or not running:
            silent = feed is not None and feed.owner is not None and not feed.answered
            if silent and feed is not None and feed.ended_at is None and info is not None:
                del self._feeds[run_id]  # (its driver never sent anything, and it is over)
                if feed.owner is not None:
                    self._unwant(feed.owner, run_id)
                return None
            return feed
        owner = info.owner
        if feed is None:
            feed = self._feeds[run_id] = _Feed(owner, floor=info.events)
        elif feed.ended_at is not None and info.events >= feed.last:
            feed.restart(owner)  # (its end is in the table: it was resumed since)
        elif feed.ended_at is None and feed.owner is not None and feed.owner != owner:
            self._unwant(feed.owner, run_id)  # (not answered: resumed by another driver)
            feed.owner = owner
        else:
            return feed
        if owner is not None:
            self._want(owner, run_id, feed.floor)
        return feed

    # --- wants and clean-up -------------------------------------------------------------
    def _want(self, owner: str, run_id: str, have: int) -> None:
        self._wants.setdefault(owner, {})[run_id] = (uuid.uuid4().hex[:12], have)
        self._changed(owner)

    def _unwant(self, owner: str, run_id: str) -> None:
        wants = self._wants.get(owner)
        if wants is not None and wants.pop(run_id, None) is not None:
            if not wants:
                del self._wants[owner]
            self._changed(owner)

    def _changed(self, owner: str) -> None:
        self._versions[owner] = self._versions.get(owner, 0) + 1
        wake = self._wake.pop(owner, None)
        if wake is not None:
            wake.set()

    def _sweep(self) -> None:
        """Drop the feeds nobody follows and the ended ones past their time (once a second)."""
        now = time.monotonic()
        if now - self._swept < 1.0:
            return
        self._swept = now
        ended: list[tuple[float, str]] = []
        for run_id, feed in list(self._feeds.items()):
            if feed.ended_at is not None:
                if now - feed.ended_at > ENDED_KEEP_S:
                    del self._feeds[run_id]
                else:
                    ended.append((feed.ended_at, run_id))
            elif feed.owner is not None and now - feed.followed_at > IDLE_S:
                del self._feeds[run_id]
                self._unwant(feed.owner, run_id)
        ended.sort()
        for _, run_id in ended[: max(len(ended) - ENDED_FEEDS, 0)]:
            del self._feeds[run_id]
