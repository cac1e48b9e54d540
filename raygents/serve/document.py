"""The JSON documents the API answers with: a run's info and outcome, its messages, an
event, all built from what the coordinator and the store hold (nothing kept here)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import TypeAdapter

from raygents.agents.agent import Agent
from raygents.agents.result import RunResult
from raygents.core.envelope import RunState
from raygents.core.events import RunEvent
from raygents.core.messages import Message, Usage
from raygents.core.schema import is_typed, parse_output
from raygents.errors import CheckpointError, RaygentsError, RunNotFound
from raygents.records.runinfo import RunInfo, RunSummary
from raygents.runtime.driver.client import current

__all__ = [
    "RUNNING",
    "ENDED",
    "ask",
    "event_document",
    "info_document",
    "messages_document",
    "run_document",
    "run_state",
]

T = TypeVar("T")
RUNNING = frozenset({"running", "pending", "unknown"})
"""The run table's statuses that a document calls ``running``."""
ENDED = frozenset(
    {"completed", "failed", "suspended", "awaiting_approval", "in_doubt", "cancelled"}
)
"""The statuses of a run that stopped (a suspended or interrupted run may go on later)."""


async def ask(call: Coroutine[Any, Any, T]) -> T:
    """Make a coordinator call on raygents' own loop and await its answer from another loop
    (a replica's), without holding a thread."""
    return await asyncio.wrap_future(current().submit(call))


def usage_document(usage: Usage | None) -> dict[str, int]:
    """A usage's counts (zeros where none is known)."""
    return (usage or Usage()).model_dump(mode="json")


def event_document(event: RunEvent) -> dict[str, Any]:
    """An event as JSON, with only the fields its type sets."""
    return event.model_dump(mode="json", exclude_none=True)


def messages_document(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as Chat Completions message dicts."""
    return [m.to_openai() for m in messages]


def output_json(text: str, agent: Agent | None) -> Any:
    """A final output as JSON: parsed into the agent's ``output_type`` where it has one (and
    it parses), else the text."""
    if agent is None or not is_typed(agent.output_type):
        return text
    try:
        value = parse_output(text, agent.output_type)
        return TypeAdapter(agent.output_type).dump_python(value, mode="json")
    except (RaygentsError, ValueError, TypeError):
        return text


def info_document(info: RunInfo) -> dict[str, Any]:
    """What the run table says of a run."""
    return {
        "run_id": info.run_id,
        "status": "running" if info.status in RUNNING else info.status,
        "last_agent": info.agent_name,
        "turns": info.turns,
        "attempts": info.attempts,
        "started_at": info.started_at,
        "updated_at": info.updated_at,
        "parent": info.parent,
        "tenant": info.tenant,
    }


async def run_state(run_id: str) -> RunState | None:
    """The run's state at its newest checkpoint, or None (none, or unreadable)."""
    try:
        found = await ask(current().directory.client.load_state(run_id))
    except CheckpointError:
        return None
    return found[0] if found is not None else None


async def run_info(run_id: str) -> RunInfo:
    """The run table's entry.

    Raises:
        RunNotFound: the coordinator knows no such run.
    """
    info = await ask(current().directory.client.get_run(run_id))
    if info is None:
        raise RunNotFound(f"run {run_id!r} is not known", run_id=run_id)
    return info


async def _summary(info: RunInfo) -> RunSummary | None:
    if info.status != "completed":
        return None
    _, summary = await ask(current().directory.client.wait(info.run_id))
    return summary


async def run_document(
    run_id: str,
    agents: Mapping[str, Agent],
    *,
    info: RunInfo | None = None,
    error: BaseException | None = None,
    result: RunResult | None = None,
    messages: bool = False,
) -> dict[str, Any]:
    """A run's info and outcome: ``status``, ``output`` (typed output as JSON), ``usage``,
    ``turns``, ``last_agent``, ``error`` ``{type, message}``, ``pending`` (approvals); with
    ``messages``, its conversation. ``error``: the error its caller saw, if any (its type is
    then exact; else it is told by the status); ``result``: the result it saw, if any (read
    from no one else then).

    Raises:
        RunNotFound: the coordinator knows no such run.
    """
    info = info or await run_info(run_id)
    doc = info_document(info)
    if result is not None and info.status == "completed":  # (its result says it all)
        doc["output"] = output_json(result.output_text, _agent(agents, result.last_agent.name))
        doc["usage"] = usage_document(result.usage)
        doc["turns"] = result.turns
        doc["agent"], doc["pending"], doc["error"] = None, [], None
        if messages:
            doc["messages"] = messages_document(result.messages)
        return doc
    summary = await _summary(info)
    state = None if summary is not None else await run_state(run_id)
    doc["agent"] = state.start_agent if state is not None and state.start_agent else None
    doc["output"] = None
    doc["pending"] = []
    doc["error"] = None
    if summary is not None:
        last = summary["agent_name"]
        doc["output"] = output_json(summary["final_output"], _agent(agents, last))
        doc["usage"] = usage_document(summary["usage"])
        doc["turns"] = summary["turns"]
        history: Sequence[Message] = summary["messages"]
    else:
        doc["usage"] = usage_document(state.usage if state is not None else None)
        if state is not None:
            doc["pending"] = [p.model_dump(mode="json") for p in state.pending]
            if state.in_doubt:
                doc["in_doubt"] = [d.model_dump(mode="json") for d in state.in_doubt]
        history = state.messages if state is not None else ()
    if info.status in ("failed", "cancelled"):
        kind = type(error).__name__ if error is not None else _error_type(info.status)
        doc["error"] = {"type": kind, "message": str(error or info.last_error or info.status)}
    if messages:
        doc["messages"] = messages_document(history)
    return doc


def _agent(agents: Mapping[str, Agent], name: str) -> Agent | None:
    """The served agent of that name, or the agent of that name in a served agent's graph."""
    if name in agents:
        return agents[name]
    from raygents.agents.agent import agent_graph

    for agent in agents.values():
        found = agent_graph(agent).get(name)
        if found is not None:
            return found
    return None


def _error_type(status: str) -> str:
    return "RunCancelled" if status == "cancelled" else "RunFailed"
