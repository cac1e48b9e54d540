"""Starting and resuming runs from a driver: ``start``, ``run``, ``resume``, and ``runs``
(``attach`` is in :mod:`raygents.runtime.driver.attach`)."""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar

from raygents.agents.agent import Agent
from raygents.agents.hooks import RunHooks, wants_model_calls
from raygents.agents.result import RunResult, TypedResult
from raygents.agents.runstate import RunState as Waiting
from raygents.core.approvals import ApprovalDecision, PendingApproval, normalise
from raygents.core.contextdata import NotDurable, revive
from raygents.core.doubt import Resolution
from raygents.core.doubt import normalise as normalise_resolutions
from raygents.core.envelope import Envelope, RunState, new_run_id
from raygents.core.messages import ToolResult
from raygents.core.schema import type_name, type_schema
from raygents.errors import (
    RaygentsError,
    RunNotFound,
    UserError,
)
from raygents.ids import validate_id
from raygents.records import checkpoint
from raygents.records.runinfo import RunInfo
from raygents.runtime.driver.client import Runtime, current
from raygents.runtime.driver.handle import RunHandle
from raygents.runtime.driver.hookrelay import HookRelay
from raygents.runtime.driver.rootrun import Ending, GraphBlob, drive_root
from raygents.runtime.driver.runchecks import (
    RunInput,
    check_decisions,
    check_pending,
    check_resolutions,
    check_run_args,
    input_messages,
    run_context,
)
from raygents.runtime.driver.snapshot import snapshot
from raygents.runtime.driver.tracegroup import current_workflow
from raygents.runtime.link import blobstores
from raygents.runtime.link.drive import SuspendToken
from raygents.sessions import validate_session_id

__all__ = ["resume", "run", "run_streamed", "run_typed", "start", "start_each"]

T = TypeVar("T")


def start(
    agent: Agent,
    input: RunInput | Waiting,
    *,
    context: Any = None,
    run_id: str | None = None,
    session_id: str | None = None,
    timeout_s: float | None = None,
    max_turns: int | None = None,
    max_tokens: int | None = None,
    max_cost_usd: float | None = None,
    tenant: str | None = None,
    hooks: RunHooks | Sequence[RunHooks] | None = None,
    _stream: bool = False,
    _response_format: dict[str, Any] | None = None,
    _output_type: Any = None,
) -> RunHandle:
    """Start a run and return its handle at once.

    Args:
        agent: the start agent.
        input: a string (one user message) or messages / OpenAI-style dicts; or the
            :class:`~raygents.RunState` of an interrupted run with a decision on each of its
            pending calls, which resumes that run (with ``agent``'s graph, the state's
            context, and ``timeout_s`` and ``hooks`` if given; no other option).
        context: the run context, shared by tools, hooks and callbacks (see
            :mod:`~raygents.core.contextdata`): plain data, a dataclass or a pydantic model,
            kept in the run's checkpoints; or a ``NotDurable(value)``.
        run_id: the run's id: one store key segment of 1 to 128 ASCII letters, digits,
            ``.``, ``_`` and ``-`` (see :func:`raygents.ids.validate_id`); a fresh one by
            default.
        session_id: the conversation to load from and save to the agent's session.
        timeout_s: a wall-clock budget after which the run suspends (it is never killed).
        max_turns: caps ``max_turns`` of every agent in this run.
        max_tokens: a budget of tokens (input and output) for the run, its agent-as-tool
            children's included: once its usage reaches it, the run stops before its next
            model call with :class:`~raygents.UsageLimitExceeded` (a failure, checkpointed).
        max_cost_usd: a budget in US dollars for the run, its agent-as-tool children's
            included, counted at the models' prices (``init(prices=)``,
            ``ModelSettings(price=)``; a model without one fails the run): once its cost
            reaches it, the run stops before its next model call with
            :class:`~raygents.UsageLimitExceeded` (``limit`` ``"max_cost_usd"``). Children
            running side by side share what is left, so a run passes its budget by at most
            one model call per child.
        tenant: whose quota of runs in flight the run counts against, an id like ``run_id``
            (default: the default tenant's). See ``init(max_concurrent_runs=)``.
        hooks: run-level :class:`~raygents.RunHooks` (one object or a list), called in this
            driver, in order, for every agent of the run (handoff targets and agent-as-tool
            children included), from the run's events; ``result()`` returns once they ran.

    Raises:
        TooManyRuns: the tenant already has ``max_concurrent_runs`` runs in flight.
        UserError: the context cannot be stored as plain data (and is not ``NotDurable``).
    """
    if isinstance(input, Waiting):
        given: dict[str, object] = {
            "run_id": run_id,
            "session_id": session_id,
            "max_turns": max_turns,
        }
        given |= {"max_tokens": max_tokens, "max_cost_usd": max_cost_usd, "tenant": tenant}
        return _resume_state(
            agent,
            input,
            [k for k, v in given.items() if v is not None],
            context=context,
            timeout_s=timeout_s,
            hooks=hooks,
            stream=_stream,
        )
    ready = _prepare(
        agent,
        input,
        context=context,
        run_id=run_id,
        session_id=session_id,
        timeout_s=timeout_s,
        max_turns=max_turns,
        max_tokens=max_tokens,
        max_cost_usd=max_cost_usd,
        tenant=tenant,
        hooks=hooks,
        _stream=_stream,
        _response_format=_response_format,
        _output_type=_output_type,
    )
    return ready.launch(fresh_id=run_id is None)


