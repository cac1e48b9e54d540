"""Traces end to end: a driver in a subprocess (``trace_driver.py``, its own Ray instance with
the OTLP endpoint in its environment) runs a handoff with a fan-out of three agent-as-tool
children and a run recovered after its agent actor is killed; an OTLP/HTTP receiver in this
process gets their spans, and the test checks each run's tree."""

from __future__ import annotations

import gzip
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from driver_process import driver_process, ready_json
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from raygents.telemetry.otel import run_ids

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).parent


@dataclass
class Span:
    """One received span, its ids in hex."""

    name: str
    trace_id: str
    span_id: str
    parent: str
    attributes: dict[str, Any]
    events: list[str]
    service: str


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


@dataclass
class Receiver:
    """What an OTLP/HTTP endpoint on 127.0.0.1 received."""

    endpoint: str = ""
    spans: list[Span] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = {a.key: _value(a.value) for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for s in scope.spans:
                    span = Span(
                        s.name,
                        s.trace_id.hex(),
                        s.span_id.hex(),
                        s.parent_span_id.hex(),
                        {a.key: _value(a.value) for a in s.attributes},
                        [e.name for e in s.events],
                        str(service.get("service.name")),
                    )
                    with self.lock:
                        self.spans.append(span)

    def trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            status = 200 if self.path == "/v1/traces" else 404
            if status == 200:
                got.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    got.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    yield got
    server.shutdown()
    server.server_close()


def _trace_id(run_id: str) -> str:
    return f"{run_ids(run_id)[0]:032x}"


def _wait_for(receiver: Receiver, run_id: str, ready: Any, timeout_s: float = 60.0) -> list[Span]:
    deadline = time.monotonic() + timeout_s
    while True:
        spans = receiver.trace(_trace_id(run_id))
        if ready(spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.2)


def _driver_env(receiver: Receiver, schedule_delay_ms: int) -> dict[str, str]:
    """The environment of a driver whose processes export their spans to ``receiver``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "OTEL_"))}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    env["OTEL_BSP_SCHEDULE_DELAY"] = str(schedule_delay_ms)
    return env


def _named(spans: list[Span], name: str) -> list[Span]:
    return [s for s in spans if s.name == name]


def _only(spans: list[Span], name: str) -> Span:
    [span] = _named(spans, name)
    return span


def check_fan_out(spans: list[Span], run_id: str) -> None:
    """The handoff and the three children's spans hang off one root, every link resolving."""
    by_id = {s.span_id: s for s in spans}
    assert all(s.parent in by_id for s in spans if s.parent), "a parent is missing"
    root = _only(spans, "invoke_workflow triage")
    assert root.parent == "" and root.span_id == f"{run_ids(run_id)[1]:016x}"
    assert root.attributes["raygents.status"] == "completed"
    assert root.attributes["gen_ai.operation.name"] == "invoke_workflow"
    triage, lead = _only(spans, "invoke_agent triage"), _only(spans, "invoke_agent lead")
    assert triage.parent == lead.parent == root.span_id
    assert "raygents.handoff" in triage.events and "raygents.checkpoint" in triage.events
    assert lead.attributes["gen_ai.agent.name"] == "lead"
    assert lead.attributes["raygents.run_id"] == run_id
    calls = _named(spans, "execute_tool research")
    assert len(calls) == 3 and {c.parent for c in calls} == {lead.span_id}
    assert {c.attributes["gen_ai.tool.call.id"] for c in calls} == {"c_a", "c_b", "c_c"}
    assert {c.attributes["gen_ai.tool.type"] for c in calls} == {"agent"}
    children = _named(spans, "invoke_agent researcher")
    assert sorted(c.parent for c in children) == sorted(c.span_id for c in calls)
    assert {c.attributes["raygents.parent_run_id"] for c in children} == {run_id}
    assert len({c.attributes["raygents.run_id"] for c in children}) == 3
    for child in children:
        [look] = [s for s in spans if s.parent == child.span_id and s.name.startswith("execute")]
        assert look.name == "execute_tool look_up"
        assert look.attributes["gen_ai.tool.name"] == "look_up"
        [task] = [s for s in spans if s.parent == look.span_id]
        assert task.name == "tool:look_up"  # (in the tool's worker process)
        chats = [s for s in spans if s.parent == child.span_id and s.name.startswith("chat")]
        assert len(chats) == 2
    chat = _named(spans, "chat FunctionModel")[0]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "FunctionModel"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 10
    assert chat.attributes["gen_ai.usage.output_tokens"] == 5
    assert chat.attributes["gen_ai.response.finish_reasons"] in (("stop",), ("tool_calls",))
    assert {s.service for s in spans} == {"raygents-test"}


def check_recovery(spans: list[Span], run_id: str) -> None:
    """The recovered activation continues the trace under its root, and the killed one's
    agent span (which never ended in its process) is exported by the recovery, marked lost:
    every parent link resolves."""
    by_id = {s.span_id: s for s in spans}
    assert all(s.parent in by_id for s in spans if s.parent), "a parent is missing"
    root = _only(spans, "invoke_workflow stepper")
    assert root.parent == "" and root.attributes["raygents.status"] == "completed"
    agents = _named(spans, "invoke_agent stepper")
    restored = [s for s in agents if "raygents.restore" in s.events]
    lost = [s for s in agents if s.attributes.get("raygents.outcome") == "lost"]
    assert restored and lost and {s.parent for s in restored + lost} == {root.span_id}
    assert _named(spans, "execute_tool step"), "the recovered activation's tool call"


def test_a_runs_spans_make_one_tree_across_actors_tasks_children_and_recovery(
    receiver: Receiver, tmp_path: Path
) -> None:
    env = _driver_env(receiver, schedule_delay_ms=100)
    env |= {
        "OTEL_SERVICE_NAME": "raygents-test",
        "PYTHONPATH": os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]),
    }
    store = f"file://{tmp_path / 'store'}"
    with driver_process([str(HERE / "trace_driver.py"), store], cwd=HERE, env=env) as proc:
        runs = ready_json(proc, "the driver")
        fanned = _wait_for(
            receiver,
            runs["fanned"],
            lambda spans: (
                len(_named(spans, "tool:look_up")) == 3
                and len(_named(spans, "invoke_workflow triage")) == 1
            ),
        )
        check_fan_out(fanned, runs["fanned"])
        recovered = _wait_for(
            receiver,
            runs["recovered"],
            lambda spans: _named(spans, "invoke_workflow stepper"),
        )
        check_recovery(recovered, runs["recovered"])


_BRIEF = """
import sys
import raygents as rg
from raygents.testing import FunctionModel, text
rg.init(store=sys.argv[1])
rg.run(rg.Agent("brief", model=FunctionModel(lambda req: text("done"))), "hi", run_id="brief")
rg.shutdown()
"""


def test_a_script_that_shuts_down_right_after_its_run_leaves_no_span_behind(
    receiver: Receiver, tmp_path: Path
) -> None:
    env = _driver_env(receiver, schedule_delay_ms=600_000)  # (nothing exported on a schedule)
    with driver_process(["-c", _BRIEF, f"file://{tmp_path / 'store'}"], cwd=HERE, env=env) as p:
        assert p.wait(timeout=120) == 0
    spans = _wait_for(receiver, "brief", lambda spans: _named(spans, "invoke_workflow brief"), 10)
    root = _only(spans, "invoke_workflow brief")
    agent = _only(spans, "invoke_agent brief")
    assert agent.parent == root.span_id and agent.attributes.get("raygents.outcome") == "completed"
