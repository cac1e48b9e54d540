"""Where the events and outcomes of dispatched runs come back: one mailbox per agent actor.

A process that dispatches runs (a driver, or an agent actor running agent-as-tool children)
starts them with plain actor calls, ``AgentActor.start`` (the runs it starts on one actor in
one turn of its event loop, such as a fan-out's children, in one call), and collects what all
its runs on that actor send back with one long-polling call at a time, ``AgentActor.take``. Under
load one reply carries the event batches and outcomes of many runs, where a stream per run
cost a Ray call per run and a reply per batch, on both sides.

Losing the actor reaches every run that is known to be there: a ``take`` that fails because
the actor died fails them, and so does a ``take`` answered by a new incarnation of the actor
(Ray restarted it) for the runs the old one had accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray
import ray.exceptions

from raygents.errors import RaygentsError
from raygents.runtime.link import wire
from raygents.runtime.link.coalesce import Coalescer
from raygents.runtime.link.handles import actor_key

__all__ = [
    "LOST",
    "RETIRED",
    "ActorRestarted",
    "ActorRetired",
    "Mailboxes",
    "RunBox",
    "pack",
    "unpack",
]

LOST = (
    ray.exceptions.RayActorError,
    ray.exceptions.ActorUnavailableError,
    ray.exceptions.OwnerDiedError,
    ray.exceptions.ObjectLostError,
)
"""Ray errors that mean "the actor (or its node) is gone or unreachable", not "the call failed"."""
RETIRED = "retired"
"""What ``AgentActor.start`` answers instead of its incarnation when it retires: it took none
of the runs (their caller looks the agent's actor up again)."""
_TAKE_WAIT_S = 5.0  # how long one take waits at the actor for something to send
_TAKE_AGAIN_S = 0.001  # after a take that brought items, the wait before the next one
_RETRY_S = 0.2  # pause before taking again after the actor was unreachable


def pack(items: list[tuple[str, Any]]) -> bytes:
    """A take's items as bytes, for :func:`unpack` in the caller.

    Events and outcomes are raygents' own types, which the standard pickler handles at about
    half the CPU of the cloudpickle Ray would use (see :mod:`raygents.runtime.link.wire`); whatever
    it refuses (an error holding a value of a class defined in ``__main__``) goes through
    cloudpickle.
    """
    return wire.dumps(items)


def unpack(blob: bytes) -> list[tuple[str, Any]]:
    """The items of a take's reply made by :func:`pack`."""
    items: list[tuple[str, Any]] = wire.loads(blob)
    return items


class ActorRestarted(RaygentsError):
    """The actor that accepted a run was restarted by Ray: the run is no longer there."""


class ActorRetired(RaygentsError):
    """The actor a run was sent to retires (it was idle) and did not take the run: the run
    goes to the agent's next actor as it is, with no recovery."""


@dataclass
class RunBox:
    """One dispatched run's view of its mailbox: what arrived for it, in order."""

    run_id: str
    items: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    instance: str | None = None
    """The incarnation of the actor that accepted the run (once ``start`` answered)."""
    check_from: int = 0
    """The first take whose answer tells whether that incarnation is still there."""


@dataclass
class _Box:
    actor: Any
    caller: str
    runs: dict[str, RunBox] = field(default_factory=dict)
    task: asyncio.Future[None] | None = None
    takes: int = 0
    """Takes sent so far (the one in flight has this number)."""
    instance: str | None = None
    """The newest incarnation of the actor seen (a take from another one returns at once)."""


_Start = tuple[Any, Any, "asyncio.Future[str]"]
"""A start waiting to go: the actor's handle, the envelope, and the caller's future."""


class Mailboxes:
    """The mailboxes of one process, by actor. Only used from one event loop."""

    def __init__(self) -> None:
        self._boxes: dict[str, _Box] = {}
        self._prefix = uuid.uuid4().hex[:12]
        self._generation = itertools.count()
        self._starts: Coalescer[tuple[str, str], _Start] = Coalescer(self._start_all)
        """Starts waiting for the end of this turn of the event loop, by actor and caller."""

    def open(self, actor: Any, run_id: str) -> tuple[str, RunBox]:
        """Register a run about to be started on ``actor``; returns the caller id to start it
        with, and the run's box. Call :meth:`close` when the run is done with the actor."""
        key = actor_key(actor)
        box = self._boxes.get(key)
        if box is None or box.task is None or box.task.done():
            # A fresh caller id per poller: a take left behind by an abandoned poller can
            # never take what belongs to a new one.
            box = _Box(actor, f"{self._prefix}.{next(self._generation)}")
            self._boxes[key] = box
            box.task = asyncio.ensure_future(self._poll(key, box))
        run = box.runs[run_id] = RunBox(run_id)
        return box.caller, run

    async def start(self, actor: Any, caller: str, run: RunBox, envelope: Any) -> str:
        """Start a run opened with :meth:`open` on ``actor``; returns the incarnation of the
        actor that accepted it (see :meth:`accepted`), or raises :class:`ActorRetired`.

        The starts made on one actor in one turn of the event loop go in one call. Should
        that call fail for another reason than a lost actor, each of its runs is started on
        its own, so that one run's unpicklable context fails only that run.
        """
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._starts.add((actor_key(actor), caller), (actor, envelope, future))
        instance = await future
        if instance == RETIRED:
            raise ActorRetired("the agent actor retires", run_id=run.run_id)
        self.accepted(actor, run, instance)
        return instance

    async def _start_all(self, key: tuple[str, str], starts: list[_Start]) -> None:
        starts = [start for start in starts if not start[2].done()]
        if not starts:  # (their runs were cancelled meanwhile)
            return
        actor, caller = starts[0][0], key[1]
        try:
            instance = await actor.start.remote([envelope for _, envelope, _ in starts], caller)
        except BaseException as exc:
            if len(starts) > 1 and isinstance(exc, Exception) and not isinstance(exc, LOST):
                await asyncio.gather(*(self._start_all(key, [one]) for one in starts))
                return
            for *_, future in starts:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for *_, future in starts:
            if not future.done():
                future.set_result(instance)

    def accepted(self, actor: Any, run: RunBox, instance: str) -> None:
        """``start`` answered: the actor incarnation ``instance`` has the run."""
        box = self._boxes.get(actor_key(actor))
        run.instance = instance
        run.check_from = box.takes + 1 if box is not None else 0
        if box is not None:
            box.instance = instance

    def close(self, actor: Any, run_id: str) -> None:
        """The run is done with ``actor`` (ended there, handed off, or lost)."""
        box = self._boxes.get(actor_key(actor))
        if box is not None:
            box.runs.pop(run_id, None)

    def abandon(self, actor: Any) -> None:
        """Stop polling ``actor`` (it stopped answering) once no run uses it."""
        key = actor_key(actor)
        box = self._boxes.get(key)
        if box is not None and not box.runs and box.task is not None:
            box.task.cancel()
            del self._boxes[key]

    def stop(self) -> list[asyncio.Future[None]]:
        """Cancel every poller (the process stops using raygents); returns them."""
        tasks = [b.task for b in self._boxes.values() if b.task is not None]
        tasks += self._starts.sending
        for task in tasks:
            task.cancel()
        self._boxes.clear()
        return tasks

    async def _poll(self, key: str, box: _Box) -> None:
        """Take from the actor while runs use the box; deliver each item to its run."""
        try:
            while True:
                box.takes += 1
                number = box.takes
                try:
                    instance, blob = await box.actor.take.remote(
                        box.caller, _TAKE_WAIT_S, box.instance
                    )
                    items = unpack(blob)
                except LOST as exc:
                    # The runs the actor had accepted before this take are gone with it;
                    # those still on their way learn from their own start call where they
                    # landed.
                    for run in _accepted_before(box, number):
                        run.items.put_nowait(exc)
                    if not box.runs:
                        return
                    await asyncio.sleep(_RETRY_S)
                    continue
                except Exception as exc:  # not a loss: no later take would do better
                    for run in box.runs.values():
                        run.items.put_nowait(
                            RaygentsError(
                                f"cannot take its events from the agent actor: {exc!r}",
                                run_id=run.run_id,
                            )
                        )
                    return
                _deliver(box, number, instance, items)
                if not box.runs and not items:
                    return
                if items:  # their runs go on before the next take is sent (a short pause)
                    await asyncio.sleep(_TAKE_AGAIN_S)
        finally:
            with contextlib.suppress(KeyError):
                if self._boxes[key] is box:
                    del self._boxes[key]


def _deliver(box: _Box, number: int, instance: str, items: list[tuple[str, Any]]) -> None:
    """Hand take ``number``'s items to their runs; fail the runs that another incarnation of
    the actor than ``instance``, the one that answered, had accepted."""
    box.instance = instance
    for run_id, item in items:
        target = box.runs.get(run_id)
        if target is not None:  # else: the run was lost, recovered elsewhere
            target.items.put_nowait(item)
    for run in _accepted_before(box, number, unless=instance):
        run.items.put_nowait(
            ActorRestarted("the agent actor was restarted while it had the run", run_id=run.run_id)
        )


def _accepted_before(box: _Box, number: int, unless: str | None = None) -> list[RunBox]:
    """The runs of ``box`` that an actor incarnation other than ``unless`` accepted before
    take ``number`` was sent."""
    return [
        run
        for run in box.runs.values()
        if run.instance not in (None, unless) and run.check_from <= number
    ]