def start_each(
    agent: Agent, items: Sequence[tuple[str, RunInput, Any]], **options: Any
) -> list[RunHandle | RaygentsError]:
    """:func:`start` of each ``(run_id, input, context)``, with every given id claimed in one
    coordinator call: per item, its handle or the error :func:`start` would have raised.

    Takes the options of :func:`start` (``run_id`` and ``context`` come with each item).
    """
    _check_options("start_each", options)
    ready: list[_Start | RaygentsError] = []
    for run_id, run_input, context in items:
        try:
            prepared = _prepare(agent, run_input, context=context, run_id=run_id, **options)
            _not_running_here(prepared.rt, run_id)  # (before its claim fences that run)
            ready.append(prepared)
        except RaygentsError as exc:
            ready.append(exc)
    starts = [r for r in ready if isinstance(r, _Start)]
    if not starts:
        return [r for r in ready if not isinstance(r, _Start)]
    rt = starts[0].rt
    if rt.directory.cached_settings().max_concurrent_runs is not None or any(
        rt.has_notes(s.envelope.state.run_id) for s in starts
    ):
        rt.send_notes()  # (as in _launch: ends noted here reach the coordinator first)
    claims = [
        (s.envelope.state.run_id, rt.owner, s.envelope.state.agent_name, s.envelope.state.tenant)
        for s in starts
    ]
    answers = iter(rt.ask(rt.directory.client.claim_runs(claims)))
    handles: list[RunHandle | RaygentsError] = []
    for r in ready:
        if not isinstance(r, _Start):
            handles.append(r)
            continue
        answer = next(answers)
        try:
            if isinstance(answer, RaygentsError):
                raise answer
            handles.append(r.launch(claim=answer))
        except RaygentsError as exc:
            handles.append(exc)
    return handles


@dataclasses.dataclass
class _Start:
    """A run :func:`start` made ready, to launch once its id is claimed."""

    rt: Runtime
    envelope: Envelope
    graph: dict[str, Agent]
    blob: GraphBlob
    timeout_s: float | None
    ending: Ending

    def launch(
        self, fresh_id: bool = False, claim: tuple[RunInfo | None, int] | None = None
    ) -> RunHandle:
        """Launch it: a ``fresh_id`` is claimed with the run, a ``claim`` made already (its
        answer from the coordinator) is checked, else the given id is claimed now."""
        envelope = self.envelope if claim is None else _claimed(self.envelope, *claim)
        return _launch(
            self.rt,
            envelope,
            self.graph,
            self.blob,
            self.timeout_s,
            fresh_id=fresh_id,
            claimed=claim is not None,
            ending=self.ending,
        )


