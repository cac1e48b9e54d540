"""Idleness: how long an agent actor has held nothing a caller still needs, and the waits
before it retires (``raygents.init(idle_actor_s=)``, or a newer definition of its agent).

What a caller still needs from an actor is what lives in the actor: its runs in flight
(agent-as-tool parents waiting for their children included), what its runs sent that their
callers have not taken yet, and suspend requests for runs on their way to it. A run that
suspended, or parked awaiting approval or in doubt, left nothing here: its state is in its
checkpoint, and its resume looks the agent's actor up again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray

from raygents.runtime.actor.outbox import Outboxes
from raygents.runtime.link.coordinator_client import CoordinatorClient

__all__ = ["Idleness", "holds", "quiet", "retiring", "watch"]

log = logging.getLogger("raygents")


def holds(
    active: Mapping[str, Any],
    outboxes: Outboxes,
    early: Mapping[str, tuple[str, float, int | None]],
    early_s: float,
) -> bool:
    """Whether an actor holds something a caller still needs: runs in flight (``active``),
    what they sent to callers that still take, or suspend requests, ``(cause, when,
    epoch)`` by run, that are not ``early_s`` old (their runs may be on their way)."""
    if active or outboxes.awaited():
        return True
    now = time.monotonic()
    return any(now - asked < early_s for _, asked, _ in early.values())


class Idleness:
    """When the actor last held something a caller still needs.

    Args:
        busy: whether it holds something now.
        clock: seconds, monotonic.
    """

    def __init__(
        self, busy: Callable[[], bool], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._busy = busy
        self._clock = clock
        self.since = clock()

    def touch(self) -> None:
        """Something happened (a run arrived or ended): idleness counts from now."""
        self.since = self._clock()

    def idle_for(self) -> float:
        """Seconds the actor has been idle (0 while it holds something)."""
        if self._busy():
            self.touch()
            return 0.0
        return self._clock() - self.since


async def watch(idleness: Idleness, idle_s: float) -> None:
    """Return once the actor has been idle for ``idle_s``. One timer per ``idle_s`` while it
    is idle (runs that come and go :meth:`~Idleness.touch` the clock themselves), four while
    it holds something: what it holds otherwise (items its callers have not taken, suspend
    requests) ends unseen, within a quarter of ``idle_s``."""
    while True:
        idle = idleness.idle_for()
        if idle >= idle_s:
            return
        await asyncio.sleep(idle_s - idle if idle > 0 else idle_s / 4)


async def retiring(
    client: CoordinatorClient, graph_fp: str, agent_name: str, actor_id: str, idle_s: float
) -> None:
    """Have the coordinator stop handing out the actor ``actor_id`` (it retires: idle for
    ``idle_s``); a coordinator gone for good is logged (its actors go anyway)."""
    log.info("agent %r: idle for %.0f s; its actor %s retires", agent_name, idle_s, actor_id)
    try:
        await client.actor_retiring(graph_fp, agent_name, actor_id)
    except ray.exceptions.RayError as exc:
        log.warning("agent %r: cannot tell the coordinator its actor retires: %s", agent_name, exc)


async def quiet(active: Callable[[], bool], outboxes: Outboxes, grace_s: float) -> None:
    """Return once no run has been ``active()`` for ``grace_s`` and their callers took what
    they sent (those that have not taken anything for ``_OUTBOX_IDLE_S`` are gone: see
    :meth:`Outboxes.awaited`)."""
    idle_since = None
    while True:
        now = time.monotonic()
        if active() or outboxes.awaited():
            idle_since = None
        else:
            idle_since = idle_since or now
            if now - idle_since >= grace_s:
                return
        await asyncio.sleep(0.1)
