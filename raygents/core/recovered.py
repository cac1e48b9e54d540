"""A recovered batch: its calls in doubt, the resolutions applied to them, and the marks of
the calls that start."""

from __future__ import annotations

from raygents.core.doubt import InDoubt
from raygents.core.envelope import RunState
from raygents.core.loop import Execute, RunTools
from raygents.core.messages import ToolCall
from raygents.core.toolcall import idempotency_key

__all__ = ["in_doubt", "mark_started", "settle"]


def settle(
    state: RunState, batch: RunTools, ask: frozenset[str], agent_name: str
) -> tuple[RunState, bool]:
    """Apply resolutions to a recovered batch, or find the calls still in doubt.

    A call of ``ask`` (the ids of the batch's ``on_recovery="ask"`` calls) is in doubt when
    ``state.started`` has it and the journal has no result for it. A resolution that gives
    a result goes into the journal (the call does not run); one that says rerun lets it run.
    Returns the new state and whether the batch must stop: then ``state.in_doubt`` lists
    the calls without a resolution, and nothing of the batch runs.
    """
    journal = dict(state.journal)
    undecided = []
    for step in batch.steps:
        if not isinstance(step, Execute):
            continue
        call = step.call
        if call.id not in ask or call.id not in state.started or call.id in journal:
            continue
        resolution = state.resolutions.get(call.id)
        if resolution is None:
            undecided.append(in_doubt(state, call, agent_name))
        elif resolution.result is not None:
            journal[call.id] = resolution.result
    if undecided:
        return state.evolve(in_doubt=tuple(undecided)), True
    if not state.resolutions and not state.in_doubt:
        return state, False
    return state.evolve(journal=journal, resolutions={}, in_doubt=()), False


def in_doubt(state: RunState, call: ToolCall, agent_name: str) -> InDoubt:
    """``call`` of ``state``'s pending batch as a call in doubt."""
    return InDoubt(
        call_id=call.id,
        agent_name=agent_name,
        tool_name=call.name,
        arguments=call.arguments,
        idempotency_key=idempotency_key(state.run_id, call.id),
        started_at=state.started.get(call.id, 0.0),
        run_id=state.run_id,
    )


def mark_started(state: RunState, batch: RunTools, ask: frozenset[str], now: float) -> RunState:
    """``state`` with the batch's ``ask`` calls that will run now marked as started at
    ``now`` (the record that holds it is written before any of them runs)."""
    started = dict(state.started)
    for step in batch.steps:
        if isinstance(step, Execute) and step.call.id in ask and step.call.id not in state.journal:
            started[step.call.id] = now
    return state if started == state.started else state.evolve(started=started)
