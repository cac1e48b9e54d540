"""Forks: a new run that starts from another run's state at one of its durable checkpoints,
with new input appended."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from raygents.agents.agent import Agent
from raygents.agents.hooks import RunHooks, wants_model_calls
from raygents.core.contextdata import revive
from raygents.core.envelope import Envelope, RunState, new_run_id
from raygents.core.messages import Usage
from raygents.errors import UserError
from raygents.ids import validate_id
from raygents.runtime.driver.client import current
from raygents.runtime.driver.handle import RunHandle
from raygents.runtime.driver.history import read_history
from raygents.runtime.driver.hookrelay import HookRelay
from raygents.runtime.driver.rootrun import Ending
from raygents.runtime.driver.runchecks import RunInput, check_run_args, input_messages, run_context
from raygents.runtime.driver.runs import _claimed, _launch
from raygents.runtime.driver.snapshot import snapshot
from raygents.runtime.driver.tracegroup import current_workflow
from raygents.runtime.link import blobstores

__all__ = ["fork"]


def fork(
    source: str,
    /,
    *,
    agent: Agent,
    at: int | None = None,
    input: RunInput | None = None,
    run_id: str | None = None,
    context: Any = None,
    timeout_s: float | None = None,
    max_turns: int | None = None,
    max_tokens: int | None = None,
    tenant: str | None = None,
    hooks: RunHooks | Sequence[RunHooks] | None = None,
) -> RunHandle:
    """Start a new run from run ``source``'s state at its durable checkpoint ``at``.

    The fork's conversation is the source's at that checkpoint (see :func:`history`; default:
    its newest), with ``input`` (a string or messages) appended as new user input when
    given. The source run and its records are left as they are, and the fork's records are
    its own. Tool calls whose results the checkpoint journaled are not run again; calls
    still owed a result (a fork from an ``"intent"`` checkpoint, without input) run in the
    fork, with idempotency keys of the fork's run id. The fork starts with its own turns,
    usage and limits (``max_turns``, ``max_tokens``), no session, and the source's context
    unless ``context`` is given. It starts as a new run does (the start agent's input
    guardrails see its conversation), unless it owes a batch its results: then it goes on as
    a resumed run, with that batch.

    A running run can be forked: from its durable checkpoints (what :func:`history` lists),
    never from a step it has not stored yet. A completed run's fork starts from its final
    state (its records are gone; its kept result holds its final messages).

    Args:
        source: the run to fork.
        agent: any agent whose graph contains the agent active at the checkpoint (a
            corrected one, say).
        at: the seq of the checkpoint to fork from (``Checkpoint.seq``).
        input: new user input appended to the conversation.
        run_id: the fork's run id (a fresh one by default).
        context: the fork's run context (default: the source's at the checkpoint).
        timeout_s: a wall-clock budget for the fork, as for :func:`start`.
        max_turns: caps ``max_turns`` of every agent in the fork.
        max_tokens: a token budget for the fork (its own usage starts at zero).
        tenant: whose quota of runs in flight the fork counts against.
        hooks: run-level hooks for the fork, as for :func:`start`.

    Raises:
        RunNotFound: nothing of ``source`` is kept.
        CheckpointNotFound: it has no durable checkpoint ``at``.
        UserError: an argument is invalid; ``run_id`` is taken; the checkpoint's agent is
            not in ``agent``'s graph; ``input`` follows tool calls still owed results; or
            ``source`` is an agent-as-tool child run.
        CheckpointError: its records cannot be read.
    """
    validate_id(source, "run id")
    check_run_args(agent, timeout_s, max_turns, max_tokens, hooks)
    if at is not None and (type(at) is not int or at < 1):
        raise UserError(f"at must be a checkpoint's seq (an int >= 1, see history()), got {at!r}")
    if run_id is not None:
        validate_id(run_id, "run id")
        if run_id == source:
            raise UserError(f"a fork needs a run id of its own, not its source's ({run_id!r})")
    if tenant is not None:
        validate_id(tenant, "tenant")
    added = input_messages(input) if input is not None else ()
    if context is not None:
        run_context(context)  # (refused before anything is read)
    state = read_history(source).state_at(at)
    _check_source(state, at, added)
    added = blobstores.keep(added, current().directory.cached_settings().store)
    graph, blob, fp, defs = snapshot(agent)
    if state.agent_name not in graph:
        raise UserError(
            f"run {source!r} was at agent {state.agent_name!r} at checkpoint {state.seq}, which "
            f"is not in the graph of {agent.name!r} (it has {sorted(graph)!r})",
            run_id=source,
        )
    state = _forked(state, run_id or new_run_id(), added, max_turns, max_tokens, tenant)
    if context is not None:
        value, stored = run_context(context)
        state = state.evolve(context=stored)
    else:
        value = None if state.context is None else revive(state.context)
    rt = current()
    envelope = Envelope(state, fp, value, llm_events=wants_model_calls(hooks))
    if run_id is not None:  # (claimed here: a taken id is refused as a start's is)
        client = rt.directory.client
        envelope = _claimed(
            envelope, *rt.ask(client.claim(run_id, rt.owner, state.agent_name, tenant))
        )
    last = state.messages[-1] if state.messages else None
    if last is not None and last.role == "assistant" and last.tool_calls:
        # resumed: the batch the checkpoint still owes results runs first (journaled calls
        # not); otherwise the fork starts as a new run does (input guardrails, on_run_start)
        envelope = dataclasses.replace(envelope, resumed=True)
    relay = HookRelay(hooks, graph, value) if hooks is not None else None
    if relay is not None:
        relay.run_started(state.run_id, graph[state.agent_name], state.messages)
    return _launch(
        rt,
        envelope,
        graph,
        (blob, defs),
        timeout_s,
        fresh_id=run_id is None,
        claimed=run_id is not None,
        ending=Ending(graph, relay=relay, context=value),
    )


def _check_source(source: RunState, at: int | None, added: tuple[Any, ...]) -> None:
    """Refuse a fork of an agent-as-tool child, and input after calls without results."""
    if source.parent_run_id is not None:
        raise UserError(
            f"run {source.run_id!r} is an agent-as-tool child of run {source.parent_run_id!r}: "
            "fork its top-level run instead",
            run_id=source.run_id,
        )
    last = source.messages[-1] if source.messages else None
    if added and last is not None and last.role == "assistant" and last.tool_calls:
        where = f"checkpoint {at}" if at is not None else "its newest checkpoint"
        raise UserError(
            f"run {source.run_id!r} at {where} waits for the results of tool calls: fork "
            "from there without input (the calls without a journaled result run in the fork), "
            "or from a checkpoint after their results",
            run_id=source.run_id,
        )


def _forked(
    source: RunState,
    run_id: str,
    added: tuple[Any, ...],
    max_turns: int | None,
    max_tokens: int | None,
    tenant: str | None,
) -> RunState:
    """The fork's first state: the source's conversation, journal and context, with ``added``
    appended; its own id, records, turns, usage, limits and session (none)."""
    return RunState(
        run_id=run_id,
        agent_name=source.agent_name,
        messages=(*source.messages, *added),
        input_len=source.input_len,
        max_turns=max_turns,
        max_tokens=max_tokens,
        response_format=source.response_format,
        start_agent=source.start_agent or source.agent_name,
        tenant=tenant,
        started_at=time.time(),
        context=source.context,
        journal=source.journal,
        context_writes=source.context_writes,
        tool_used_in_run=source.tool_used_in_run,
        rewritten=source.rewritten,
        usage=Usage(),
        workflow=current_workflow(),
    )
