"""``replay``: check, calling no model and no tool, that an agent graph makes a run's recorded
decisions again (before new agent code resumes the runs a store holds)."""

from __future__ import annotations

import asyncio
import copy
from concurrent.futures import ThreadPoolExecutor

from raygents.agents.agent import Agent, agent_graph
from raygents.agents.handoffs import Handoff
from raygents.core import loop
from raygents.core.envelope import RunState
from raygents.core.replay import ReplayReport
from raygents.core.replay import replay as replay_loop
from raygents.errors import UserError
from raygents.records.history import History
from raygents.runtime.actor.toolbox import Toolbox
from raygents.runtime.driver.history import read_history

__all__ = ["replay"]


def replay(run_id: str, *, agent: Agent, store: str | None = None) -> ReplayReport:
    """Re-drive the turn logic over run ``run_id``'s recorded model replies and tool
    results with ``agent``'s graph, calling no model and no tool, and report the first
    decision the graph makes differently.

    The recording is the run's conversation at its newest durable checkpoint (a completed
    run's: the final messages its kept result holds). The replay starts from the run's
    input on its start agent and checks each step: the tools and handoffs each reply calls
    exist and are answered as recorded (a renamed or removed tool, a handoff that changed,
    arguments the tool's schema now rejects), each agent's limits (``max_turns``,
    ``max_model_calls``) still let the run go on, and an ``output_type`` still parses the
    recorded answer. A run that stopped to wait (suspended, awaiting approval) agrees when
    the graph makes its decisions so far.

    Not checked: what tools return and what models answer (the recorded ones are used),
    ``is_enabled`` switches and dynamic instructions, guardrails, token budgets, and
    agent-as-tool children (their runs are their own).

    Args:
        run_id: the run to check.
        agent: the start agent of the graph to check (new code, say).
        store: read the run from this store (``file://``, ``s3://``), with no cluster.

    Raises:
        RunNotFound: nothing of the run is kept.
        UserError: the graph lacks the run's start agent or current agent, a compaction or
            a handoff's input filter rewrote the run's history (the error says which, as far
            as the records and the graph tell), or a completed run's kept result lost the
            oldest of its messages (too long to keep whole).
        CheckpointError: its records cannot be read.
    """
    if not isinstance(agent, Agent):
        raise UserError(f"agent must be an Agent, got {type(agent).__name__!r}")
    history = read_history(run_id, store=store)
    state = history.state_at(None)
    dropped = (history.marker or {}).get("messages_dropped")
    if history.marker is not None and dropped:
        raise UserError(
            f"run {run_id!r} completed with a history too long for its kept result, which "
            f"lost its oldest {dropped} messages: it cannot be replayed",
            run_id=run_id,
        )
    graph = agent_graph(agent)
    if state.rewritten:
        raise UserError(
            f"run {run_id!r} {_rewritten_by(history, state, graph)}: its recording no longer "
            "holds the conversation its decisions were made on, so it cannot be replayed",
            run_id=run_id,
        )
    # (a completed run's kept result names its start agent; one kept before it did, not)
    start_agent = state.start_agent or agent.name
    missing = sorted({start_agent, state.agent_name} - set(graph))
    if missing:
        raise UserError(
            f"run {run_id!r} ran agents {missing!r}, which are not in the graph of "
            f"{agent.name!r} (it has {sorted(graph)!r})",
            run_id=run_id,
        )
    status = "completed" if history.marker is not None else history.records[-1].get("status")
    return replay_loop(
        _start(state, start_agent),
        state.messages,
        _views(graph),
        outcome="completed"
        if status == "completed"
        else "failed"
        if status == "failed"
        else "stopped",
    )


def _rewritten_by(history: History, state: RunState, graph: dict[str, Agent]) -> str:
    """What rewrote a run's history: a compaction where its records or messages show one
    (a ``compacted`` checkpoint, a summary), else what the graph can do (compaction
    policies, handoff input filters), else either."""
    compacted = (
        state.session_summary is not None
        or any(m.summary for m in state.messages)
        or any(r.get("cause") == "compacted" for r in history.records)
    )
    policies = any(a.compaction is not None for a in graph.values())
    filters = any(
        isinstance(h, Handoff) and h.input_filter is not None
        for a in graph.values()
        for h in a.handoffs
    )
    if compacted or (policies and not filters):
        return "had its history compacted (a compaction policy shortened it)"
    if filters and not policies:
        return "went through a handoff whose input filter rewrote its history"
    return "had its history rewritten by a compaction or a handoff's input filter"


def _start(state: RunState, start_agent: str) -> RunState:
    """The run as it started: its input, on its start agent, with its run-level limits."""
    return RunState(
        run_id=state.run_id,
        agent_name=start_agent,
        start_agent=start_agent,
        messages=state.messages[: state.input_len],
        input_len=state.input_len,
        max_turns=state.max_turns,
        response_format=state.response_format,
    )


def _views(graph: dict[str, Agent]) -> dict[str, loop.AgentView]:
    """Each agent as the loop sees it (its tools, MCP servers' tools listed, and handoffs),
    built on copies: a toolbox binds the agent's output guardrails to its output type."""
    boxes = {name: Toolbox(copy.copy(agent)) for name, agent in graph.items()}

    async def resolve() -> None:
        for box in boxes.values():
            await box.resolve_tools()

    with ThreadPoolExecutor(1) as thread:  # (a loop of its own, whatever runs in this one)
        thread.submit(asyncio.run, resolve()).result()
    return {name: box.base_view() for name, box in boxes.items()}
