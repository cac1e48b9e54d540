"""Traces: a run's OpenTelemetry spans, made only where the ``otel`` extra is installed and the
``OTEL_*`` environment turns tracing on.

Every function here is cheap when tracing is off: the environment is read once per process, and
a span helper then returns a shared empty context manager without making any span object.
Tracing is on in a process when ``OTEL_SDK_DISABLED`` is not ``true`` and either
``OTEL_TRACES_EXPORTER`` names an exporter other than ``none``, or it is unset and
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set. The SDK is
then set up from the rest of the standard environment (:mod:`raygents.telemetry.otel`).

The trace model: a top-level run is one trace, whose root ``invoke_workflow <agent>`` span is
exported when the run ends (its ids follow from the run id and its start time travels in the run
state, so whichever process ends the run can make it). Each agent's part of the run is an
``invoke_agent <agent>`` span under that root; model calls (``chat <model>``) and tool calls
(``execute_tool <tool>``) are its children, and an agent-as-tool child run's agent spans are
children of the tool call that started it. The context travels in :attr:`RunState.trace
<raygents.core.envelope.RunState.trace>` (so in checkpoints: a recovered or resumed run continues
its
trace) and with each tool task. It also names the agent span of the activation under way, so that
a run recovered after its actor died exports that span, which its dead process never ended.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raygents.core.envelope import RunState, TraceContext, Workflow
    from raygents.core.messages import ModelResponse
    from raygents.telemetry.otel import Tracing

__all__ = [
    "agent_done",
    "agent_span",
    "begun",
    "chat_done",
    "chat_span",
    "child_trace",
    "ended",
    "event",
    "flush",
    "lost",
    "run_end",
    "tool_done",
    "tool_span",
    "traceparent",
    "trace_of",
    "tracer",
    "wanted",
    "worker_span",
    "workflow_end",
]

log = logging.getLogger("raygents")

_OFF: AbstractContextManager[None] = nullcontext()
_tracer: Tracing | None = None
_checked = False
_setup = threading.Lock()


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the environment ``env`` turns tracing on (see the module's docstring)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def tracer() -> Tracing | None:
    """This process's tracing, set up from the environment on first use; None when off."""
    global _tracer, _checked
    if _checked:
        return _tracer
    with _setup:  # (a threaded actor's first calls may come together)
        if not _checked:
            _tracer = _set_up()
            _checked = True
    return _tracer


def _set_up() -> Tracing | None:
    if not wanted(os.environ):
        return None
    try:
        from raygents.telemetry.otel import Tracing
    except ImportError as exc:
        log.warning(
            "OTEL_* asks for traces, but OpenTelemetry is not installed (%s): "
            "pip install 'raygents[otel]'",
            exc,
        )
        return None
    try:
        return Tracing.from_env()
    except Exception as exc:  # a bad setting must not stop the run: it goes untraced
        log.warning("cannot set up OpenTelemetry tracing: %s: %s", type(exc).__name__, exc)
        return None


def trace_of(state: RunState) -> TraceContext | None:
    """The trace context of the run of ``state``: its own (``state.trace``, the same object),
    or for a top-level run without one a new trace, which begins here (None: untraced)."""
    if state.trace is not None or state.depth > 0:
        return state.trace
    t = tracer()
    return None if t is None else t.new_trace(state.run_id, state.workflow)


def agent_span(state: RunState, agent: str, *, resumed: bool) -> AbstractContextManager[Any]:
    """The ``invoke_agent`` span of an agent's part of a run, made current (a ``restore``
    event on it when the run continues from a checkpoint)."""
    t = tracer()
    if t is None or state.trace is None:
        return _OFF
    return t.agent_span(state, agent, resumed=resumed)


def begun(state: RunState, span: Any) -> TraceContext | None:
    """The run's trace context naming the agent span of the activation under way (``span``),
    so that a recovery that finds it in a record knows the activation was lost;
    ``state.trace`` itself where there is no span to name."""
    if span is None or _tracer is None or state.trace is None:
        return state.trace
    return _tracer.begun(state.trace, span)


