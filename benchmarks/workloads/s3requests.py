"""S3 requests per run and per turn, by kind and purpose, on a run's path and off it.

Part of workload 4 (``checkpoints``), and runnable alone for the counts only::

    python benchmarks/workloads/s3requests.py          # about a minute, prints the table

Every S3 request of the Ray instance goes through the recording proxy of the test suite
(``tests/s3_server.py``: ``FaultProxy``, passing everything) in front of moto's server; the
proxy notes when it had each request and when it had the answer. One run at a time, on a
namespace of its own per durability mode (its own coordinator and agent actor), after a
warm-up run and once the proxy has been quiet for ``QUIET_S``: every request from the run's
start until the proxy is quiet again belongs to that run.

Attribution, by time: the fake model (in the agent actor) notes when each of its calls ends;
a call spans ``[end - latency, end]`` (``FunctionModel`` sleeps, then answers). A request is

* **on the path** when it lies wholly inside the run (from the driver's ``raygents.run`` call
  to its return) and outside every model call: the run waited for it, or at least nothing
  hid it. Split into ``start`` (before the first model call: the claim), ``turns`` (between
  a model call's end and the next one's start: the tool turn's records) and ``end`` (after
  the last model call: the completion marker and the outcome's trip back);
* **off the path** when it overlaps a model call (write-behind hidden by the model) or ends
  after the run returned (clean-up, write-behind the run did not wait for).

The model answers after ``LATENCY_S`` (100 ms, as a real model is slower still), so a
request hidden by a model call is told apart from one the run waits for; at latency 0 every
request of a run would read as on its path.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.parse
from typing import Any

if __name__ == "__main__":  # run alone: the benchmark modules sit one folder up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fakes
import machine

MODES = ("sync", "async", "exit")
TURNS = (2, 20)
LATENCY_S = 0.1
QUIET_S = 1.5
KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE")
PHASES = ("start", "turns", "end", "under_model", "after")
ON_PATH = ("start", "turns", "end")


class Stamped:
    """Wraps a logic: notes when each model call ends; the answer is those times (JSON)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.ends: list[float] = []

    def __call__(self, conv: Any) -> Any:
        if conv.tool_results == 0:
            self.ends = []  # a new run (runs here go one at a time)
        self.ends.append(time.time())
        decision = self.inner(conv)
        return json.dumps(self.ends) if isinstance(decision, str) else decision


def kind_of(method: str, path: str) -> str:
    """PUT, GET, HEAD, LIST or DELETE (``DeleteObjects`` is a ``POST ?delete``)."""
    query = urllib.parse.urlsplit(path).query
    if method == "GET" and "list-type" in query:
        return "LIST"
    if method == "DELETE" or (method == "POST" and "delete" in query):
        return "DELETE"
    return method


def purpose_of(method: str, path: str) -> str:
    """What a request is for, from its method and key (see docs/perf-log.md's inventory)."""
    parts = urllib.parse.urlsplit(path)
    kind = kind_of(method, path)
    if kind == "LIST":
        prefix = urllib.parse.parse_qs(parts.query).get("prefix", [""])[0]
        return "list a run's keys" if prefix.rstrip("/").count("/") >= 2 else "list the store"
    if kind == "DELETE":
        return "delete a run's keys"
    name = urllib.parse.unquote(parts.path).rsplit("/", 1)[-1]
    what = (
        "record"
        if name.endswith(".ckpt")
        else "fence mark"
        if name.startswith("fence.")
        else "completion marker"
        if name.startswith("done.")
        else "other key"
    )
    if kind == "PUT":
        return f"put {what}"
    if kind == "HEAD":
        return "fence check" if what == "fence mark" else f"previous-{what} check"
    return f"read {what}"


def phase_of(record: Any, t0: float, t_ret: float, ends: list[float], latency: float) -> str:
    """Where a request falls in a run (see the module docstring)."""
    if record.ended > t_ret:
        return "after"
    if any(record.started < end and record.ended > end - latency for end in ends):
        return "under_model"
    if not ends or record.ended <= ends[0] - latency:
        return "start"
    if record.started >= ends[-1]:
        return "end"
    return "turns"


def _quiet(proxy: Any, quiet_s: float = QUIET_S, max_s: float = 20.0) -> None:
    """Wait until the proxy has seen no request for ``quiet_s``."""
    deadline = time.time() + max_s
    seen, since = len(proxy.records), time.time()
    while time.time() < deadline:
        time.sleep(0.1)
        if len(proxy.records) != seen:
            seen, since = len(proxy.records), time.time()
        elif time.time() - since >= quiet_s:
            return


