"""Beats: how an agent actor shows it is alive when calls to it are slow to arrive.

A run's caller pings the agent actor every ``heartbeat_s`` and replaces an actor that leaves a
ping unanswered for ``stale_after_s``. Ray delivers calls *to* an actor through the actor's core
worker, and that worker can hold them for tens of seconds while the actor submits thousands of
tasks that Ray has to start workers for (``num_cpus=0`` tool tasks under load: the bare Ray
actor of the benchmarks' floor does the same). Calls *from* the actor keep flowing meanwhile.

So each agent actor also sends a beat to the coordinator from a thread of its own while it has
runs, with how long its event loop has left a callback waiting. A caller whose ping is late asks
the coordinator for the actor's newest beat (:meth:`Beats.of`), and judges the actor stale only
when that beat is as old as the ping, or reports a loop wedged that long. A frozen process
(``SIGSTOP``, a hung host) or a cut-off node sends no beats; a busy one does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from raygents.runtime.link.coordinator_client import CoordinatorClient
from raygents.telemetry import tracing

__all__ = ["Beater", "Beats", "watch_coordinator"]

log = logging.getLogger("raygents")

_FORGET_AFTER_S = 600.0  # the beats of an actor that stopped beating this long ago are dropped


class Beater:
    """The actor's side: a daemon thread that calls ``send(lag)`` every ``every_s`` while
    ``busy()``, where ``lag`` is how long ``loop`` has left a callback waiting (0 when the
    callback it was asked to run last time has run).

    ``send`` returns an object ref (a fire-and-forget actor call); its reply is collected
    when it comes (:func:`_collect`), so that a failed one (the coordinator restarting) is not
    reported as an unhandled error.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        send: Callable[[float], Any],
        every_s: float,
        busy: Callable[[], bool],
    ) -> None:
        self._loop = loop
        self._send = send
        self._every_s = every_s
        self._busy = busy
        self._asked: float | None = None
        """When the loop was asked to run a callback that has not run yet."""
        self.thread = threading.Thread(target=self._run, name="raygents-beat", daemon=True)
        """Lives as long as the actor's process, or until the loop is closed."""

    def start(self) -> Beater:
        """Start the thread; returns the beater."""
        self.thread.start()
        return self

    def lag(self) -> float:
        """How long the loop has left the callback asked for earlier waiting; asks for a new
        one once it ran."""
        now = time.monotonic()
        asked = self._asked
        if asked is not None:
            return now - asked
        self._asked = now
        self._loop.call_soon_threadsafe(self._answered)
        return 0.0

    def _answered(self) -> None:
        self._asked = None

    def _run(self) -> None:
        while True:
            time.sleep(self._every_s)
            if not self._busy():
                continue
            try:
                _collect(self._send(self.lag()))
            except RuntimeError:  # the loop is closed: the actor is exiting
                return


def _collect(ref: Any) -> None:
    """Fetch a beat's reply when it comes, and drop it. Not with ``ray.get``: in an async
    actor's process Ray reports any ``ray.get`` as a blocked event loop, even from another
    thread and for a reply already there."""
    if isinstance(ref, ray.ObjectRef):
        ref.future().add_done_callback(_dropped)


def _dropped(reply: concurrent.futures.Future[Any]) -> None:
    reply.exception()  # (the failure is the coordinator's to report)


class Beats:
    """The coordinator's side: the newest beat of each agent actor, by actor id."""

    def __init__(self) -> None:
        self._newest: dict[str, tuple[float, float]] = {}
        self._count = 0

    def beat(self, actor_id: str, lag: float) -> None:
        """Actor ``actor_id`` is alive, and its event loop has left a callback waiting for
        ``lag`` seconds."""
        now = time.monotonic()
        self._newest[actor_id] = (now, lag)
        self._count += 1
        if self._count % 1024 == 0:
            self._newest = {k: v for k, v in self._newest.items() if now - v[0] < _FORGET_AFTER_S}

    def of(self, actor_id: str) -> tuple[float, float] | None:
        """``(seconds since the actor's newest beat, the loop lag it reported)``, or ``None``
        when it has not beaten here (yet, or since this coordinator started)."""
        found = self._newest.get(actor_id)
        if found is None:
            return None
        return time.monotonic() - found[0], found[1]

    def forget(self, actor_id: str) -> None:
        """The actor was replaced or retired."""
        self._newest.pop(actor_id, None)


async def watch_coordinator(
    coordinator: CoordinatorClient, every_s: float, agent_name: str
) -> None:
    """Exit this agent actor once the coordinator is gone for good (its driver ended without
    closing raygents, or it was removed): agent actors are detached, so that they keep running
    while it restarts, and nothing else would stop them. Their runs are recovered by whoever
    dispatched them, with the coordinator that takes over, as when an actor dies."""
    while True:
        await asyncio.sleep(every_s)
        try:
            await coordinator.ready()
        except ray.exceptions.ActorDiedError:
            break
        except ray.exceptions.RayError:
            continue  # (restarting, or a hiccup: it answers again later)
    log.warning("agent %r: its coordinator is gone for good; this actor exits", agent_name)
    tracing.flush()
    ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
