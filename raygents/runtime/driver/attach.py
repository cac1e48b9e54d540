"""Runs that exist, from any driver: ``attach`` (a run's handle, with its events live from the
coordinator's relay, or the history its checkpoints hold replayed, then its end as the
coordinator reports it), ``cancel`` and ``runs`` (the run table)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast, get_args

from raygents.agents.agent import Agent
from raygents.agents.result import RunResult
from raygents.agents.tools import ToolResult
from raygents.core.approvals import PendingApproval
from raygents.core.contextdata import StoredContext, revive
from raygents.core.envelope import RunState
from raygents.core.events import RunEvent
from raygents.core.messages import Message, ToolCall, Usage
from raygents.core.schema import parse_output
from raygents.errors import (
    SUSPEND_FOR_CHECKPOINT,
    CheckpointError,
    OutputValidationError,
    RaygentsError,
    RunCancelled,
    RunInterrupted,
    RunNotFound,
    SuspendedError,
)
from raygents.ids import validate_id
from raygents.records.runinfo import RunInfo, RunStatus, RunSummary
from raygents.runtime.coordinator.relay import KEEP
from raygents.runtime.driver.client import Runtime, current
from raygents.runtime.driver.handle import RunHandle
from raygents.runtime.driver.runchecks import in_doubt_error
from raygents.runtime.driver.snapshot import known_agent
from raygents.runtime.link.drive import SuspendToken

__all__ = ["attach", "cancel", "runs"]


def attach(run_id: str) -> RunHandle:
    """A handle to a run, possibly started by another driver.

    A run of this driver that is running, or whose handle is still referenced, gives its own
    handle (with every event); a run this process follows already gives the same handle
    (one follower per run and process, whatever the number of readers). For other runs the
    handle resolves when the run ends (a
    completed run's result comes from the coordinator, or from the result its completion
    marker keeps in the store, e.g. after a restart of Ray), and the result's ``last_agent``
    is the agent of that name this process started a run with, whose ``output_type`` types
    ``final_output``; else a placeholder ``Agent`` carrying the agent's name
    (``final_output`` is then the final text; ``final_output_as(T)`` parses it).

    Their ``events()`` come live, through the coordinator's relay, from the process that
    drives the run (its driver, or the coordinator for a detached run): the events it keeps
    of the run (the newest 10,000), then each one as it happens (model text deltas of
    streamed runs, tool calls, handoffs, children's events with their ``path``, checkpoints),
    then the terminal event; each with its ``seq``, the same as in every other process
    (``events(after=seq)`` reconnects). The handle keeps the newest 10,000 events: a reader
    that falls further behind gets a ``lagged`` event and goes on (the run never waits for
    readers). A run whose events the relay does not have (it ended before anyone followed
    it, its events are no longer kept, or the process that drives it publishes none)
    replays what its newest checkpoint records (``agent_start``, a ``tool_start`` and
    ``tool_end`` for each tool call with a result, a ``handoff`` for each transfer, then a
    ``checkpoint`` with its seq; each with ``data["replayed"]`` and no ``seq``), and when
    the run ends, what it recorded since and its terminal event (numbered when the run
    table knows its number). A run awaiting approval raises :class:`RunInterrupted` with
    its pending calls (read from its newest checkpoint), which any driver can approve with
    :func:`resume`.

    Raises:
        UserError: ``run_id`` is not a valid run id.
        RunNotFound: the coordinator knows no such run.
    """
    validate_id(run_id, "run id")
    rt = current()
    handle = rt.handles.get(run_id)
    if handle is not None:
        return handle
    handle = rt.followed.get(run_id)
    if handle is not None and not handle.done():  # (one follower of a run per process)
        return handle
    rt.send_notes()
    info = rt.ask(rt.directory.client.get_run(run_id))
    if info is None:
        raise RunNotFound(f"run {run_id!r} is not known to the coordinator", run_id=run_id)
    token = SuspendToken(run_id)
    token.actor = rt.directory.client  # (it passes suspends and cancels to the run's actor)
    handle = RunHandle(run_id, rt, token, keep=KEEP)
    handle._set_status(_status(info.status))
    rt.followed[run_id] = handle
    rt.submit(_follow(rt, handle))
    return handle


_FOLLOW_WAIT_S = 10.0  # how long one ask of the relay waits for events
_FIRST_WAIT_S = 2.0  # ... the first one: a driver that publishes nothing by then is not asked


async def _relay(rt: Runtime, handle: RunHandle, *, first: bool = True) -> bool | None:
    """Give ``handle`` the run's events from the relay, until its terminal event.

    Returns True once the terminal event came (or the run's feed ended with one numbered
    before those the handle asked for), None when the relay has no feed of the run and it is
    not running; with ``first``, False when the process that drives the run did not answer
    the relay's first ask (a run driven by an older raygents, or by a process that is gone:
    the caller replays its history, then follows again, without ``first``).
    """
    after, wait_s = 0, (_FIRST_WAIT_S if first else _FOLLOW_WAIT_S)
    while True:
        reply = await rt.directory.client.relay_follow(handle.run_id, after, wait_s)
        for event in reply.events:
            seq = event.seq or after
            if after and seq > after + 1:  # (fell behind the relay: the oldest went)
                handle._relayed(_lagged(event, after + 1, seq - 1))
            handle._relayed(event)
            after = seq
            if event.is_terminal:
                return True
        if reply.state == "ended":
            return True
        if reply.state == "none":
            return None
        if reply.state == "waiting" and first and not after:
            return False
        wait_s = _FOLLOW_WAIT_S


def _lagged(event: RunEvent, low: int, high: int) -> RunEvent:
    data = {"missed": [low, high]}
    return RunEvent(type="lagged", run_id=event.run_id, agent_name=event.agent_name, data=data)


async def _follow(rt: Runtime, handle: RunHandle) -> None:
    relayed = await _relay(rt, handle)
    replay = _HistoryReplay(handle.run_id)
    state = None
    if not relayed:
        state = await _newest_state(rt, handle.run_id)
        if state is not None:
            _emit_replayed(
                handle, replay, state.agent_name, state.messages, state.journal, state.seq
            )
        if relayed is False:  # (running, with nobody relaying it: maybe later, once resumed)
            relayed = await _relay(rt, handle, first=False)
    info, summary = await rt.directory.client.wait(handle.run_id)
    if info is None:  # (forgotten meanwhile: the table keeps a bounded number of ended runs)
        gone = RunNotFound(f"run {handle.run_id!r} is no longer known", run_id=handle.run_id)
        handle._resolve(None, gone, "failed")
        return
    if not relayed:
        await _replay_end(rt, handle, replay, state, info, summary)
    await _resolve(rt, handle, info, summary, emit=not relayed)


async def _replay_end(
    rt: Runtime,
    handle: RunHandle,
    replay: _HistoryReplay,
    state: RunState | None,
    info: RunInfo,
    summary: RunSummary | None,
) -> None:
    """Replay what an ended run recorded since the history replayed so far."""
    if info.status == "completed" and summary is not None:
        messages = summary["messages"]
        _emit_replayed(handle, replay, summary["agent_name"], messages, {}, info.seq)
    elif info.seq != (state.seq if state is not None else 0):
        state = await _newest_state(rt, handle.run_id)
        if state is not None:
            journal = state.journal
            _emit_replayed(handle, replay, state.agent_name, state.messages, journal, state.seq)


async def _resolve(
    rt: Runtime, handle: RunHandle, info: RunInfo, summary: RunSummary | None, *, emit: bool
) -> None:
    """Resolve the handle of an ended run; with ``emit``, emit its terminal event first
    (numbered as the run table says, where it knows)."""
    base: dict[str, Any] = {
        "run_id": handle.run_id,
        "agent_name": info.agent_name,
        "turns": info.turns,
        "seq": info.events or None,
    }
    status = _status(info.status)
    if info.status == "completed" and summary is not None:
        result = _result(handle.run_id, summary)
        if emit:
            handle._relayed(RunEvent(type="complete", output=result.output_text, **base))
        handle._resolve(result, None, "completed")
        return
    error: RaygentsError
    if info.status == "suspended":
        error = SuspendedError(
            "agent run suspended", run_id=handle.run_id, cause=SUSPEND_FOR_CHECKPOINT
        )
    elif info.status == "in_doubt":
        state = await _newest_state(rt, handle.run_id)
        calls = list(state.in_doubt) if state is not None else []
        error = in_doubt_error(handle.run_id, calls)
        if emit:
            data = {"pending": [], "in_doubt": [d.model_dump() for d in calls]}
            handle._relayed(RunEvent(type="interrupted", data=data, **base))
        handle._resolve(None, error, status)
        return
    elif info.status == "awaiting_approval":
        pending = await _pending(rt, handle.run_id)
        error = RunInterrupted(
            f"run is waiting for approval of {len(pending)} tool call(s); resume it with decisions",
            run_id=handle.run_id,
            pending=pending,
        )
        if emit:
            data = {"pending": [p.model_dump() for p in pending]}
            handle._relayed(RunEvent(type="interrupted", data=data, **base))
        handle._resolve(None, error, status)
        return
    elif info.status == "cancelled":
        error = RunCancelled(info.last_error or "run cancelled", run_id=handle.run_id)
    elif info.status == "completed":  # (its marker kept no result, or cannot be read)
        error = RaygentsError(
            "run completed, but its result is not kept: it was stored in a memory:// store, "
            "by an older raygents, or its completion marker cannot be read (see the "
            "coordinator's log)",
            run_id=handle.run_id,
        )
    else:
        error = RaygentsError(
            info.last_error or f"run ended as {info.status}", run_id=handle.run_id
        )
    if emit:
        handle._relayed(RunEvent(type="error", error=str(error), **base))
    handle._resolve(None, error, status)


def _result(run_id: str, summary: RunSummary) -> RunResult:
    """A completed run's result from its summary: its final output parsed into the last
    agent's ``output_type`` where this process knows the agent (it started a run with its
    graph), else the text (also when the text does not parse: the run did complete)."""
    text = summary["final_output"]
    agent = known_agent(summary["agent_name"])
    output: Any = text
    if agent is not None:
        try:
            output = parse_output(text, agent.output_type, run_id=run_id)
        except OutputValidationError:
            output = text
    return RunResult(
        run_id=run_id,
        final_output=output,
        messages=tuple(summary["messages"]),
        output_text=text,
        usage=summary["usage"] or Usage(),
        turns=summary["turns"],
        last_agent=agent if agent is not None else Agent(summary["agent_name"]),
        input_count=summary.get("input_count", 0),
        context=_context(summary.get("context")),
    )


def _context(kept: Any) -> Any:
    """A kept run context as its class where this process has it, else its plain data;
    None when none was kept (or it does not read)."""
    if kept is None:
        return None
    try:
        return revive(StoredContext.model_validate(kept))
    except Exception:  # (a class that no longer validates it: the plain data)
        data = kept.get("data") if isinstance(kept, dict) else None
        return data


def _status(value: str) -> RunStatus:
    """A status from the run table, as a handle reports it."""
    if value not in get_args(RunStatus):
        raise RaygentsError(f"the run table holds an unknown run status {value!r}")
    return cast(RunStatus, value)


_REPLAYED = {"replayed": True}
_TRANSFERRED = "Transferred to "


class _HistoryReplay:
    """The events a run's recorded history implies, for a handle that did not see them live.

    Each look at a newer history (:meth:`events`) gives only what earlier looks did not: tool
    calls are known by their call id, so a run that went on between two looks adds its new
    calls only. Events before a run's first handoff carry an empty ``agent_name`` when the
    history has a handoff (it does not say which agent started the run).
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.seen: set[str] = set()
        self.first_agent: str | None = None

    def events(
        self,
        agent_name: str,
        messages: Sequence[Message],
        journal: Mapping[str, ToolResult],
    ) -> list[RunEvent]:
        """What ``messages`` (and the pending batch's finished calls in ``journal``) hold
        that this replay has not given yet; ``agent_name`` is the run's current agent."""
        results: dict[str, ToolResult] = dict(journal)
        for m in messages:
            if m.role == "tool" and m.tool_call_id is not None:
                results[m.tool_call_id] = ToolResult(m.text)
        calls = [c for m in messages if m.role == "assistant" for c in m.tool_calls]
        handoffs = [c for c in calls if _handoff_target(c, results) is not None]
        if self.first_agent is None:
            self.first_agent = "" if handoffs else agent_name
        agent = self.first_agent
        out: list[RunEvent] = []
        if agent and self._new("agent_start"):
            out.append(self._event("agent_start", agent))
        for c in calls:
            if c.id not in results:
                continue
            target = _handoff_target(c, results)
            if target is not None:
                if self._new(c.id):
                    out.append(self._event("handoff", agent, to_agent=target))
                    out.append(self._event("agent_start", target))
                agent = target
                continue
            if not self._new(c.id):
                continue
            result = results[c.id]
            start = {"tool_name": c.name, "call_id": c.id}
            out.append(self._event("tool_start", agent, arguments=c.arguments, **start))
            end = {"result": result.content, "is_error": result.is_error}
            out.append(self._event("tool_end", agent, **start, **end))
        return out

    def _new(self, key: str) -> bool:
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def _event(self, kind: Any, agent_name: str, **fields: Any) -> RunEvent:
        return RunEvent(
            type=kind, run_id=self.run_id, agent_name=agent_name, data=_REPLAYED, **fields
        )