def _prepare(
    agent: Agent,
    input: RunInput,
    *,
    context: Any = None,
    run_id: str | None = None,
    session_id: str | None = None,
    timeout_s: float | None = None,
    max_turns: int | None = None,
    max_tokens: int | None = None,
    max_cost_usd: float | None = None,
    tenant: str | None = None,
    hooks: RunHooks | Sequence[RunHooks] | None = None,
    _stream: bool = False,
    _response_format: dict[str, Any] | None = None,
    _output_type: Any = None,
) -> _Start:
    """Check :func:`start`'s arguments and build its run, not launched yet."""
    check_run_args(agent, timeout_s, max_turns, max_tokens, hooks, max_cost_usd)
    messages = input_messages(input)
    if session_id is not None:
        if agent.session is None:
            raise UserError(f"session_id was given but agent {agent.name!r} has no session")
        validate_session_id(session_id)
    if run_id is not None:
        validate_id(run_id, "run id")
    if tenant is not None:
        validate_id(tenant, "tenant")
    rt = current()
    messages = blobstores.keep(messages, rt.directory.cached_settings().store)
    if session_id is not None:
        rt.send_notes()  # this driver's last run on the session has released it
    value, stored = run_context(context)
    graph, blob, fp, defs = snapshot(agent)
    state = RunState(
        run_id=run_id or new_run_id(),
        agent_name=agent.name,
        messages=messages,
        input_len=len(messages),
        max_turns=max_turns,
        max_tokens=max_tokens,
        max_cost_usd=max_cost_usd,
        response_format=_response_format,
        session_id=session_id,
        start_agent=agent.name,
        tenant=tenant,
        started_at=time.time(),
        context=stored,
        workflow=current_workflow(),
    )
    llm_events = wants_model_calls(hooks)
    envelope = Envelope(state, fp, value, stream=_stream, llm_events=llm_events)
    relay = HookRelay(hooks, graph, value) if hooks is not None else None
    if relay is not None:
        relay.run_started(state.run_id, agent, messages)
    ending = Ending(graph, _output_type, relay, value)
    return _Start(rt, envelope, graph, (blob, defs), timeout_s, ending)


def _launch(
    rt: Runtime,
    envelope: Envelope,
    graph: dict[str, Agent],
    blob: GraphBlob,
    timeout_s: float | None,
    *,
    fresh_id: bool = False,
    claimed: bool = False,
    ending: Ending | None = None,
    numbered_after: int = 0,
) -> RunHandle:
    """Claim the run and drive it in the background.

    A run id raygents just generated cannot be taken, so its claim goes with the run (``start``
    returns without a round trip to the coordinator) unless runs in flight are limited (the
    claim then takes one of its tenant's slots, or raises ``TooManyRuns``); a given or
    resumed id is claimed here, so a clash raises at once (``claimed``: the caller did, and
    set the epoch).
    """
    run_id = envelope.state.run_id
    _not_running_here(rt, run_id)
    limited = rt.directory.cached_settings().max_concurrent_runs is not None
    if fresh_id and limited:
        fresh_id = False
    if not fresh_id and not claimed:
        if limited or rt.has_notes(run_id):  # (runs that ended here give their slots back
            rt.send_notes()  # first; or a run of this id just ended here)
        state = envelope.state
        flow = state.workflow
        group = (flow.group_id, flow.trace_id) if flow is not None else None
        client = rt.directory.client
        claim = rt.ask(client.claim(run_id, rt.owner, state.agent_name, state.tenant, group))
        envelope = _claimed(envelope, *claim)
    handle = RunHandle(run_id, rt, SuspendToken(run_id), numbered_after=numbered_after)
    handle._graph, handle._agent_name = graph, envelope.state.agent_name
    ending = ending or Ending(graph)
    if ending.relay is not None:
        handle._listener = ending.relay.event
    rt.handles[run_id] = handle
    replicas = {name: a.replicas for name, a in graph.items()}
    rt.submit(drive_root(rt, handle, envelope, blob, replicas, ending, timeout_s, fresh_id))
    if rt.suspending:  # (this driver is stopping: the run halts at its first safe point)
        handle.suspend()
    return handle


def _not_running_here(rt: Runtime, run_id: str) -> None:
    """Raises: UserError: a run of this id is running in this driver."""
    known = rt.handles.get(run_id)
    if known is not None and not known.done():
        raise UserError(f"run {run_id!r} is already running in this driver; use attach()")


def _claimed(envelope: Envelope, taken: RunInfo | None, epoch: int) -> Envelope:
    """The envelope of a run its driver claimed, at the claim's epoch.

    Raises:
        UserError: ``taken``: another owner runs it, or it completed.
    """
    run_id = envelope.state.run_id
    if taken is not None:
        if envelope.resumed:
            raise UserError(
                f"run {run_id!r} is already running elsewhere; use attach()", run_id=run_id
            )
        raise UserError(f"run id {run_id!r} is already in use ({taken.status}); pick another")
    return dataclasses.replace(envelope, state=envelope.state.evolve(epoch=epoch))


_RUN_OPTIONS = tuple(
    p.name
    for p in inspect.signature(start).parameters.values()
    if p.kind is p.KEYWORD_ONLY and not p.name.startswith("_")
)
"""The options of :func:`start` that the functions built on it pass through."""


