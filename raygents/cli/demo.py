"""The demo: an orchestrator fans out to analyst sub-agents whose CPU-heavy tools run as Ray
tasks, then hands off to a writer that produces a typed report.

Offline by default (a deterministic ``FunctionModel``); with ``OPENAI_API_KEY``
or ``OPENAI_BASE_URL`` set, every agent uses ``$RAYGENTS_MODEL`` (``OpenAIChatModel``, or
``OpenAIResponsesModel`` for a ``responses:`` name).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from typing import Any, TextIO

from pydantic import BaseModel

import raygents as rg
from raygents.agents.templates import load_template, template_instructions
from raygents.cli.terminal import visible
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.models.base import resolve_model
from raygents.models.function import FunctionModel, call, calls, text

__all__ = ["Report", "build_agents", "main"]

TOPICS = ("demand", "supply", "pricing", "risk")


class Finding(BaseModel):
    """One analyst's result."""

    topic: str
    score: float
    summary: str


class Report(BaseModel):
    """The writer's typed report."""

    title: str
    findings: list[Finding]
    recommendation: str


@rg.tool(num_cpus=1)
def simulate(topic: str, samples: int) -> dict[str, Any]:
    """Run a Monte Carlo simulation for a topic (CPU-heavy, pure Python).

    Args:
        topic: what to simulate.
        samples: how many random samples to draw.
    """
    seed = int(hashlib.sha256(topic.encode()).hexdigest()[:8], 16)
    rng = random.Random(seed)
    inside = 0
    for _ in range(samples):
        x, y = rng.random(), rng.random()
        inside += x * x + y * y <= 1.0
    return {
        "topic": topic,
        "samples": samples,
        "score": round(inside / samples, 4),
        "pid": os.getpid(),
    }


@rg.tool(num_cpus=1)
def scan_corpus(topic: str) -> dict[str, Any]:
    """Count how often words co-occur with a topic in a synthetic corpus (CPU-heavy).

    Args:
        topic: the word to look for.
    """
    rng = random.Random(topic)
    words = [topic, "growth", "cost", "delay", "margin", "churn"]
    counts: dict[str, int] = {}
    for _ in range(2_500_000):
        word = words[rng.randrange(len(words))]
        counts[word] = counts.get(word, 0) + 1
    return {"topic": topic, "top": sorted(counts, key=counts.__getitem__, reverse=True)[:3]}


# --- the offline model: deterministic replies that follow the workflow ---------------------
def _tool_results(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if m.role == "tool"]


def offline_reply(request: ModelRequest) -> ModelResponse:
    """What the offline model answers for each agent of the demo."""
    results = _tool_results(request)
    if request.agent_name == "orchestrator":
        if not results:
            return calls(
                *[call("analyst", {"input": topic}, id=f"call_{topic}") for topic in TOPICS]
            )
        return calls(call("transfer_to_writer", {}, id="call_handoff"))
    if request.agent_name == "analyst":
        topic = request.messages[0].text
        if not results:
            return calls(
                call("simulate", {"topic": topic, "samples": 8_000_000}, id="call_sim"),
                call("scan_corpus", {"topic": topic}, id="call_scan"),
            )
        sim, scan = json.loads(results[0]), json.loads(results[1])
        summary = f"{topic}: score {sim['score']}, linked to {', '.join(scan['top'])}"
        return text(json.dumps({"topic": topic, "score": sim["score"], "summary": summary}))
    findings = [json.loads(r) for r in results if r.startswith("{")]
    best = max(findings, key=lambda f: f["score"]) if findings else {"topic": "none"}
    report = {
        "title": "Market outlook",
        "findings": findings,
        "recommendation": f"Prioritise {best['topic']}.",
    }
    return text(json.dumps(report))


def _values(ctx: rg.RunContext, agent: rg.Agent) -> dict[str, Any]:
    company = (ctx.context or {}).get("company", "our company")
    return {"company": company, "samples": 8_000_000, "topics": TOPICS}


