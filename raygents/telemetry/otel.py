"""Tracing: the OpenTelemetry SDK, set up once per process from the ``OTEL_*`` environment, and
raygents' spans made with it (only imported where tracing is on)."""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.environment_variables import OTEL_SERVICE_NAME
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from raygents.core.envelope import RunState, TraceContext, Workflow

__all__ = ["Tracing", "exporters_from_env", "new_provider", "run_ids", "workflow_ids"]

log = logging.getLogger("raygents")

_PROPAGATOR = TraceContextTextMapPropagator()
EXPORT_DELAY_MS = 500
"""How often a process exports its spans unless ``OTEL_BSP_SCHEDULE_DELAY`` says otherwise
(the SDK's default is 5 s): Ray ends idle tool workers, and agent actors at shutdown, without
running exit handlers, so a process's last spans must not wait long."""
_PRESET_IDS: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "raygents_preset_ids", default=None
)
"""The trace and span id the next span made in this context must have (a run's root, or a
lost activation's span)."""


class _Ids(RandomIdGenerator):
    """Random ids, except for the spans raygents makes with ids known before (a run's root,
    whose ids follow from its run id; a lost activation's span)."""

    def generate_span_id(self) -> int:
        preset = _PRESET_IDS.get()
        return preset[1] if preset is not None else super().generate_span_id()

    def generate_trace_id(self) -> int:
        preset = _PRESET_IDS.get()
        return preset[0] if preset is not None else super().generate_trace_id()