def _handoff_target(call: ToolCall, results: Mapping[str, ToolResult]) -> str | None:
    """The agent a ``transfer_to_*`` call with a result handed the run to, else None."""
    result = results.get(call.id)
    if result is None or result.is_error or not call.name.startswith("transfer_to_"):
        return None
    if not result.content.startswith(_TRANSFERRED):
        return None
    return result.content[len(_TRANSFERRED) :] or None


def _emit_replayed(
    handle: RunHandle,
    replay: _HistoryReplay,
    agent_name: str,
    messages: Sequence[Message],
    journal: Mapping[str, ToolResult],
    seq: int,
) -> None:
    """Emit what ``replay`` has not given yet of a history, then a ``checkpoint`` event."""
    for event in replay.events(agent_name, messages, journal):
        handle._relayed(event)
    if seq > 0 and replay._new(f"seq:{seq}"):
        data = {"seq": seq, **_REPLAYED}
        handle._relayed(
            RunEvent(type="checkpoint", run_id=handle.run_id, agent_name=agent_name, data=data)
        )


async def _newest_state(rt: Runtime, run_id: str) -> RunState | None:
    """The run's state at its newest checkpoint (the coordinator's copy, else the store's), or
    None when it has none or it cannot be read (the terminal event still comes)."""
    try:
        found = await rt.directory.client.load_state(run_id)
    except CheckpointError:
        return None
    return found[0] if found is not None else None


