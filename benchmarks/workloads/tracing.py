"""Workload: what OpenTelemetry tracing costs per turn.

Two measures, tracing off against on:

- ``spans``: in this process, without Ray, the spans of one turn as an agent actor makes them
  (inside its ``invoke_agent`` span: a ``chat`` span, K ``execute_tool`` spans, a checkpoint
  event), K = 1 and 4, and the span of one tool task as its worker makes it; with an exporter
  that drops every span behind the SDK's batch processor. Off, the same calls return
  raygents' shared empty context.
- ``runs``: the overhead workload's 2-turn run (K=4 tool tasks, model latency 0) end to end on
  Ray, in two Ray instances one after the other (each process reads ``OTEL_*`` once as it
  starts): tracing off, then on with half the traces sampled (``parentbased_traceidratio``,
  0.5), every process exporting OTLP/HTTP (the SDK's defaults: a 5 s batch delay) to a receiver
  in this process that drops what it gets. In the second instance sampled and unsampled runs
  interleave (by their run ids' trace ids), so the difference between them, what recording and
  exporting the spans costs, does not drift with the load of a shared machine; the first
  instance gives what unsampled tracing costs against none.

Overhead per turn = (p50 of one side - p50 of the other) / 2 turns.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import fakes
import machine
import stats

SPAN_KS = (1, 4)


@contextmanager
def _dropping_receiver() -> Iterator[tuple[str, list[int]]]:
    """An OTLP/HTTP endpoint on 127.0.0.1 that answers every export and keeps nothing but
    their count and bytes."""
    got = [0, 0]

    class Drop(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got[1] += len(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            got[0] += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drop)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()


_DROP_MODULE = """
import os

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class DropExporter(SpanExporter):
    def export(self, spans):
        with open(os.environ["RGBENCH_DROPPED"], "a") as f:  # (how many, to check they came)
            f.write(f"{len(spans)}\\n")
        return SpanExportResult.SUCCESS