def run_ids(run_id: str) -> tuple[int, int]:
    """The trace id and root span id of a top-level run: the same in every process, so that a
    run that starts over from its input after a loss keeps its trace."""
    digest = hashlib.sha256(f"raygents-trace\0{run_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def workflow_ids(trace_id: str) -> tuple[int, int]:
    """The trace id and span id of a ``trace()`` block with trace id ``trace_id``
    (``trace_<32 hex digits>``, whose digits are the OpenTelemetry trace id)."""
    digits = trace_id.removeprefix("trace_")
    try:
        number = int(digits, 16) if len(digits) == 32 else 0
    except ValueError:
        number = 0
    digest = hashlib.sha256(f"raygents-workflow\0{trace_id}".encode()).digest()
    trace_number = number or int.from_bytes(digest[8:24], "big") or 1
    return trace_number, int.from_bytes(digest[:8], "big") or 1


def new_provider(resource: Resource | None = None) -> TracerProvider:
    """A tracer provider that gives runs' root spans the ids :func:`run_ids` names (the
    sampler from ``OTEL_TRACES_SAMPLER``)."""
    return TracerProvider(resource=resource, id_generator=_Ids())


def exporters_from_env(env: Mapping[str, str]) -> list[SpanExporter]:
    """The span exporters ``OTEL_TRACES_EXPORTER`` names (default ``otlp``), found as the SDK's
    own configuration finds them: by entry point in ``opentelemetry_traces_exporter``; ``otlp``
    is OTLP over HTTP unless ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL`` says ``grpc``."""
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    found = {ep.name: ep for ep in entry_points(group="opentelemetry_traces_exporter")}
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "none":
            continue
        if name == "otlp":
            name = "otlp_proto_grpc" if protocol.strip() == "grpc" else "otlp_proto_http"
        entry = found.get(name)
        if entry is None:
            log.warning("OTEL_TRACES_EXPORTER names %r, which is not installed; ignored", name)
            continue
        exporters.append(entry.load()())
    return exporters


class Tracing:
    """This process's tracer provider (raygents' own, global unless one was set before) and
    the spans raygents makes with it."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("raygents")

    @classmethod
    def from_env(cls) -> Tracing:
        """Set up the SDK from the standard environment: the resource (``OTEL_SERVICE_NAME``,
        default ``raygents``; ``OTEL_RESOURCE_ATTRIBUTES``), the sampler
        (``OTEL_TRACES_SAMPLER``), the exporters, each behind a batch processor
        (``OTEL_BSP_*``; the schedule delay :data:`EXPORT_DELAY_MS` if unset). The provider
        also flushes its spans when the process exits normally."""
        attributes: dict[str, Any] = {"process.pid": os.getpid()}
        if not os.environ.get(OTEL_SERVICE_NAME):
            attributes["service.name"] = "raygents"
        provider = new_provider(Resource.create(attributes))
        delay = None if os.environ.get("OTEL_BSP_SCHEDULE_DELAY") else EXPORT_DELAY_MS
        for exporter in exporters_from_env(os.environ):
            provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=delay))
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(provider)  # (the tools' own spans go the same way)
        return cls(provider)

    # --- contexts -----------------------------------------------------------------------
    def new_trace(self, run_id: str, workflow: Workflow | None = None) -> TraceContext:
        """The trace context of a new top-level run: its root span, which
        :meth:`run_end` exports, starts now (in the trace of ``workflow``, the ``trace()``
        block it was started in, under that block's span)."""
        from raygents.core.envelope import TraceContext

        trace_id, span_id = run_ids(run_id)
        parent = ""
        if workflow is not None:
            trace_id, workflow_span = workflow_ids(workflow.trace_id)
            parent = f"{workflow_span:016x}"
        sampled = self.provider.sampler.should_sample(None, trace_id, "invoke_workflow")
        flags = "01" if sampled.decision == Decision.RECORD_AND_SAMPLE else "00"
        return TraceContext(
            traceparent=f"00-{trace_id:032x}-{span_id:016x}-{flags}",
            started_ns=time.time_ns(),
            workflow_span=parent,
        )

    def workflow_end(
        self, workflow: Workflow, started_ns: int, metadata: Mapping[str, Any]
    ) -> None:
        """Export the span of a ``trace()`` block, with the ids its runs' roots name."""
        token = _PRESET_IDS.set(workflow_ids(workflow.trace_id))
        try:
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "invoke_workflow",
                "gen_ai.workflow.name": workflow.name,
                "raygents.trace_id": workflow.trace_id,
            }
            if workflow.group_id is not None:
                attributes["raygents.group_id"] = workflow.group_id
            for key, value in metadata.items():
                attributes[f"raygents.metadata.{key}"] = str(value)
            span = self.tracer.start_span(
                workflow.name,
                context=otel_context.Context(),
                start_time=started_ns,
                attributes=attributes,
            )
        finally:
            _PRESET_IDS.reset(token)
        span.end()

    def traceparent(self) -> str | None:
        """The current span as a ``traceparent`` header, or None when no span is current."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        return carrier.get("traceparent")

    def event(self, name: str, attributes: Mapping[str, Any]) -> None:
        """Add an event to the current span."""
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event(name, dict(attributes))

    # --- spans --------------------------------------------------------------------------
    @contextmanager
    def agent_span(self, state: RunState, agent: str, *, resumed: bool) -> Iterator[Span]:
        """An ``invoke_agent`` span under the run's trace context, current while it runs."""
        assert state.trace is not None
        parent = _PROPAGATOR.extract({"traceparent": state.trace.traceparent})
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.conversation.id": state.run_id,
            "raygents.run_id": state.run_id,
            "raygents.depth": state.depth,
        }
        if state.parent_run_id is not None:
            attributes["raygents.parent_run_id"] = state.parent_run_id
        with self.tracer.start_as_current_span(
            f"invoke_agent {agent}", context=parent, attributes=attributes
        ) as span:
            if resumed:
                span.add_event("raygents.restore", {"raygents.checkpoint.seq": state.seq})
            yield span

    @contextmanager
    def chat_span(self, model: Any, agent: str) -> Iterator[Span | None]:
        """A ``chat`` span, current while the call runs; none outside an agent span. The
        model's name is its ``model`` attribute (a provider's model name), else its class's."""
        if not trace.get_current_span().is_recording():
            yield None
            return
        name = getattr(model, "model", None)
        if not isinstance(name, str) or not name:
            name = type(model).__name__
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": name,
            "gen_ai.agent.name": agent,
        }
        if type(model).__module__ == "raygents.models.openai":
            attributes["gen_ai.provider.name"] = "openai"
        with self.tracer.start_as_current_span(
            f"chat {name}", kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            yield span

    @contextmanager
    def tool_span(self, run_id: str, tool: str, call_id: str, kind: str) -> Iterator[Span | None]:
        """An ``execute_tool`` span, current while the call runs; none outside an agent span."""
        if not trace.get_current_span().is_recording():
            yield None
            return
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": kind,
            "raygents.run_id": run_id,
        }
        with self.tracer.start_as_current_span(
            f"execute_tool {tool}", attributes=attributes
        ) as span:
            yield span

    @contextmanager
    def worker_span(self, parent: str, tool: str, call_id: str) -> Iterator[Span]:
        """A tool task's span in its worker, current while the tool runs."""
        context = _PROPAGATOR.extract({"traceparent": parent})
        attributes = {"gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id}
        with self.tracer.start_as_current_span(
            f"tool:{tool}", context=context, attributes=attributes
        ) as span:
            yield span

    def begun(self, trace_ctx: TraceContext, span: Span) -> TraceContext:
        """``trace_ctx`` naming ``span`` as its activation's (see ``TraceContext.activation``)."""
        return trace_ctx.model_copy(
            update={
                "activation": f"{span.get_span_context().span_id:016x}",
                "activation_ns": time.time_ns(),
            }
        )

    def lost(self, state: RunState, agent: str) -> None:
        """Export the agent span of the activation a recovered run lost (its process died
        before the span ended), from its start to now, marked failed."""
        assert state.trace is not None
        parent = _PROPAGATOR.extract({"traceparent": state.trace.traceparent})
        trace_id = trace.get_current_span(parent).get_span_context().trace_id
        token = _PRESET_IDS.set((trace_id, int(state.trace.activation, 16)))
        try:
            span = self.tracer.start_span(
                f"invoke_agent {agent}",
                context=parent,
                start_time=state.trace.activation_ns or None,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent,
                    "raygents.run_id": state.run_id,
                    "raygents.outcome": "lost",
                },
            )
        finally:
            _PRESET_IDS.reset(token)
        span.set_status(Status(StatusCode.ERROR, "the process running it was lost"))
        span.end()

    def tool_failed(self, span: Span, content: str) -> None:
        """Mark a tool call's span failed (its result is an error)."""
        span.set_status(Status(StatusCode.ERROR, content[:200]))
        span.set_attribute("error.type", "tool_error")

    def run_end(self, state: RunState, start_agent: str, status: str, error: str | None) -> None:
        """Export a top-level run's root span, with the ids its trace context names."""
        assert state.trace is not None
        _, trace_hex, span_hex, flags = state.trace.traceparent.split("-")
        token = _PRESET_IDS.set((int(trace_hex, 16), int(span_hex, 16)))
        parent = otel_context.Context()  # (no parent: the trace's root)
        if state.trace.workflow_span:  # (under its trace() block's span)
            block = trace.SpanContext(
                int(trace_hex, 16),
                int(state.trace.workflow_span, 16),
                is_remote=True,
                trace_flags=trace.TraceFlags(int(flags, 16)),
            )
            parent = trace.set_span_in_context(trace.NonRecordingSpan(block))
        try:
            span = self.tracer.start_span(
                f"invoke_workflow {start_agent}",
                context=parent,
                start_time=state.trace.started_ns,
                attributes={
                    "gen_ai.operation.name": "invoke_workflow",
                    "gen_ai.workflow.name": start_agent,
                    "gen_ai.conversation.id": state.run_id,
                    "raygents.run_id": state.run_id,
                    "raygents.status": status,
                    "raygents.turns": state.turns,
                    "gen_ai.usage.input_tokens": state.usage.input_tokens,
                    "gen_ai.usage.output_tokens": state.usage.output_tokens,
                },
            )
        finally:
            _PRESET_IDS.reset(token)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error[:200]))
        span.end()

    def flush(self, timeout_s: float) -> None:
        """Export what the batch processors hold, waiting up to ``timeout_s``."""
        self.provider.force_flush(int(timeout_s * 1000))