async def _pending(rt: Runtime, run_id: str) -> list[PendingApproval]:
    """The calls a run awaiting approval waits for, from its newest checkpoint (the
    coordinator's copy, else the store's)."""
    found = await rt.directory.client.load_state(run_id)
    return list(found[0].pending) if found is not None else []


def cancel(run_id: str) -> None:
    """Cancel a run that has not ended, started by this driver or another one.

    A running run stops at once (see :meth:`RunHandle.cancel`). A suspended or
    awaiting-approval run (and its stopped agent-as-tool children) is cancelled where it
    lies: a ``cancelled`` record is stored after its newest checkpoint, so that its pending
    calls can no longer be approved and it can no longer be resumed (:func:`resume` raises
    a ``UserError`` that says it was cancelled); its status is ``cancelled`` and its records
    stay, until retention or ``raygents gc`` removes them. A run that ended is left as it is.

    Raises:
        UserError: ``run_id`` is not a valid run id.
        RunNotFound: the coordinator knows no such run.
        CheckpointError: a stopped run's records cannot be read (it is left as it was).
    """
    validate_id(run_id, "run id")
    rt = current()
    handle = rt.handles.get(run_id)
    if handle is not None and not handle.done():
        handle.cancel()
        return
    rt.send_notes()
    info = rt.ask(rt.directory.client.cancel(run_id))
    if info is None:
        raise RunNotFound(f"run {run_id!r} is not known to the coordinator", run_id=run_id)
    if handle is not None and info.status == "cancelled":  # (its stop was its end, then)
        handle._set_status("cancelled")
        rt.handles.pop(run_id, None)  # (attach follows the run as the coordinator has it)


def runs(status: str | None = None) -> list[RunInfo]:
    """What the coordinator knows about runs, optionally only those with ``status``."""
    rt = current()
    rt.send_notes()
    return rt.ask(rt.directory.client.list_runs(status))
