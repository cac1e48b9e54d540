"""Outboxes: the agent actor's half of run mailboxes, where runs leave what their callers take.

:mod:`~raygents.runtime.link.mailbox` is the caller's half: it starts runs on an actor and takes
what they sent with one long-polling call at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from raygents.core.envelope import Envelope, Outcome, RunState
from raygents.core.events import RunEvent
from raygents.errors import RaygentsError
from raygents.runtime.link.mailbox import pack

__all__ = ["Item", "Outbox", "Outboxes", "Relay"]

log = logging.getLogger("raygents")

Item = list[RunEvent] | Outcome | tuple[list[RunEvent], Outcome]
"""What a run sends its caller: events, the outcome, or the last events with the outcome."""
_BATCH_WINDOW_S = 0.02  # how long a streamed run's events gather before they go out together
# How long the events of runs that do not stream may wait in an outbox for company (an
# outcome, or a streamed run's events, sends everything waiting at once): a fan-out's children
# and a driver's runs cost a take per few hundred ms instead of one per batch.
_LAZY_EVENTS_S = 0.25
_OUTBOX_IDLE_S = 120.0  # an outbox its caller has not taken from for this long is dropped


@dataclass
class Outbox:
    """What one caller's runs sent and the caller has not taken yet."""

    taken: float
    """When the caller last took (or the outbox was made)."""
    items: list[tuple[str, Item]] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the items must go: one of them is urgent, or the oldest lazy one waited
    ``_LAZY_EVENTS_S``."""
    runs: int = 0
    """Runs of this caller still relaying here."""
    timer: asyncio.TimerHandle | None = None
    takes: list[asyncio.Future[None]] = field(default_factory=list)
    """The takes waiting for the outbox to be ready."""
    lazy: dict[str, list[RunEvent]] = field(default_factory=dict)
    """The event list of each run that does not stream, while it is among the items and
    nothing of the run came after it (:meth:`add_lazy` adds to it)."""

    def post(self, run_id: str, item: Item, urgent: bool = True) -> None:
        """Add an item; an urgent one (an outcome, a streamed run's events) wakes the take."""
        self.lazy.pop(run_id, None)  # the run's next events go after this item
        self.items.append((run_id, item))
        if urgent:
            self._set_ready()
        elif self.timer is None and not self.ready.is_set():
            self.timer = asyncio.get_running_loop().call_later(_LAZY_EVENTS_S, self._set_ready)

    def add_lazy(self, run_id: str, event: RunEvent) -> None:
        """Add an event of a run that does not stream: to the run's list waiting here, or in
        a new one (the events go with the next urgent item, or ``_LAZY_EVENTS_S`` after the
        oldest lazy one)."""
        events = self.lazy.get(run_id)
        if events is None:
            events = []
            self.post(run_id, events, urgent=False)
            self.lazy[run_id] = events
        events.append(event)

    def _set_ready(self) -> None:
        self.ready.set()
        for take in self.takes:
            _wake(take)

    async def wait_ready(self, wait_s: float) -> None:
        """Wait until the outbox is ready, or ``wait_s`` (a future woken directly, not
        ``asyncio.wait_for``'s task per wait: the take answers two turns of the loop sooner)."""
        loop = asyncio.get_running_loop()
        take: asyncio.Future[None] = loop.create_future()
        self.takes.append(take)
        timer = loop.call_later(wait_s, _wake, take)
        try:
            await take
        finally:
            timer.cancel()
            self.takes.remove(take)

    def drain(self) -> list[tuple[str, Item]]:
        """Everything waiting, in order; the outbox is empty and not ready afterwards."""
        items, self.items = self.items, []
        self.lazy.clear()
        self.ready.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        return items


class Outboxes:
    """The outboxes of one actor, by caller."""

    def __init__(self) -> None:
        self._boxes: dict[str, Outbox] = {}

    def __contains__(self, caller: str) -> bool:
        return caller in self._boxes

    def callers(self) -> set[str]:
        """The callers that have an outbox here."""
        return set(self._boxes)

    def get(self, caller: str) -> Outbox:
        """The caller's outbox, made if it has none (which drops those of callers that have
        not taken for ``_OUTBOX_IDLE_S``: they are gone)."""
        outbox = self._boxes.get(caller)
        if outbox is None:
            now = time.monotonic()
            for name, other in list(self._boxes.items()):
                if now - other.taken > _OUTBOX_IDLE_S:
                    del self._boxes[name]
            outbox = self._boxes[caller] = Outbox(taken=now)
        return outbox

    async def take(self, caller: str, wait_s: float, wait: bool) -> bytes:
        """What ``caller``'s runs sent since its last take, packed (see
        :func:`~raygents.runtime.link.mailbox.pack`); waits up to ``wait_s`` for something that
        must go if ``wait``. An outbox left empty, with no run relaying to it, is forgotten."""
        outbox = self.get(caller)
        outbox.taken = time.monotonic()
        if wait and not outbox.ready.is_set() and wait_s > 0:
            await outbox.wait_ready(wait_s)
        items = outbox.drain()
        outbox.taken = time.monotonic()
        if not outbox.runs and not outbox.items:
            self._boxes.pop(caller, None)
        return pack(items)

    def awaited(self) -> bool:
        """Whether some caller that took in the last ``_OUTBOX_IDLE_S`` (one that is not
        gone) has not taken everything its runs sent."""
        now = time.monotonic()
        return any(o.items and now - o.taken <= _OUTBOX_IDLE_S for o in self._boxes.values())


class Relay:
    """Sends one run's events to its caller's outbox, then its outcome (from the callback of
    the run's task).

    The events of a run that does not stream join the run's list in the outbox at once (see
    :meth:`Outbox.add_lazy`). A streamed run's event waits up to ``_BATCH_WINDOW_S`` for the
    run's next ones (fewer, larger batches cost both sides less; the run never waits for
    them), and its end sends the events not sent yet with its outcome.
    """

    def __init__(self, outbox: Outbox, envelope: Envelope) -> None:
        self.outbox = outbox
        self.envelope = envelope
        self.batch: list[RunEvent] = []
        self.timer: asyncio.TimerHandle | None = None
        self.ended = False
        outbox.runs += 1

    def emit(self, event: RunEvent) -> None:
        """Send one of the run's events."""
        if self.ended:  # nothing follows a run's outcome
            return
        if not self.envelope.stream:
            self.outbox.add_lazy(self.envelope.state.run_id, event)
            return
        self.batch.append(event)
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(_BATCH_WINDOW_S, self._flush)

    def _flush(self) -> None:
        self.timer = None
        batch, self.batch = self.batch, []
        if batch:
            self.outbox.post(self.envelope.state.run_id, batch)

    def done(self, task: asyncio.Future[Outcome]) -> None:
        """The run's task ended: send its last events and its outcome (nothing if the task
        was cancelled: the actor is going away, and its callers recover the run)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.ended = True
        self.outbox.runs -= 1
        if task.cancelled():
            return
        outcome = _outcome_of(task, self.envelope.state)
        batch, self.batch = self.batch, []
        self.outbox.post(self.envelope.state.run_id, (batch, outcome) if batch else outcome)


def _wake(take: asyncio.Future[None]) -> None:
    if not take.done():
        take.set_result(None)


def _outcome_of(task: asyncio.Future[Outcome], state: RunState) -> Outcome:
    """A finished run's outcome; a failed one if the run's task itself raised (a bug here),
    so that its caller never waits for an outcome that cannot come."""
    try:
        return task.result()
    except Exception as exc:
        log.exception("run %s failed in its agent actor", state.run_id)
        error = RaygentsError(
            f"internal error in an agent actor: {type(exc).__name__}: {exc}", run_id=state.run_id
        )
        return Outcome("failed", state, error=error)
