"""Traces without Ray: when tracing is on, the span tree of a run on an agent actor in this
process, the root span's ids, the context in checkpoints and tool tasks; when it is off or
OpenTelemetry is missing, no spans and no trace context."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fakes import FakeHandle
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import raygents as rg
from raygents.agents.tools import ToolContext
from raygents.core.envelope import Envelope, Outcome, RunState, TraceContext
from raygents.core.messages import to_messages
from raygents.records import checkpoint
from raygents.runtime.actor.actor import AgentActor
from raygents.runtime.link import wire
from raygents.runtime.link.mailbox import unpack
from raygents.runtime.link.settings import Settings
from raygents.runtime.worker.tasks import task_body
from raygents.telemetry import otel, tracing
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, its spans kept in memory."""
    exporter = InMemorySpanExporter()
    provider = otel.new_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", otel.Tracing(provider))
    monkeypatch.setattr(tracing, "_checked", True)
    yield exporter
    provider.shutdown()


@pytest.fixture
def off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracing as this process's environment (without OTEL_*) sets it up: off."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(tracing, "_tracer", None)
    monkeypatch.setattr(tracing, "_checked", False)


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": " None "}, False),
    ],
)
def test_the_environment_turns_tracing_on(env: dict[str, str], on: bool) -> None:
    assert tracing.wanted(env) is on


def test_off_no_spans_and_no_trace_context(off: None) -> None:
    state = RunState(run_id="r", agent_name="a")
    assert tracing.trace_of(state) is None
    shared = tracing.agent_span(state, "a", resumed=False)
    assert shared is tracing.chat_span(object(), "a") is tracing.tool_span("r", "t", "c", "x")
    with shared as span:
        assert span is None
    assert tracing.traceparent() is None and tracing.child_trace() is None


def test_without_opentelemetry_raygents_runs_untraced() -> None:
    """OTEL_* set, the extra missing: a warning, then nothing is traced; raygents loads."""
    script = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import raygents, raygents.runtime.actor.actor\n"
        "from raygents.telemetry import tracing\n"
        "from raygents.core.envelope import RunState\n"
        "state = RunState(run_id='r', agent_name='a')\n"
        "assert tracing.trace_of(state) is None\n"
        "assert tracing.tracer() is None\n"
        "assert not any(m.startswith('opentelemetry') for m in sys.modules)\n"
    )
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'raygents[otel]'" in done.stderr


def test_a_top_level_runs_trace_follows_from_its_id(spans: InMemorySpanExporter) -> None:
    trace = tracing.trace_of(RunState(run_id="run-1", agent_name="a"))
    again = tracing.trace_of(RunState(run_id="run-1", agent_name="a"))
    assert trace is not None and again is not None
    assert trace.traceparent == again.traceparent  # (a restart from the input)
    trace_id, span_id = otel.run_ids("run-1")
    assert trace.traceparent == f"00-{trace_id:032x}-{span_id:016x}-01"
    state = RunState(run_id="run-1", agent_name="a", trace=trace)
    assert tracing.trace_of(state) is trace
    child = RunState(run_id="run-1.x", agent_name="a", depth=1)
    assert tracing.trace_of(child) is None  # (a child's context comes from its tool call)


def test_the_trace_context_survives_a_checkpoint() -> None:
    trace = TraceContext(traceparent=f"00-{'1' * 32}-{'2' * 16}-01", started_ns=5)
    state = RunState(run_id="r", agent_name="a", messages=to_messages("hi"), trace=trace)
    _, record = checkpoint.make_record(state, "running")
    assert checkpoint.replay([record])[0].trace == trace
    old = RunState(run_id="r", agent_name="a", messages=to_messages("hi"))
    _, record = checkpoint.make_record(old, "running")
    assert "trace" not in record["state"]  # (untraced records are as before)
    assert checkpoint.replay([record])[0].trace is None


class _Coordinator:
    """What a run that needs no record asks of the coordinator."""

    def settings(self) -> Settings:
        return Settings(durability="exit")  # (no records of running runs: nowhere to keep them)

    def mark_done(self, *args: Any) -> None:
        """A run ended (its result is kept)."""


@rg.tool(remote=False)
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


async def _run_on_actor(model: Any, envelope: Envelope | None = None) -> Outcome:
    agent = rg.Agent("traced", model=model, tools=[lookup])
    actor = AgentActor(
        {"traced": agent}, "traced", "fp", "ns", coordinator=FakeHandle(_Coordinator())
    )
    actor._beater = object()  # type: ignore[assignment]  # (no beats outside Ray)
    actor.writer.use_store(None)
    state = RunState(run_id="r1", agent_name="traced", messages=to_messages("hi"))
    me = await actor.start([envelope or Envelope(state, "fp", None)], "c")
    while True:
        _, blob = await actor.take("c", 600.0, me)
        for _, item in unpack(blob):
            if isinstance(item, Outcome):
                return item
            if isinstance(item, tuple) and isinstance(item[1], Outcome):
                return item[1]