def _count(records: list[Any], t0: float, t_ret: float, ends: list[float]) -> dict[str, Any]:
    phases = {p: dict.fromkeys(KINDS, 0) for p in PHASES}
    purposes: dict[str, dict[str, int]] = {p: {} for p in PHASES}
    for r in records:
        phase = phase_of(r, t0, t_ret, ends, LATENCY_S)
        phases[phase][kind_of(r.method, r.path)] += 1
        what = purpose_of(r.method, r.path)
        purposes[phase][what] = purposes[phase].get(what, 0) + 1
    return {"phases": phases, "purposes": {p: v for p, v in purposes.items() if v}}


def _one_run(rg: Any, agent: Any, proxy: Any, turns: int) -> dict[str, Any]:
    _quiet(proxy)
    with proxy._lock:
        proxy.records.clear()
    t0 = time.time()
    result = rg.run(agent, f"k=1 turns={turns}")
    t_ret = time.time()
    _quiet(proxy)
    with proxy._lock:
        records = list(proxy.records)
    counted = _count(records, t0, t_ret, json.loads(result.final_output))
    ph = counted["phases"]
    on = {k: sum(ph[p][k] for p in ON_PATH) for k in KINDS}
    off = {k: ph["under_model"][k] + ph["after"][k] for k in KINDS}
    return {
        "turns": turns,
        "run_ms": round((t_ret - t0) * 1000, 1),
        "on_path": on,
        "off_path": off,
        "on_path_per_turn": {k: round(v / turns, 2) for k, v in on.items()},
        "in_turns_per_turn": {k: round(ph["turns"][k] / turns, 2) for k in KINDS},
        "off_path_per_turn": {k: round(v / turns, 2) for k, v in off.items()},
        **counted,
    }


def measure(bucket_of: Any, proxy: Any) -> dict[str, Any]:
    """Count one run per durability mode and turn count on the Ray instance running now
    (its S3 endpoint must be the proxy). ``bucket_of(name)`` creates a bucket."""
    import raygents as rg

    agent = rg.Agent(
        "s3req",
        tools=fakes.rg_tools("payload_local"),
        model=fakes.rg_model(Stamped(fakes.ToolTurns(k=1, tool="payload", n=512)), LATENCY_S),
        max_turns=max(TURNS) + 5,
    )
    runs: dict[str, Any] = {}
    for mode in MODES:
        rg.init(
            namespace=f"s3req-{mode}",
            store=f"s3://{bucket_of('s3req-' + mode)}/runs-{mode}",
            durability=mode,
            handle_sigterm=False,
        )
        try:
            rg.run(agent, "k=1 turns=2")  # warm up: the coordinator, the actor, the clients
            for turns in TURNS:
                runs[f"{mode}/{turns}"] = _one_run(rg, agent, proxy, turns)
                machine.log(f"  s3 requests {mode}/{turns}: {runs[f'{mode}/{turns}']['phases']}")
        finally:
            rg.shutdown()
    return {"latency_ms": LATENCY_S * 1000, "quiet_s": QUIET_S, "runs": runs}


def markdown(counts: dict[str, Any]) -> list[str]:
    """The table: requests per run on the path and off it, by kind, and per tool turn."""
    head = "/".join(k if k != "DELETE" else "DEL" for k in KINDS)
    out = [
        f"S3 requests of one run (1 tool turn = 1 `remote=False` call, model latency "
        f"{counts['latency_ms']:.0f} ms), by kind {head}. On the path: inside the run and outside "
        "every model call; off it: under a model call or after the run returned.",
        "",
        f"| mode/turns | on path ({head}) | of which in tool turns, per turn | off path ({head}) |",
        "|---|---|---|---|",
    ]
    for key, v in counts["runs"].items():
        on = "/".join(str(v["on_path"][k]) for k in KINDS)
        per = "/".join(f"{v['in_turns_per_turn'][k]:g}" for k in KINDS)
        off = "/".join(str(v["off_path"][k]) for k in KINDS)
        out.append(f"| {key} | {on} | {per} | {off} |")
    return out


def start_proxy(upstream: str) -> Any:
    """The test suite's recording proxy in front of ``upstream``, started."""
    tests = os.path.join(machine.REPO_DIR, "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from s3_server import FaultProxy

    proxy = FaultProxy(upstream)
    proxy.start()
    return proxy


def main() -> int:
    import ray

    moto = machine.Moto()
    moto.start()
    proxy = start_proxy(moto.endpoint)
    os.environ["AWS_ENDPOINT_URL_S3"] = proxy.endpoint_url  # before Ray starts: inherited
    try:
        machine.register_by_value()
        ray.init(
            address="local",
            num_cpus=machine.cpus(),
            include_dashboard=False,
            log_to_driver=False,
        )
        counts = measure(moto.bucket, proxy)
        print(json.dumps(counts, indent=1))
        print("\n".join(markdown(counts)))
        ray.shutdown()
    finally:
        proxy.stop()
        moto.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