def _check_options(function: str, options: dict[str, Any]) -> None:
    """Refuse an option :func:`start` does not take, naming ``function`` (the one called)."""
    for name in options:
        if name not in _RUN_OPTIONS:
            raise TypeError(
                f"{function}() got an unexpected keyword argument {name!r} (its options are "
                f"{', '.join(_RUN_OPTIONS)})"
            )


def run(agent: Agent, input: RunInput | Waiting, **options: Any) -> RunResult:
    """Run an agent to completion and return the result (blocks; for driver scripts).

    Takes the same options as :func:`start`.
    """
    _check_options("run", options)
    return start(agent, input, **options).result()


def run_streamed(agent: Agent, input: RunInput | Waiting, **options: Any) -> RunHandle:
    """Like :func:`start`, with every model call streamed; read ``handle.events()``."""
    _check_options("run_streamed", options)
    return start(agent, input, _stream=True, **options)


def run_typed(
    agent: Agent, input: RunInput, output_type: type[T], **options: Any
) -> TypedResult[T]:
    """Run with a strict JSON schema for ``output_type`` and return the parsed output.

    Raises:
        OutputValidationError: the final output does not match, with the failing paths.
    """
    _check_options("run_typed", options)
    if output_type is str or output_type is None:
        raise UserError(f"run_typed() needs a structured type, got {output_type!r}; use run()")
    try:
        schema = type_schema(output_type)
    except Exception as exc:
        raise UserError(f"cannot build a JSON schema for {output_type!r}: {exc}") from None
    response_format = {"name": type_name(output_type), "schema": schema}
    handle = start(
        agent, input, _response_format=response_format, _output_type=output_type, **options
    )
    return parse_typed(handle.result(), output_type)


def parse_typed(result: RunResult, output_type: type[T]) -> TypedResult[T]:
    """A run's result as a :class:`TypedResult` of ``output_type`` (its output parsed if the
    run did not parse it already)."""
    output = result.final_output_as(output_type)
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(RunResult)}
    fields["final_output"] = output
    return TypedResult(output=output, **fields)


