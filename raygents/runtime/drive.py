"""Driving a run across agent actors: send the envelope, follow handoffs, relay events."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray

from raygents.envelope import Envelope, Outcome
from raygents.errors import RaygentsError
from raygents.events import RunEvent

if TYPE_CHECKING:
    from raygents.runtime.directory import Directory

__all__ = ["SuspendToken", "drive"]


class SuspendToken:
    """A run's suspend request, and the actor to tell about it.

    Lives in the process that drives the run (the driver for top-level runs, the parent's
    actor for agent-as-tool children); only touched from that process's event loop.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.cause: str | None = None
        self.actor: Any = None
        self.on_request: Callable[[str], None] | None = None

    def request(self, cause: str) -> None:
        """Ask for a suspend; the run stops at its next safe point."""
        if self.cause is None:
            self.cause = cause
        if self.actor is not None:
            self.actor.suspend.remote(self.run_id, self.cause)
        if self.on_request is not None:
            self.on_request(self.cause)


async def drive(
    envelope: Envelope,
    directory: Directory,
    token: SuspendToken,
    emit: Callable[[RunEvent], None],
) -> Outcome:
    """Run ``envelope`` to an end, hopping between actors on handoffs."""
    while True:
        name = envelope.state.agent_name
        actor = await directory.actor(envelope.graph_fp, name)
        if token.cause is not None:
            envelope = dataclasses.replace(envelope, suspend_cause=token.cause)
        token.actor = actor
        try:
            outcome = await _call(actor, envelope, emit)
        except ray.exceptions.RayError as exc:
            directory.forget(envelope.graph_fp, name, actor)
            error = RaygentsError(
                f"the actor of agent {name!r} failed while running the run: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                run_id=envelope.state.run_id,
            )
            return Outcome("failed", envelope.state, error=error)
        finally:
            token.actor = None
        if outcome.kind != "handoff":
            return outcome
        envelope = dataclasses.replace(envelope, state=outcome.state, activate=True)


async def _call(actor: Any, envelope: Envelope, emit: Callable[[RunEvent], None]) -> Outcome:
    outcome: Outcome | None = None
    async for ref in actor.run.remote(envelope):
        item = await ref
        if isinstance(item, Outcome):
            outcome = item
        else:
            for event in item:
                emit(event)
    if outcome is None:
        raise RaygentsError(f"agent actor ended run {envelope.state.run_id} without an outcome")
    return outcome