def ended(state: RunState) -> TraceContext | None:
    """The run's trace context without its activation's span: the activation ends (a
    handoff, a halt); ``state.trace`` itself where it names none."""
    if state.trace is None or not state.trace.activation:
        return state.trace
    return state.trace.model_copy(update={"activation": "", "activation_ns": 0})


def lost(state: RunState) -> None:
    """Export the agent span of the activation that a run coming back from a checkpoint
    lost, if its record names one (that activation's process died before the span ended)."""
    if state.trace is None or not state.trace.activation:
        return
    t = tracer()
    if t is not None:
        t.lost(state, state.agent_name)


def agent_done(span: Any, first: RunState, state: RunState, outcome: str) -> None:
    """Record how an agent's part of the run ended on its span: the outcome, and the turns
    and tokens of this part (from ``first``, the state it began with, to ``state``)."""
    if span is not None:
        span.set_attributes(
            {
                "raygents.outcome": outcome,
                "raygents.turns": state.turns - first.turns,
                "gen_ai.usage.input_tokens": state.usage.input_tokens - first.usage.input_tokens,
                "gen_ai.usage.output_tokens": state.usage.output_tokens - first.usage.output_tokens,
            }
        )


def chat_span(model: Any, agent: str) -> AbstractContextManager[Any]:
    """The ``chat <model>`` span of one call of ``model`` (inside an agent span only): the
    call itself, not its wait for a rate limit."""
    t = tracer()
    return _OFF if t is None else t.chat_span(model, agent)


def chat_done(span: Any, response: ModelResponse) -> None:
    """Record a model call's answer (usage, finish reason) on its span."""
    if span is not None:
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": response.usage.input_tokens,
                "gen_ai.usage.output_tokens": response.usage.output_tokens,
                "gen_ai.response.finish_reasons": (response.finish_reason,),
            }
        )


def tool_span(run_id: str, tool: str, call_id: str, kind: str) -> AbstractContextManager[Any]:
    """The ``execute_tool <tool>`` span of one tool call (inside an agent span only);
    ``kind`` is the tool's ``gen_ai.tool.type`` (``function`` or ``agent``)."""
    t = tracer()
    return _OFF if t is None else t.tool_span(run_id, tool, call_id, kind)


def tool_done(span: Any, is_error: bool, content: str) -> None:
    """Mark a tool call's span failed when its result is an error."""
    if span is not None and is_error and _tracer is not None:
        _tracer.tool_failed(span, content)


def event(name: str, attributes: Mapping[str, Any]) -> None:
    """Add an event to the current span (a handoff, checkpoint, suspend)."""
    t = tracer()
    if t is not None:
        t.event(name, attributes)


def traceparent() -> str | None:
    """The current span as a W3C ``traceparent`` header (for a tool task), or None."""
    t = tracer()
    return None if t is None else t.traceparent()


def child_trace() -> TraceContext | None:
    """The trace context of an agent-as-tool child run started under the current span."""
    tp = traceparent()
    if tp is None:
        return None
    from raygents.core.envelope import TraceContext

    return TraceContext(traceparent=tp)


def worker_span(parent: str | None, tool: str, call_id: str) -> AbstractContextManager[Any]:
    """The span of a tool task in its worker, under the agent actor's ``execute_tool`` span
    (``parent``, a ``traceparent``); the tool's own spans nest in it."""
    if parent is None:
        return _OFF
    t = tracer()
    return _OFF if t is None else t.worker_span(parent, tool, call_id)


def run_end(state: RunState, start_agent: str, status: str, error: str | None) -> None:
    """Export a top-level run's root span as it ends (completed, failed or cancelled)."""
    if state.trace is None or state.depth > 0 or not state.trace.started_ns:
        return
    t = tracer()
    if t is not None:
        t.run_end(state, start_agent, status, error)


def workflow_end(workflow: Workflow, started_ns: int, metadata: Mapping[str, Any]) -> None:
    """Export the span of a ``trace()`` block as it ends: the parent of the root spans of
    the runs started in it."""
    t = tracer()
    if t is not None:
        t.workflow_end(workflow, started_ns, metadata)


def flush(timeout_s: float = 5.0) -> None:
    """Export the spans this process still holds (before it exits)."""
    if _tracer is not None:
        _tracer.flush(timeout_s)
