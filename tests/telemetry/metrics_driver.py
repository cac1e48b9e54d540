"""A driver for the metrics and logs test: a private local Ray instance that exports metrics on
PORT every half second, a few runs (tools in tasks and in the actor, a rate-limited model, a
suspend and its resume, a recovery after the agent actor is killed), then Ray's metrics
endpoint scraped until every raygents metric is there. Prints the scraped ``raygents`` lines
as one JSON line on stdout.

Usage: ``python metrics_driver.py PORT STORE_URL`` (``RAYGENTS_LOG_FORMAT`` comes with the
environment, and reaches the workers through it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import time
import urllib.request

import ray

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

MODEL = "metered-model"
EXPECTED = (
    "runs_started_total",
    "runs_ended_total",
    "turns_total",
    "tokens_total",
    "model_call_seconds_bucket",
    "tool_call_seconds_bucket",
    "checkpoint_bytes_bucket",
    "checkpoint_write_seconds_bucket",
    "recoveries_total",
    "suspends_total",
    "rate_limit_wait_seconds_bucket",
)


@rg.tool(num_cpus=0)
def nap(seconds: float) -> str:
    """Sleep a while in a tool task."""
    time.sleep(seconds)
    return "rested"


@rg.tool(remote=False)
def note(ctx: rg.ToolContext) -> str:
    """Log a line from inside the agent actor (it names the run)."""
    logging.getLogger("raygents.e2e").warning("noted in %s", ctx.agent_name)
    return "noted"


def _reply(request: rg.ModelRequest) -> rg.ModelResponse:
    done = sum(1 for m in request.messages if m.role == "tool")
    if done == 0:
        return calls(call("nap", {"seconds": 0.05}), call("note", {}), input_tokens=40)
    if done == 2 and "slow" in (request.messages[0].text or ""):
        return calls(call("nap", {"seconds": 2.0}))
    return text("done", input_tokens=60, output_tokens=7)


def _agent() -> rg.Agent:
    model = FunctionModel(_reply)
    model.model = MODEL  # type: ignore[attr-defined]  # (the name it is rate-limited by)
    return rg.Agent("metered", tools=[nap, note], model=model)


def _kill_agent_actor() -> None:
    namespace = rg.runtime.driver.client.current().namespace
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == namespace and entry["name"].startswith("agent:metered@"):
            actor = ray.get_actor(entry["name"], namespace=namespace)
            os.kill(ray.get(actor.ping.remote()), signal.SIGKILL)
            return
    raise LookupError("agent:metered")


def _runs(port: int) -> list[str]:
    """Drive the runs; the endpoint's raygents lines before the agent actor is killed (Ray
    stops serving a dead worker's metrics, and the kill takes the actor that counted the
    suspend)."""
    agent = _agent()
    rg.start(agent, "go", run_id="m-plain").result(timeout_s=120)
    paused = rg.start(agent, "slow go", run_id="m-paused")
    next(e for e in paused.events() if e.type == "tool_start")
    paused.suspend()  # (before its second model call)
    with contextlib.suppress(rg.SuspendedError):
        paused.result(timeout_s=120)
    rg.resume("m-paused", agent=agent).result(timeout_s=120)
    before_kill = scrape(port, time.monotonic() + 60, 'status="suspended"')
    lost = rg.start(agent, "slow go", run_id="m-lost")
    naps = (e for e in lost.events() if e.type == "tool_start" and e.tool_name == "nap")
    next(naps)
    next(naps)  # the two-second nap, after the first batch's checkpoint
    time.sleep(0.3)
    _kill_agent_actor()
    lost.result(timeout_s=120)
    return before_kill


def scrape(port: int, deadline: float, wanted: str = "") -> list[str]:
    """The endpoint's raygents lines, once every expected metric is there (with ``wanted``:
    once a line holds it), or at the deadline: what there is."""
    lines: list[str] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            url = f"http://127.0.0.1:{port}/metrics"
            body = urllib.request.urlopen(url, timeout=10).read().decode()
            lines = [line for line in body.splitlines() if line.startswith("ray_raygents_")]
            if wanted and any(wanted in line for line in lines):
                return lines
            if not wanted and all(
                any(line.startswith(f"ray_raygents_{e}") for line in lines) for e in EXPECTED
            ):
                return lines
        time.sleep(0.5)
    return lines


def main() -> None:
    port, store = int(sys.argv[1]), sys.argv[2]
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _metrics_export_port=port,
        _system_config={"metrics_report_interval_ms": 500},
    )
    limits = {MODEL: rg.RateLimit(requests_per_minute=6000)}
    rg.init(store=store, handle_sigterm=False, rate_limits=limits, heartbeat_s=0.5)
    before_kill = _runs(port)
    after = scrape(port, time.monotonic() + 90)
    series = {line.rpartition(" ")[0] for line in after}  # (a series the endpoint still serves)
    lines = after + [line for line in before_kill if line.rpartition(" ")[0] not in series]
    print(json.dumps({"lines": lines}), flush=True)
    time.sleep(2)  # (the workers' last log lines reach this driver)
    rg.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
