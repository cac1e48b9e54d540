"""A top-level run driven from its driver: the drive itself (here, or by the coordinator for a
detached namespace), and its end: the result or the error, the last event, the run table's
note, the hooks' ``on_run_end``."""

from __future__ import annotations

import dataclasses
from typing import Any

from raygents.agents.agent import Agent
from raygents.agents.result import RunResult
from raygents.agents.runstate import RunState as Waiting
from raygents.agents.tooluse import final_value
from raygents.core.contextdata import assign, revive
from raygents.core.envelope import Envelope, Outcome, RunState
from raygents.core.schema import parse_output
from raygents.errors import (
    SUSPEND_FOR_CHECKPOINT,
    OutputValidationError,
    RaygentsError,
    RunInterrupted,
    SuspendedError,
)
from raygents.records.runinfo import RunStatus, outcome_entry, outcome_status
from raygents.runtime.driver.client import Runtime
from raygents.runtime.driver.handle import RunHandle
from raygents.runtime.driver.hookrelay import HookRelay
from raygents.runtime.driver.runchecks import in_doubt_error
from raygents.runtime.link.drive import drive
from raygents.runtime.link.ending import failure_of, terminal_event

__all__ = ["Ending", "GraphBlob", "drive_root"]

GraphBlob = tuple[bytes, dict[str, str]]
"""A graph snapshot's pickle and its agents' definition fingerprints, by name."""


async def drive_root(
    rt: Runtime,
    handle: RunHandle,
    envelope: Envelope,
    blob: GraphBlob,
    replicas: dict[str, int],
    ending: Ending,
    timeout_s: float | None,
    claim: bool = False,
) -> None:
    state = envelope.state
    timer = None
    publishing = not rt.detached  # (else the coordinator drives the run, and relays it)
    if publishing:
        rt.publisher.started()
    try:
        if claim:  # a generated id: nobody else has claimed it, so its first epoch is 1
            envelope = dataclasses.replace(envelope, state=state.evolve(epoch=1))
            group = (state.workflow.group_id, state.workflow.trace_id) if state.workflow else None
            rt.note("claim", state.run_id, rt.owner, state.agent_name, False, None, group)
        await rt.ensure_graph(envelope.graph_fp, blob[0], replicas, blob[1])
        if timeout_s is not None:
            timer = rt.loop.call_later(timeout_s, handle._token.request, SUSPEND_FOR_CHECKPOINT)
        handle._set_status("running")
        if rt.detached:  # the coordinator drives it, so it outlives this driver
            outcome = await _drive_detached(rt, handle, envelope)
        else:
            directory = rt.directory
            outcome = await drive(
                envelope,
                directory,
                handle._token,
                handle._emit,
                client=directory.client,
                mailboxes=directory.mailboxes,
            )
    except Exception as exc:
        error = (
            exc if isinstance(exc, RaygentsError) else RaygentsError(f"{type(exc).__name__}: {exc}")
        )
        outcome = Outcome("failed", state, error=error.with_run_id(state.run_id))
    finally:
        if timer is not None:
            timer.cancel()
    try:
        result, failure, status = _finish(rt, handle, outcome, ending)
    finally:
        if publishing:
            rt.publisher.ended()
    if ending.relay is not None:
        output = result.final_output if result is not None else None
        ending.relay.run_ended(outcome.state.run_id, outcome.state.agent_name, output, failure)
        await ending.relay.drain()
    handle._resolve(result, failure, status)


async def _drive_detached(rt: Runtime, handle: RunHandle, envelope: Envelope) -> Outcome:
    token = handle._token
    token.actor, token.epoch = rt.directory.client, envelope.state.epoch  # (it passes them on)
    if token.cause is not None:  # asked before: it goes with the run
        envelope = dataclasses.replace(envelope, suspend_cause=token.cause)
    outcome: Outcome | None = None
    async for ref in rt.directory.client.drive_root(envelope):
        item = await ref
        if isinstance(item, tuple):  # (the end: the outcome, and the table's entry after it)
            outcome, handle._entry = item
        else:
            for event in item:
                handle._emit(event)
    handle._token.actor = None
    if outcome is None:
        raise RaygentsError(
            "the coordinator ended the run without an outcome", run_id=handle.run_id
        )
    return outcome