"""


def _drop_exporter(tmp: str) -> dict[str, str]:
    """The environment that makes every process export to an exporter that drops the spans:
    a module and its ``opentelemetry_traces_exporter`` entry point (``rgbench_drop``) on the
    processes' ``PYTHONPATH``, found as any installed exporter is."""
    root = os.path.join(tmp, "drop_exporter")
    info = os.path.join(root, "rgbench_drop-0.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(root, "rgbench_drop.py"), "w") as f:
        f.write(_DROP_MODULE)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: rgbench-drop\nVersion: 0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write("[opentelemetry_traces_exporter]\nrgbench_drop = rgbench_drop:DropExporter\n")
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {
        "OTEL_TRACES_EXPORTER": "rgbench_drop",
        "PYTHONPATH": path,
        "RGBENCH_DROPPED": os.path.join(root, "dropped.txt"),
    }


def _span_turns(on: bool, turns: int, k: int) -> tuple[list[float], list[float]]:
    """Seconds per turn of the spans an agent actor makes with ``k`` tool calls a turn, and
    per tool task of its worker's span, tracing ``on`` or off."""
    from raygents.core.envelope import RunState
    from raygents.telemetry import tracing
    from raygents.testing import text

    if on:
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        from raygents.telemetry import otel

        class DropExporter(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = otel.new_provider()
        provider.add_span_processor(BatchSpanProcessor(DropExporter()))
        tracing._tracer, tracing._checked = otel.Tracing(provider), True
    else:
        tracing._tracer, tracing._checked = None, True
    model = fakes.rg_model(fakes.ToolTurns(), 0.0)
    response = text("done")
    state = RunState(run_id=f"run-bench-{on}", agent_name="a")
    state = state.evolve(trace=tracing.trace_of(state))
    times, tasks = [], []
    with tracing.agent_span(state, "a", resumed=False):
        for _ in range(turns):
            t = time.perf_counter()
            with tracing.chat_span(model, "a") as span:
                tracing.chat_done(span, response)
            parents = []
            for j in range(k):
                with tracing.tool_span(state.run_id, "noop", f"c{j}", "function") as span:
                    parents.append(tracing.traceparent())  # (what goes with the task)
                    tracing.tool_done(span, False, "ok")
            tracing.event("raygents.checkpoint", {"raygents.seq": 1})
            times.append(time.perf_counter() - t)
            t = time.perf_counter()
            with tracing.worker_span(parents[0], "noop", "c0") as span:
                tracing.tool_done(span, False, "ok")
            tasks.append(time.perf_counter() - t)
    tracing.run_end(state, "a", "completed", None)
    if on:
        tracing.flush()
        tracing._tracer.provider.shutdown()  # type: ignore[union-attr]
    tracing._tracer, tracing._checked = None, False
    return times, tasks


def _phase(rg: Any, tmp: str, phase: int, env: dict[str, str], reps: int) -> dict[str, list[float]]:
    """One Ray instance with ``env`` in its processes' environment; ``reps`` timed runs, by
    whether their traces are sampled at ratio 0.5 (``sampled``, ``unsampled``)."""
    import ray
    from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased

    from raygents.telemetry.otel import run_ids

    ratio = TraceIdRatioBased(0.5)

    touched = set(env) | {k for k in os.environ if k.startswith("OTEL_")}
    saved = {k: os.environ.pop(k) for k in touched if k in os.environ}
    os.environ.update(env)
    try:
        machine.init_raygents(store=f"file://{os.path.join(tmp, f'store{phase}')}")
        agent = rg.Agent(
            "tr_task", tools=fakes.rg_tools("task"), model=fakes.rg_model(fakes.ToolTurns(), 0.0)
        )
        for _ in range(5):  # warm up (actors, workers, imports, the SDK's setup)
            rg.run(agent, "k=4")
        times: dict[str, list[float]] = {"sampled": [], "unsampled": []}
        for _ in range(reps):
            t = time.perf_counter()
            run_id = rg.run(agent, "k=4").run_id
            took = time.perf_counter() - t
            decision = ratio.should_sample(None, run_ids(run_id)[0], "x").decision
            side = "sampled" if decision == Decision.RECORD_AND_SAMPLE else "unsampled"
            times[side].append(took)
        rg.shutdown()
        ray.shutdown()
    finally:
        for k in touched:
            os.environ.pop(k, None)
        os.environ.update(saved)
    return times


def run(mode: str, tmp: str) -> dict[str, Any]:
    import raygents as rg

    quick = mode == "quick"
    reps, turns = (40, 2000) if quick else (150, 20000)
    if mode == "smoke":
        reps, turns = 4, 100
    spans: dict[str, dict[str, float]] = {}
    for k in SPAN_KS:
        for side, on in (("off", False), ("on_drop", True)):
            _span_turns(on, 200, k)  # warm up
            turn, task = (stats.summary(v) for v in _span_turns(on, turns, k))
            spans[f"{side} k={k}"] = {
                "turn_p50_us": round(turn["p50"] * 1e6, 1),
                "turn_p99_us": round(turn["p99"] * 1e6, 1),
                "task_p50_us": round(task["p50"] * 1e6, 1),
            }
    spans_over_ms = {
        k: (spans[f"on_drop k={k}"]["turn_p50_us"] - spans[f"off k={k}"]["turn_p50_us"]) / 1000
        for k in SPAN_KS
    }
    sampled = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}
    with _dropping_receiver() as (endpoint, got):
        machine.log("tracing: off")
        off = _phase(rg, tmp, 0, {}, reps)
        machine.log("tracing: on, an exporter that drops the spans, half the traces sampled")
        drop = _phase(rg, tmp, 1, {**_drop_exporter(tmp), **sampled}, 2 * reps)
        machine.log("tracing: on, OTLP/HTTP to a receiver that drops, half the traces sampled")
        otlp_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, **sampled}
        otlp = _phase(rg, tmp, 2, otlp_env, 2 * reps)
        time.sleep(1.0)  # (the last exports)
    with open(os.path.join(tmp, "drop_exporter", "dropped.txt")) as f:
        dropped = sum(int(line) for line in f)
    exports = {"otlp_requests": got[0], "otlp_bytes": got[1], "spans_dropped": dropped}
    runs = {
        "off": off["sampled"] + off["unsampled"],
        "drop unsampled": drop["unsampled"],
        "drop sampled": drop["sampled"],
        "otlp unsampled": otlp["unsampled"],
        "otlp sampled": otlp["sampled"],
    }
    rows = {}
    for side, vals in runs.items():
        s = stats.summary(vals)
        rows[side] = {"p50_ms": stats.ms(s["p50"]), "p99_ms": stats.ms(s["p99"]), "n": s["n"]}

    def per_turn(a: str, b: str) -> float:
        return round((rows[a]["p50_ms"] - rows[b]["p50_ms"]) / 2, 3)

    over = {
        **{f"spans k={k}": round(v, 3) for k, v in spans_over_ms.items()},
        "runs, drop: sampled vs unsampled": per_turn("drop sampled", "drop unsampled"),
        "runs, otlp: sampled vs unsampled": per_turn("otlp sampled", "otlp unsampled"),
        "runs, drop unsampled vs off": per_turn("drop unsampled", "off"),
    }
    machine.log(f"  spans {spans}; runs {rows}; per turn {over}")
    runs_over_ms = over["runs, drop: sampled vs unsampled"]
    checks = {
        "tracing on (spans dropped) adds <= 0.5 ms per turn (an actor's spans, K=4, p50)": {
            "value_ms": round(spans_over_ms[4], 3),
            "target": "<= 0.5 ms",
            "pass": spans_over_ms[4] <= 0.5,
        },
        "sampled traces (exporter drops) add <= 0.5 ms per turn (2-turn run on Ray, p50)": {
            "value_ms": runs_over_ms,
            "target": "<= 0.5 ms",
            "pass": runs_over_ms <= 0.5,
        },
    }
    return {
        "spans_us_per_turn": spans,
        "runs_ms": rows,
        "exports_received": exports,
        "overhead_per_turn_ms": over,
        "checks": checks,
        "config": {"reps_off": reps, "reps_on": 2 * reps, "span_turns": turns},
    }
