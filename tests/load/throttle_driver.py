"""A driver for the S3 throttling load test (``test_s3_throttle_load.py``): a private local Ray
instance that exports metrics on PORT every half second, raygents on an S3 store (the AWS
environment comes with this process's: the test session's fault proxy in front of moto), and
RUNS concurrent one-turn runs of an agent whose tool runs in the agent actor.

It talks to the test in JSON lines on stdout and plain lines on stdin:

1. after a first run (the agent actor is up), ``{"ready": ...}`` with the actor's memory;
2. on ``go`` (the test has throttled the proxy), the runs: started at once, then awaited;
   ``{"runs": ...}`` with each run's id and answer (or error) and the batch's figures;
3. on a number N (the PUTs that failed meanwhile: the SlowDowns), Ray's metrics endpoint
   scraped until its ``raygents_store_retries`` counters of writes add up to N or more (or a
   minute passed),
   then once more a few report intervals later: ``{"retries": ...}``;
4. when stdin closes it shuts raygents and Ray down.

Usage: ``python throttle_driver.py PORT STORE_URL DURABILITY RUNS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
import urllib.request
from typing import Any

import loadkit
import ray

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

_RETRIES = re.compile(r"^ray_raygents_store_retries(?:_total)?\{(.*)\} (\S+)$")
_ACTION = re.compile(r'action="(\w+)"')
_REPORT_S = 0.5
"""Ray's metrics report interval here (``metrics_report_interval_ms``)."""


@rg.tool(remote=False)
def note(n: int) -> str:
    """Note a number (in the agent actor: no Ray worker per call)."""
    return f"noted {n}"


def _one_turn(request: rg.ModelRequest) -> rg.ModelResponse:
    if any(m.role == "tool" for m in request.messages):
        return text("noted")
    return calls(call("note", {"n": 1}, id="n1"))


def _say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _actor_rss() -> int:
    """Resident memory of the agent actor processes below this driver, summed."""
    pids = loadkit.descendants()
    return sum(
        loadkit.rss_bytes(pid) for pid in pids if loadkit.cmdline(pid).startswith("ray::AgentActor")
    )


class _ActorPeak(loadkit.PeakRSS):
    """:class:`loadkit.PeakRSS`, and the peak of the agent actors' memory alone."""

    actor_peak = 0

    def sample(self) -> None:
        super().sample()
        self.actor_peak = max(self.actor_peak, _actor_rss())


def _runs(agent: rg.Agent, n: int) -> dict[str, Any]:
    peak = _ActorPeak(interval_s=0.25)
    with peak:
        started = time.perf_counter()
        handles = {i: rg.start(agent, f"run {i}") for i in range(n)}
        batch = asyncio.run(loadkit.wait_all(handles))
        wall_s = time.perf_counter() - started
    return {
        "run_ids": [batch.run_ids[i] for i in range(n)],
        "outputs": [batch.outputs.get(i) for i in range(n)],
        "errors": {str(i): f"{type(e).__name__}: {e}" for i, e in batch.errors.items()},
        "wall_s": wall_s,
        "peak_rss": peak.peak,
        "actor_peak_rss": peak.actor_peak,
    }


def scrape(port: int) -> tuple[dict[str, float], list[str]]:
    """The endpoint's ``raygents_store_retries`` total by action, and its lines."""
    url = f"http://127.0.0.1:{port}/metrics"
    body = urllib.request.urlopen(url, timeout=10).read().decode()
    totals: dict[str, float] = {}
    lines = []
    for line in body.splitlines():
        found = _RETRIES.match(line)
        if found:
            lines.append(line)
            action = _ACTION.search(found.group(1))
            key = action.group(1) if action else "?"
            totals[key] = totals.get(key, 0.0) + float(found.group(2))
    return totals, lines


def _retries(port: int, wanted: int) -> dict[str, Any]:
    """Scrape until the write retries add up to ``wanted`` (or a minute passed), then once more
    after a few report intervals (a count past ``wanted`` shows up too)."""
    deadline = time.monotonic() + 60
    totals: dict[str, float] = {}
    lines: list[str] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            totals, lines = scrape(port)
            if totals.get("write", 0.0) >= wanted:
                break
        time.sleep(_REPORT_S)
    time.sleep(4 * _REPORT_S)
    with contextlib.suppress(OSError):
        totals, lines = scrape(port)
    return {"retries": totals, "lines": lines}


def main() -> None:
    port, store, durability, n = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _metrics_export_port=port,
        _system_config={"metrics_report_interval_ms": int(_REPORT_S * 1000)},
    )
    rg.init(store=store, durability=durability, handle_sigterm=False)  # type: ignore[arg-type]
    agent = rg.Agent("throttled", tools=[note], model=FunctionModel(_one_turn))
    first = rg.run(agent, "warm up")
    _say(ready=first.final_output, actor_rss=_actor_rss())
    if sys.stdin.readline().strip() == "go":
        _say(runs=_runs(agent, n))
        wanted = sys.stdin.readline().strip()
        if wanted:
            _say(**_retries(port, int(wanted)))
    sys.stdin.read()  # (until the test closes it)
    rg.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
