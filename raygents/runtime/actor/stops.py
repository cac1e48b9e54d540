"""How a run stops on an agent actor: a durable checkpoint for a suspend or an approval
interrupt, a stored failure or cancel; and what a written record tells the run (its
``checkpoint`` event and ``on_checkpoint`` hook)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import ray

from raygents.agents.agent import Agent
from raygents.agents.hooks import fire
from raygents.core.context import RunContext
from raygents.core.envelope import Outcome, OutcomeKind, RunState
from raygents.core.events import RunEvent
from raygents.errors import CheckpointError, RaygentsError, RunCancelled
from raygents.records import checkpoint
from raygents.runtime.actor.writer import RecordWriter
from raygents.telemetry import metrics, tracing

__all__ = ["Emit", "Stops", "send_event"]

log = logging.getLogger("raygents")

Emit = Callable[[RunEvent], None]


def send_event(emit: Emit, state: RunState, agent_name: str, kind: Any, **fields: Any) -> None:
    """Send the run's event ``kind`` (its own fields in ``fields``), with the run's turns and
    usage so far (what run-level hooks see in their context), but on text deltas."""
    if kind != "llm_delta":
        fields.setdefault("turns", state.turns)
        fields.setdefault("usage", state.usage)
    emit(RunEvent(type=kind, run_id=state.run_id, agent_name=agent_name, path=state.path, **fields))


class Stops:
    """The stops of the runs of one agent actor, through its record writer (set as
    ``writer`` once made: the writer calls :meth:`checkpointed`)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.writer: RecordWriter | None = None

    def _writer(self) -> RecordWriter:
        assert self.writer is not None
        return self.writer

    async def checkpointed(
        self, state: RunState, status: checkpoint.Status, emit: Emit | None
    ) -> None:
        """Report a written record: the ``checkpoint`` event and the ``on_checkpoint`` hook."""
        tracing.event("raygents.checkpoint", {"raygents.seq": state.seq, "raygents.status": status})
        data = {"seq": state.seq, "status": status}
        if emit is not None:
            send_event(emit, state, self.agent.name, "checkpoint", data=data)
        ctx = RunContext(state.run_id, self.agent.name, None, state.turns, state.usage)
        await fire(self.agent.hooks, "on_checkpoint", ctx, self.agent, state.seq, status)

    async def halt(
        self, state: RunState, status: checkpoint.Status, emit: Emit, *, cause: str | None = None
    ) -> Outcome:
        """Stop the run with a durable checkpoint (suspend or approval interrupt)."""
        kind: OutcomeKind = "suspended" if status == "suspended" else "interrupted"
        if kind == "suspended":
            metrics.suspended(self.agent.name)
        tracing.event(
            "raygents.suspend", {"raygents.status": status, "raygents.cause": cause or ""}
        )
        state = state.evolve(trace=tracing.ended(state))
        try:
            state = await self._writer().save(state, status, emit, cause=cause, durable=True)
        except (CheckpointError, ray.exceptions.RayError) as exc:
            log.error("run %s: cannot store its %s checkpoint: %s", state.run_id, status, exc)
            return Outcome(kind, state, cause=cause, checkpoint_error=str(exc))
        return Outcome(kind, state, cause=cause)

    async def fail(
        self, state: RunState, error: RaygentsError, status: checkpoint.Status = "failed"
    ) -> Outcome:
        """Store the run's failure (or cancel) at its next free seq: after the newest record
        this activation wrote, if it wrote any (``state`` is the one it started from)."""
        writer = self._writer()
        newest = writer.newest(state.run_id)
        if newest is not None and newest.seq > state.seq:
            state = newest
        try:
            state = await writer.save(state, status, None, error=str(error)[:2000], durable=True)
        except Exception as exc:  # the failure itself is what the caller must see
            log.warning("run %s: cannot store its %s checkpoint: %s", state.run_id, status, exc)
        return Outcome("failed", state, error=error)

    async def cancelled(self, state: RunState) -> Outcome:
        """The run was cancelled: store that (its records stay) and end it with RunCancelled."""
        log.info("run %s cancelled in agent %r", state.run_id, self.agent.name)
        error = RunCancelled("run cancelled", run_id=state.run_id)
        return await self.fail(state, error, "cancelled")
