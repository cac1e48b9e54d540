"""A driver with its own local Ray instance, whose processes inherit the OTLP endpoint in its
environment: a run with a handoff and a fan-out of three agent-as-tool children, and a run
whose agent actor is killed in the middle and recovers. It prints their run ids as a JSON line
and stays up (its processes exporting their spans) until its stdin closes.

Usage: ``python trace_driver.py STORE_URL``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import ray

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text


@rg.tool(num_cpus=0)
def look_up(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def _researcher(req: rg.ModelRequest) -> rg.ModelResponse:
    if any(m.role == "tool" for m in req.messages):
        return text("found it")
    topic = next(m.text for m in req.messages if m.role == "user")
    return calls(call("look_up", {"topic": topic}, id="c_look"))


def _lead(req: rg.ModelRequest) -> rg.ModelResponse:
    if sum(1 for m in req.messages if m.role == "tool") > 1:  # (the handoff's, the research's)
        return text("summary")
    return calls(*[call("research", {"input": t}, id=f"c_{t}") for t in ("a", "b", "c")])


RESEARCHER = rg.Agent("researcher", tools=[look_up], model=FunctionModel(_researcher))
LEAD = rg.Agent(
    "lead",
    tools=[RESEARCHER.as_tool("research", "Research a topic.")],
    model=FunctionModel(_lead),
)
TRIAGE = rg.Agent(
    "triage",
    handoffs=[LEAD],
    model=FunctionModel(lambda req: calls(call("transfer_to_lead", {}, id="c_h"))),
)


@rg.tool(num_cpus=0)
def step(n: int) -> str:
    """Take one step."""
    return f"step {n}"


def _stepper(req: rg.ModelRequest) -> rg.ModelResponse:
    done = sum(1 for m in req.messages if m.role == "tool")
    if done >= 2:
        return text("steps done")
    return calls(call("step", {"n": done}, id=f"c_step{done}"))


STEPPER = rg.Agent("stepper", tools=[step], model=FunctionModel(_stepper, latency_s=1.5))


def _agent_actor(name: str) -> Any:
    namespace = rg.runtime.driver.client.current().namespace
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == namespace and entry["name"].startswith(f"agent:{name}@"):
            return ray.get_actor(entry["name"], namespace=namespace)
    raise LookupError(name)


def _recovered_run() -> str:
    """A run whose agent actor is killed during its second model call, once its first tool
    batch is checkpointed."""
    handle = rg.start(STEPPER, "go")
    events = iter(handle.events())
    next(e for e in events if e.type == "tool_end")
    next(e for e in events if e.type == "checkpoint")
    time.sleep(0.3)
    os.kill(ray.get(_agent_actor("stepper").ping.remote()), signal.SIGKILL)
    assert handle.result(timeout_s=120).final_output == "steps done"
    assert any(e.type == "recovered" for e in handle.events())
    return handle.run_id


def main() -> None:
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    rg.init(
        store=sys.argv[1],
        heartbeat_s=0.5,
        stale_after_s=5.0,
        max_attempts=5,
        handle_sigterm=False,
    )
    fanned = rg.start(TRIAGE, "research a, b and c")
    assert fanned.result(timeout_s=120).final_output == "summary"
    recovered = _recovered_run()
    print(json.dumps({"fanned": fanned.run_id, "recovered": recovered}), flush=True)
    sys.stdin.read()
    rg.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