def resume(
    run_id: str,
    *,
    agent: Agent,
    approvals: Mapping[str, ApprovalDecision | bool] | None = None,
    resolutions: Mapping[str, Literal["rerun"] | ToolResult] | None = None,
    context: Any = None,
    timeout_s: float | None = None,
    hooks: RunHooks | Sequence[RunHooks] | None = None,
    _pending: Sequence[PendingApproval] | None = None,
    _stream: bool = False,
) -> RunHandle:
    """Continue a suspended, interrupted or stopped run from its newest checkpoint.

    Works from any driver. Agents are resolved by name in ``agent``'s graph.

    Args:
        run_id: the run to continue.
        agent: any agent whose graph contains the agents named in the checkpoint.
        approvals: for a run awaiting approval, a decision (``ApprovalDecision`` or bool)
            for exactly each pending call id.
        resolutions: for a run in doubt (``RunInDoubt``), for exactly each call in doubt:
            ``"rerun"`` runs it again with the same idempotency key, a ``ToolResult`` is
            taken as its result (the outcome a person checked) and the call does not run.
        context: the run context for the rest of the run, instead of the one its checkpoint
            keeps (None: that one, as the run left it; a run started with a ``NotDurable``
            context needs it again).
        timeout_s: a new wall-clock budget.
        hooks: run-level hooks for the rest of the run, as for :func:`start` (their
            ``on_run_start`` gets the agent the run resumes on and its history).

    Raises:
        RunNotFound: no checkpoint exists for ``run_id``.
        ApprovalDecisionsMismatch: ``approvals`` does not cover exactly the pending calls.
        ResolutionsMismatch: ``resolutions`` does not cover exactly the calls in doubt.
        UserError: ``run_id`` is not a valid run id, or the run already completed, was
            cancelled, runs elsewhere, or names an unknown agent.
    """
    validate_id(run_id, "run id")
    check_run_args(agent, timeout_s, None, hooks=hooks)
    resolved = normalise_resolutions(resolutions)  # (refused before the run is claimed)
    if context is not None:
        run_context(context)  # (refused before the run is claimed)
    rt = current()
    known = rt.handles.get(run_id)
    if known is not None and not known.done():
        return known
    limited = rt.directory.cached_settings().max_concurrent_runs is not None
    if limited or rt.has_notes(run_id):  # ends here reach the coordinator before the claim
        rt.send_notes()  # (its own, and those of runs whose slots it may take)
    taken, epoch, blobs, before = rt.ask(rt.directory.client.claim_and_load(run_id, rt.owner))
    if taken is not None:
        raise UserError(f"run {run_id!r} is already running elsewhere; use attach()", run_id=run_id)
    if not blobs:
        raise RunNotFound(f"no checkpoint for run {run_id!r}", run_id=run_id)
    try:  # claimed: from here on, a failure puts the run's entry back
        key = rt.directory.cached_settings().key
        state, last = checkpoint.restore(blobs, run_id=run_id, key=key)
        if last.get("status") == "cancelled":
            raise UserError(f"run {run_id!r} was cancelled; it cannot be resumed", run_id=run_id)
        graph, blob, fp, defs = snapshot(agent)
        if state.agent_name not in graph:
            raise UserError(
                f"run {run_id!r} was at agent {state.agent_name!r}, which is not in the graph "
                f"of {agent.name!r} (it has {sorted(graph)!r})",
                run_id=run_id,
            )
        if _pending is not None:  # (the calls a person was shown: decided on them, or not at all)
            check_pending(state, tuple(_pending))
        decisions = check_decisions(state, normalise(dict(approvals or {})))
        check_resolutions(state, resolved)
    except BaseException:
        rt.ask(rt.directory.client.unclaim(run_id, before))
        raise
    mine = {p.call_id for p in state.pending if p.run_id == run_id}
    state = state.evolve(
        epoch=epoch,
        approvals={**state.approvals, **{k: v for k, v in decisions.items() if k in mine}},
        pending=(),
        resolutions=_mine(state, resolved),
        in_doubt=(),
    )
    state, value = _resumed_context(state, context)
    envelope = Envelope(
        state,
        fp,
        value,
        stream=_stream,
        llm_events=wants_model_calls(hooks),
        activate=False,
        resumed=True,
        approvals=decisions,
        resolutions=resolved,
    )
    relay = HookRelay(hooks, graph, value) if hooks is not None else None
    if relay is not None:
        relay.run_started(run_id, graph[state.agent_name], state.messages)
    ending = Ending(graph, relay=relay, context=value)
    numbered_after = before.events if before is not None else 0  # (its events number on)
    return _launch(
        rt,
        envelope,
        graph,
        (blob, defs),
        timeout_s,
        claimed=True,
        ending=ending,
        numbered_after=numbered_after,
    )


def _mine(state: RunState, resolved: dict[str, Resolution]) -> dict[str, Resolution]:
    """The resolutions of ``state``'s own calls in doubt (not its children's)."""
    mine = {d.call_id for d in state.in_doubt if d.run_id in ("", state.run_id)}
    return {**state.resolutions, **{k: v for k, v in resolved.items() if k in mine}}


def _resumed_context(state: RunState, context: Any) -> tuple[RunState, Any]:
    """A resumed run's state and context: ``context`` when given (checked before the claim),
    else the one its checkpoint keeps, as its class where this process has it."""
    if context is not None:
        value, stored = run_context(context)
        return state.evolve(context=stored), value
    return state, (None if state.context is None else revive(state.context))


def _resume_state(
    agent: Agent,
    waiting: Waiting,
    others: list[str],
    *,
    context: Any,
    timeout_s: float | None,
    hooks: RunHooks | Sequence[RunHooks] | None,
    stream: bool,
) -> RunHandle:
    """``start(agent, state)``: the interrupted run of ``state`` resumed with its decisions
    (``stream``: from ``run_streamed``).

    Raises:
        UserError: options other than ``context``, ``timeout_s`` and ``hooks`` were given,
            or a pending call has no decision.
    """
    if others:
        raise UserError(
            f"a RunState resumes its run: it takes context=, timeout_s= and hooks=, not "
            f"{', '.join(sorted(others))}"
        )
    undecided = waiting.undecided()
    if undecided:
        raise UserError(
            f"run {waiting.run_id!r} still has calls without a decision: {undecided!r}; "
            "approve or reject each of state.get_interruptions()",
            run_id=waiting.run_id,
        )
    value = context if context is not None else waiting.context
    if value is not None and not waiting.durable and not isinstance(value, NotDurable):
        value = NotDurable(value)
    return resume(
        waiting.run_id,
        agent=agent,
        approvals=dict(waiting.decisions),
        context=value,
        timeout_s=timeout_s,
        hooks=hooks,
        _pending=waiting.interruptions,
        _stream=stream,
    )
