"""Workload: what OpenTelemetry tracing costs per turn.

Two measures, tracing off against on:

- ``spans``: in this process, without Ray, the spans of one turn as an agent actor makes them
  (inside its ``invoke_agent`` span: a ``chat`` span, K ``execute_tool`` spans, a checkpoint
  event), K = 1 and 4, and the span of one tool task as its worker makes it; with an exporter
  that drops every span behind the SDK's batch processor. Off, the same calls return
  raygents' shared empty context.
- ``runs``: the overhead workload's 2-turn run (K=4 tool tasks, model latency 0) end to end on
  Ray. Each process reads ``OTEL_*`` once as it starts, so the sides are separate Ray instances,
  in alternating phases (off, on, off, on, ...). On, every process exports OTLP/HTTP (the SDK's
  defaults: a 5 s batch delay) to a receiver in this process that drops what it gets.

Overhead per turn = (p50 on - p50 off) / 2 turns.
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


def _span_turns(on: bool, turns: int, k: int) -> tuple[list[float], list[float]]:
    """Seconds per turn of the spans an agent actor makes with ``k`` tool calls a turn, and
    per tool task of its worker's span, tracing ``on`` or off."""
    from raygents import tracing
    from raygents.envelope import RunState
    from raygents.testing import text

    if on:
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        from raygents.tracing import otel

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
    state = tracing.bind(RunState(run_id=f"run-bench-{on}", agent_name="a"))
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


def _phase(rg: Any, tmp: str, phase: int, env: dict[str, str], reps: int) -> list[float]:
    """One Ray instance with ``env`` in its processes' environment; ``reps`` timed runs."""
    import ray

    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("OTEL_")}
    os.environ.update(env)
    try:
        machine.init_raygents(store=f"file://{os.path.join(tmp, f'store{phase}')}")
        agent = rg.Agent(
            "tr_task", tools=fakes.rg_tools("task"), model=fakes.rg_model(fakes.ToolTurns(), 0.0)
        )
        for _ in range(5):  # warm up (actors, workers, imports, the SDK's setup)
            rg.run(agent, "k=4")
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            rg.run(agent, "k=4")
            times.append(time.perf_counter() - t)
        rg.shutdown()
        ray.shutdown()
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)
    return times


def run(mode: str, tmp: str) -> dict[str, Any]:
    import raygents as rg

    quick = mode == "quick"
    phases, reps, turns = (4, 30, 2000) if quick else (8, 100, 20000)
    if mode == "smoke":
        phases, reps, turns = 2, 3, 100
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
    runs: dict[str, list[float]] = {"off": [], "on_drop": []}
    with _dropping_receiver() as (endpoint, got):
        on_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "rgbench"}
        for phase in range(phases):
            side = "off" if phase % 2 == 0 else "on_drop"
            machine.log(f"tracing: phase {phase} ({side})")
            runs[side] += _phase(rg, tmp, phase, on_env if side == "on_drop" else {}, reps)
        time.sleep(1.0)  # (the last exports of the last phase's processes)
    exports = {"requests": got[0], "bytes": got[1]}
    rows = {}
    for side, vals in runs.items():
        s = stats.summary(vals)
        rows[side] = {"p50_ms": stats.ms(s["p50"]), "p99_ms": stats.ms(s["p99"]), "n": s["n"]}
    runs_over_ms = (rows["on_drop"]["p50_ms"] - rows["off"]["p50_ms"]) / 2
    machine.log(f"  spans {spans}; runs {rows}; per turn {runs_over_ms:.3f} ms")
    checks = {
        "tracing on (spans dropped) adds <= 0.5 ms per turn (an actor's spans, K=4, p50)": {
            "value_ms": round(spans_over_ms[4], 3),
            "target": "<= 0.5 ms",
            "pass": spans_over_ms[4] <= 0.5,
        },
        "tracing on (OTLP to a receiver that drops) adds <= 0.5 ms per turn (2-turn run, p50)": {
            "value_ms": round(runs_over_ms, 3),
            "target": "<= 0.5 ms",
            "pass": runs_over_ms <= 0.5,
        },
    }
    return {
        "spans_us_per_turn": spans,
        "runs_ms": rows,
        "exports_received": exports,
        "overhead_per_turn_ms": {
            **{f"spans k={k}": round(v, 3) for k, v in spans_over_ms.items()},
            "runs k=4": round(runs_over_ms, 3),
        },
        "checks": checks,
        "config": {"phases": phases, "reps_per_phase": reps, "span_turns": turns},
    }