def build_agents(model: Any) -> rg.Agent:
    """The demo's agent graph; returns the orchestrator."""
    analyst = rg.Agent(
        "analyst",
        template_instructions(load_template("raygents.prompts", "analyst.txt.tmpl"), _values),
        tools=[simulate, scan_corpus],
        model=model,
    )
    writer = rg.Agent(
        "writer",
        "Write the final report from the analysts' findings in the conversation.",
        model=model,
        output_type=Report,
        handoff_description="Writes the final typed report.",
    )
    return rg.Agent(
        "orchestrator",
        "Call the analyst tool once per topic, all in one turn: "
        + ", ".join(TOPICS)
        + ". Then transfer to the writer.",
        tools=[analyst.as_tool(description="Analyse one topic; input is the topic name.")],
        handoffs=[writer],
        model=model,
    )


def choose_model(out: TextIO) -> Any:
    """``$RAYGENTS_MODEL`` when an endpoint is configured, else the offline model."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        model = resolve_model(None)
        print(f"model: {getattr(model, 'model', '?')} via {type(model).__name__}", file=out)
        return model
    print(
        "model: offline (raygents.models.function.FunctionModel, 0.3 s per reply); "
        "set OPENAI_API_KEY or OPENAI_BASE_URL to use a real model",
        file=out,
    )
    return FunctionModel(offline_reply, latency_s=0.3)


def main(argv: list[str] | None = None, out: TextIO = sys.stdout) -> int:
    """Run the demo on a local Ray instance (or ``$RAY_ADDRESS``) and print a summary."""
    started = time.perf_counter()
    model = choose_model(out)
    rg.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    print(f"ray: up in {time.perf_counter() - started:.1f} s", file=out)
    try:
        return _run(build_agents(model), out)
    finally:
        rg.shutdown()


def _run(orchestrator: rg.Agent, out: TextIO) -> int:
    started = time.perf_counter()
    handle = rg.start(
        orchestrator, "Assess the market for our product.", context={"company": "Acme"}
    )
    tool_time, tool_tasks, runs, turns = 0.0, 0, {handle.run_id}, 0
    first_start = last_end = 0.0
    for event in handle.events():
        at = time.perf_counter() - started
        if event.type == "tool_start" and event.tool_name != "analyst" and not first_start:
            first_start = at
        where = "/".join(p.split("/")[0] for p in event.path) or event.agent_name
        runs.add(event.run_id)
        if event.type == "tool_end" and event.data and "run_s" in event.data:
            tool_tasks += 1
            tool_time += event.data["run_s"]
            last_end = at
            print(
                f"  {at:5.1f}s  {visible(where):<10} {visible(event.tool_name):<12} "
                f"ran {event.data['run_s']:.2f} s "
                f"in Ray worker pid {event.data['worker_pid']}",
                file=out,
            )
        elif event.type == "agent_end":
            turns += event.turns or 0
            if event.path:
                done = visible((event.output or "")[:60])
                print(f"  {at:5.1f}s  {visible(where):<10} finished: {done}", file=out)
        elif event.type == "handoff":
            handoff = f"{visible(event.agent_name)} -> {visible(event.to_agent)}"
            print(f"  {at:5.1f}s  {handoff} (handoff)", file=out)
    wall = time.perf_counter() - started
    result = handle.result()
    report = result.final_output_as(Report)
    print(f"\nreport: {visible(report.title)}", file=out)  # (a real model's words)
    for finding in report.findings:
        shown = f"{visible(finding.topic)}: {finding.score} ({visible(finding.summary)})"
        print(f"  - {shown}", file=out)
    print(f"  recommendation: {visible(report.recommendation)}", file=out)
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 0))  # type: ignore[no-untyped-call]
    phase = max(last_end - first_start, 1e-9)
    print(
        f"\nsummary: {len(runs)} runs, {turns} turns, {tool_tasks} tool tasks on {cpus} CPUs; "
        f"wall {wall:.1f} s ({first_start:.1f} s until the first tool task started);\n"
        f"         tool phase {phase:.1f} s for {tool_time:.1f} s of tool work "
        f"({tool_time / phase:.1f}x in parallel); tokens {result.usage.total_tokens}",
        file=out,
    )
    return 0