@dataclasses.dataclass(frozen=True)
class Ending:
    """What the driver needs to end a run: its graph (for ``last_agent``), the type its final
    output is parsed into (``run_typed``'s, else the last agent's ``output_type``), and the
    relay of its run-level hooks."""

    graph: dict[str, Agent]
    output_type: Any = None
    relay: HookRelay | None = None
    context: Any = None
    """The run context the caller passed (``NotDurable``'s value): the run's final context
    is written into it where its type allows (see :func:`final_context`)."""

    def final_context(self, state: RunState) -> Any:
        """The run's final context: revived from ``state`` and written into the caller's
        object in place where its type allows (a dict, a list, a dataclass or pydantic model
        not frozen), so code that reads the object it passed sees the run's writes."""
        if state.context is None:
            return self.context
        try:
            return assign(self.context, revive(state.context, self.context))
        except Exception:  # (its class no longer validates it here: the plain data)
            return revive(state.context.model_copy(update={"type": None}))

    def output(self, state: RunState, text: str, tool: str | None = None) -> Any:
        """The final output parsed on the driver (an ``OutputValidationError`` if it does
        not parse); a run typed by ``run_typed`` that resumed here keeps its text; a run a
        tool's result ended (``tool``) gets that tool's return value, typed as it declares."""
        if tool is not None and self.output_type is None:
            return final_value(self.graph[state.agent_name], text, tool)
        output_type = self.output_type
        if output_type is None and state.response_format is None:
            output_type = self.graph[state.agent_name].output_type
        return parse_output(text, output_type, run_id=state.run_id)


def _finish(
    rt: Runtime, handle: RunHandle, outcome: Outcome, ending: Ending
) -> tuple[RunResult | None, RaygentsError | None, RunStatus]:
    """Emit a run's terminal event and tell the coordinator; what the handle resolves to."""
    state = outcome.state
    error: RaygentsError | None = None
    result: RunResult | None = None
    unparsed: OutputValidationError | None = None
    if outcome.kind == "completed":
        text = outcome.output or ""
        try:
            result = RunResult(
                run_id=state.run_id,
                final_output=ending.output(state, text, outcome.tool),
                messages=state.messages,
                usage=state.usage,
                turns=state.turns,
                last_agent=ending.graph[state.agent_name],
                output_text=text,
                input_count=state.input_len,
                context=ending.final_context(state),
                start_agent=ending.graph.get(state.start_agent),
            )
        except OutputValidationError as exc:
            error = unparsed = exc
    elif outcome.kind == "suspended":
        inline = state if outcome.checkpoint_error else None
        error = SuspendedError(
            "agent run suspended"
            + (f" (checkpoint not stored: {outcome.checkpoint_error})" if inline else ""),
            run_id=state.run_id,
            cause=outcome.cause,
            checkpoint=inline,
        )
    elif outcome.kind == "interrupted" and state.in_doubt:
        error = in_doubt_error(state.run_id, list(state.in_doubt))
    elif outcome.kind == "interrupted":
        pending = list(state.pending)
        durable = state.context is not None or ending.context is None
        waiting = Waiting(state.run_id, tuple(pending), ending.final_context(state), durable)
        error = RunInterrupted(
            f"run interrupted: {len(pending)} tool call(s) require approval",
            run_id=state.run_id,
            pending=pending,
            state=waiting,
        )
    else:
        error = failure_of(outcome)
    handle._emit(terminal_event(outcome, unparsed))
    info, summary = outcome_entry(outcome, None if outcome.kind == "completed" else str(error))
    rt.note("finish", dataclasses.replace(info, events=handle._seq), summary)
    if result is None and outcome.kind == "completed":  # (its output did not parse)
        return None, error, "failed"
    return result, error, outcome_status(outcome)