async def test_a_run_on_an_agent_actor_makes_the_span_tree(spans: InMemorySpanExporter) -> None:
    model = ScriptedModel([calls(call("lookup", {"city": "Oslo"}, id="c1")), text("done")])
    outcome = await _run_on_actor(model)
    assert outcome.kind == "completed" and outcome.state.trace is not None
    found = {s.name: s for s in spans.get_finished_spans()}
    assert set(found) == {
        "invoke_workflow traced",
        "invoke_agent traced",
        "chat ScriptedModel",
        "execute_tool lookup",
    }
    root, agent = found["invoke_workflow traced"], found["invoke_agent traced"]
    trace_id, span_id = otel.run_ids("r1")
    assert root.context is not None and root.parent is None
    assert (root.context.trace_id, root.context.span_id) == (trace_id, span_id)
    assert agent.parent is not None and agent.parent.span_id == span_id
    assert agent.context is not None
    for name in ("chat ScriptedModel", "execute_tool lookup"):
        assert found[name].parent is not None
        assert found[name].parent.span_id == agent.context.span_id
    chats = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert len(chats) == 2
    tool = found["execute_tool lookup"].attributes or {}
    assert tool["gen_ai.tool.name"] == "lookup" and tool["gen_ai.tool.call.id"] == "c1"
    assert dict(agent.attributes or {})["raygents.run_id"] == "r1"
    assert dict(root.attributes or {})["raygents.status"] == "completed"
    assert root.start_time is not None and root.start_time <= agent.start_time  # type: ignore[operator]


async def test_off_a_run_on_an_agent_actor_has_no_trace(off: None) -> None:
    outcome = await _run_on_actor(ScriptedModel([text("done")]))
    assert outcome.kind == "completed" and outcome.state.trace is None


def test_a_tool_tasks_span_joins_the_calls_span(spans: InMemorySpanExporter) -> None:
    body = task_body(lookup)
    ctx = ToolContext("r", "c9", "lookup", "a")
    state = RunState(run_id="r", agent_name="a")
    with tracing.agent_span(state.evolve(trace=tracing.trace_of(state)), "a", resumed=False):
        parent = tracing.traceparent()
        assert parent is not None
        report = wire.loads(body(wire.dumps((ctx, {"city": "Rome"}, parent))))
    assert report.content == "Rome: sunny"
    worker = next(s for s in spans.get_finished_spans() if s.name == "tool:lookup")
    assert worker.parent is not None and f"{worker.parent.span_id:016x}" in parent
    untraced = wire.loads(body(wire.dumps((ctx, {"city": "Rome"}))))  # (as before tracing)
    assert untraced.content == "Rome: sunny"


async def test_a_failed_runs_root_and_agent_spans_say_so(spans: InMemorySpanExporter) -> None:
    def broken(request: Any) -> Any:
        raise RuntimeError("provider down")

    outcome = await _run_on_actor(FunctionModel(broken))
    assert outcome.kind == "failed"
    found = {s.name: s for s in spans.get_finished_spans()}
    root, agent = found["invoke_workflow traced"], found["invoke_agent traced"]
    assert dict(root.attributes or {})["raygents.status"] == "failed"
    assert root.status.status_code is StatusCode.ERROR
    assert agent.status.status_code is StatusCode.ERROR
    chat = found["chat FunctionModel"]
    assert chat.status.status_code is StatusCode.ERROR and chat.parent is not None


async def test_a_resumed_run_continues_its_trace(spans: InMemorySpanExporter) -> None:
    """A run that comes back from a checkpoint (resume, recovery) carries its trace context:
    its agent span joins the run's root, with a restore event, and the root keeps its start."""
    trace = TraceContext(
        traceparent=f"00-{'a' * 32}-{'b' * 16}-01",
        started_ns=1_000,
        activation="c" * 16,  # (its record names an activation that never ended)
        activation_ns=2_000,
    )
    state = RunState(
        run_id="r1", agent_name="traced", messages=to_messages("hi"), seq=3, trace=trace
    )
    envelope = Envelope(state, "fp", None, activate=False, resumed=True)
    outcome = await _run_on_actor(ScriptedModel([text("done")]), envelope)
    assert outcome.kind == "completed" and outcome.state.trace is not None
    assert outcome.state.trace.traceparent == trace.traceparent
    [lost, agent] = [s for s in spans.get_finished_spans() if s.name == "invoke_agent traced"]
    assert lost.context is not None and lost.context.span_id == int("c" * 16, 16)
    assert lost.status.status_code is StatusCode.ERROR and lost.start_time == 2_000
    found = {s.name: s for s in spans.get_finished_spans()}
    root = found["invoke_workflow traced"]
    assert lost.parent is not None and lost.parent.span_id == int("b" * 16, 16)
    assert root.context is not None and agent.parent is not None
    assert (root.context.trace_id, root.context.span_id) == (int("a" * 32, 16), int("b" * 16, 16))
    assert agent.parent.span_id == root.context.span_id and root.start_time == 1_000
    [restore] = [e for e in agent.events if e.name == "raygents.restore"]
    assert dict(restore.attributes or {})["raygents.checkpoint.seq"] == 3
