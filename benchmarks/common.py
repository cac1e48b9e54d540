"""What every workload shares: the fake model logic (one function of the conversation, with an
adapter for raygents and one for the OpenAI Agents SDK), the tools, the raw Ray floor, the
statistics, and a sampler of CPU and memory over the driver and every Ray process.

This module and the workload modules travel to Ray workers by value (see :func:`init_raygents`),
so the model logic and the tools that raygents sends to its actors and tasks are these very
functions, the same ones the SDK side calls in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)

# --------------------------------------------------------------------------------------------
# The model logic: a pure function of a neutral view of the conversation.
# --------------------------------------------------------------------------------------------

Calls = list[tuple[str, dict[str, Any]]]
Decision = Calls | str
"""Tool calls to make (name, arguments), or the final answer."""


@dataclass(frozen=True)
class Conv:
    """What the fake model looks at: the system prompt, the first user message, and how many
    tool results the conversation holds so far."""

    system: str
    user: str
    tool_results: int


def _param(text: str, name: str, default: int) -> int:
    import re

    found = re.search(rf"\b{name}=(\d+)", text)
    return int(found.group(1)) if found else default


class ToolTurns:
    """``turns`` turns of ``k`` parallel calls of ``tool``, then the answer.

    ``k`` and ``turns`` may come from the user message (``"k=4 turns=2"``), which wins.
    ``extra`` is merged into every call's arguments (e.g. the size of a payload to return).
    """

    def __init__(
        self, k: int = 1, turns: int = 1, tool: str = "noop", answer: str = "done", **extra: Any
    ) -> None:
        self.k, self.turns, self.tool, self.answer, self.extra = k, turns, tool, answer, extra

    def __call__(self, conv: Conv) -> Decision:
        k = _param(conv.user, "k", self.k)
        turns = _param(conv.user, "turns", self.turns)
        if k <= 0:
            return self.answer
        turn = conv.tool_results // k
        if turn >= turns:
            return self.answer
        return [(self.tool, {"i": turn * k + j, **self.extra}) for j in range(k)]


class FanOut:
    """The orchestrator of workload 3: one turn of ``m`` calls of the sub-agent tool (``m`` from
    the user message, ``"m=64"``), then the answer."""

    def __init__(self, m: int = 1, tool: str = "worker", answer: str = "merged") -> None:
        self.m, self.tool, self.answer = m, tool, answer

    def __call__(self, conv: Conv) -> Decision:
        if conv.tool_results:
            return self.answer
        m = _param(conv.user, "m", self.m)
        return [(self.tool, {"input": f"task {i}"}) for i in range(m)]


class UntilFinish:
    """One tool call per turn until the system prompt says ``phase: finish`` (workload 5): the
    runs keep going until they are suspended, and answer at once when resumed with the
    ``finish`` context."""

    def __init__(self, tool: str = "noop", answer: str = "done", max_calls: int = 10_000) -> None:
        self.tool, self.answer, self.max_calls = tool, answer, max_calls

    def __call__(self, conv: Conv) -> Decision:
        if "phase: finish" in conv.system or conv.tool_results >= self.max_calls:
            return self.answer
        return [(self.tool, {"i": conv.tool_results})]


class Stamped:
    """``k`` calls of the ``stamp`` tool carrying the time of the model call that asked for
    them, then an answer that is the time of the last model call: a run's phases can be read
    back from its messages (all processes share the machine's clock)."""

    def __init__(self, k: int = 4) -> None:
        self.k = k

    def __call__(self, conv: Conv) -> Decision:
        now = time.time()
        if conv.tool_results:
            return repr(now)
        return [("stamp", {"i": j, "t": now}) for j in range(self.k)]


# --------------------------------------------------------------------------------------------
# The tools (plain functions; each side wraps them in its own decorator).
# --------------------------------------------------------------------------------------------

CPU_BURN_S = 0.2


def noop(i: int) -> str:
    """A trivial tool.

    Args:
        i: the call's index.
    """
    return f"ok {i}"


def nap(i: int) -> str:
    """Sleep 200 ms: a one-CPU tool that leaves the CPU to everything else.

    Args:
        i: the call's index.
    """
    time.sleep(CPU_BURN_S)
    return f"slept {i}"


def burn(i: int) -> str:
    """Burn 200 ms of pure-Python CPU (thread CPU time, so contention does not shorten it).

    Args:
        i: the call's index.
    """
    end = time.thread_time() + CPU_BURN_S
    x = 0
    while time.thread_time() < end:
        for _ in range(2_000):
            x += 1
    return f"burnt {i}"


def stamp(i: int, t: float) -> str:
    """Return the model's time ``t`` and the time this call ran.

    Args:
        i: the call's index.
        t: the time of the model call that asked for this call.
    """
    return f"{t!r},{time.time()!r}"


def payload(i: int, n: int) -> str:
    """Return ``n`` bytes of text (workload 4's tool results).

    Args:
        i: the call's index.
        n: how many bytes to return.
    """
    unit = f"result {i}: "
    return (unit * (n // len(unit) + 1))[:n]


# --------------------------------------------------------------------------------------------
# raygents side
# --------------------------------------------------------------------------------------------


class RgFn:
    """The raygents adapter: ``ModelRequest`` -> :class:`Conv` -> logic -> ``ModelResponse``."""

    def __init__(self, logic: Callable[[Conv], Decision]) -> None:
        self.logic = logic

    def __call__(self, request: Any) -> Any:
        from raygents.testing import calls, text

        user = next((m.text for m in request.messages if m.role == "user"), "")
        n = sum(1 for m in request.messages if m.role == "tool")
        decision = self.logic(Conv(request.system or "", user, n))
        if isinstance(decision, str):
            return text(decision)
        return calls(*decision)


def rg_model(logic: Callable[[Conv], Decision], latency_s: float) -> Any:
    """A raygents ``FunctionModel`` running ``logic`` after ``latency_s``."""
    from raygents.testing import FunctionModel

    return FunctionModel(RgFn(logic), latency_s=latency_s)


def rg_tools(kind: str) -> list[Any]:
    """raygents tools: ``task`` (trivial, a Ray task with num_cpus=0), ``local`` (trivial, in the
    agent actor), ``cpu`` (200 ms of CPU, a Ray task with the default num_cpus=1), ``sleep``
    (200 ms of sleep, likewise), ``payload`` (a Ray task with num_cpus=0)."""
    import raygents as rg

    if kind == "task":
        return [rg.tool(num_cpus=0, name="noop")(noop)]
    if kind == "local":
        return [rg.tool(remote=False, name="noop")(noop)]
    if kind == "cpu":
        return [rg.tool(name="burn")(burn)]
    if kind == "sleep":
        return [rg.tool(name="nap")(nap)]
    if kind == "stamp":
        return [rg.tool(num_cpus=0, name="stamp")(stamp)]
    if kind == "stamp_local":
        return [rg.tool(remote=False, name="stamp")(stamp)]
    if kind == "payload":
        return [rg.tool(num_cpus=0, name="payload")(payload)]
    if kind == "payload_local":
        return [rg.tool(remote=False, name="payload")(payload)]
    raise ValueError(kind)


_FANOUT_TOOL = {"cpu": "burn", "sleep": "nap"}


def rg_fanout_agent(kind: str, name: str, latency_s: float = 0.1) -> Any:
    """The orchestrator of workload 3: its one tool is the agent ``<name>_worker``, which makes
    one call of a ``kind`` tool (:func:`rg_tools`) and answers."""
    import raygents as rg

    worker = rg.Agent(
        f"{name}_worker",
        tools=rg_tools(kind),
        model=rg_model(ToolTurns(k=1, tool=_FANOUT_TOOL.get(kind, "noop")), latency_s),
    )
    return rg.Agent(
        name,
        tools=[worker.as_tool("worker", "a worker")],
        model=rg_model(FanOut(), latency_s),
    )


def register_by_value() -> None:
    """Make the benchmark modules travel to Ray workers by value (they are not installed)."""
    from ray import cloudpickle

    for name, module in list(sys.modules.items()):
        if name == "common" or name == "workloads" or name.startswith("workloads."):
            cloudpickle.register_pickle_by_value(module)


def bare_ray_args(doc: str, n: int) -> Any:
    """The command line of a bare-Ray measurement (``--n``, the number of calls), and a
    private local Ray instance for it (2 CPUs, no dashboard, no raygents)."""
    import argparse

    import ray

    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=n)
    args = ap.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    return args


def init_raygents(store: str, durability: str = "sync", **kwargs: Any) -> None:
    """A private local Ray instance (2 CPUs, no dashboard) with raygents on it."""
    import raygents as rg

    register_by_value()
    rg.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        store=store,
        durability=durability,
        handle_sigterm=False,
        **kwargs,
    )


# --------------------------------------------------------------------------------------------
# OpenAI Agents SDK side
# --------------------------------------------------------------------------------------------


def sdk_setup() -> None:
    """No tracing (it would try to export over the network), no API key needed."""
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    from agents import set_tracing_disabled

    set_tracing_disabled(True)


def _sdk_model_class() -> Any:
    from agents import Model, ModelResponse, Usage
    from agents.testing import assistant_message, function_call

    class SdkFakeModel(Model):
        """The SDK adapter: Responses input items -> :class:`Conv` -> logic -> output items."""

        def __init__(self, logic: Callable[[Conv], Decision], latency_s: float) -> None:
            self.logic, self.latency_s = logic, latency_s

        def _decide(self, system: str | None, items: Any) -> ModelResponse:
            if isinstance(items, str):
                user, n = items, 0
            else:
                user, n = "", 0
                for item in items:
                    get = (
                        item.get
                        if isinstance(item, dict)
                        else lambda k, i=item: getattr(i, k, None)
                    )
                    kind = get("type")
                    if kind == "function_call_output":
                        n += 1
                    elif not user and get("role") == "user":
                        content = get("content")
                        user = content if isinstance(content, str) else str(content)
            decision = self.logic(Conv(system or "", user, n))
            if isinstance(decision, str):
                output = [assistant_message(decision, item_id=f"msg_{uuid.uuid4().hex[:12]}")]
            else:
                output = [
                    function_call(name, args, call_id=f"call_{uuid.uuid4().hex[:12]}")
                    for name, args in decision
                ]
            usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
            return ModelResponse(output=output, usage=usage, response_id=None)

        async def get_response(
            self,
            system_instructions: Any,
            input: Any,
            model_settings: Any,
            tools: Any,
            output_schema: Any,
            handoffs: Any,
            tracing: Any,
            *,
            previous_response_id: Any = None,
            conversation_id: Any = None,
            prompt: Any = None,
            **_: Any,
        ) -> ModelResponse:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            return self._decide(system_instructions, input)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmarks do not stream")

    return SdkFakeModel


_SDK_MODEL: Any = None


def sdk_model(logic: Callable[[Conv], Decision], latency_s: float) -> Any:
    """An SDK ``Model`` running ``logic`` after ``latency_s``."""
    global _SDK_MODEL
    if _SDK_MODEL is None:
        _SDK_MODEL = _sdk_model_class()
    return _SDK_MODEL(logic, latency_s)


def sdk_tools(kind: str) -> list[Any]:
    """SDK function tools (``task`` and ``local`` are the same trivial tool there)."""
    from agents import function_tool

    if kind in ("task", "local"):
        return [function_tool(noop, name_override="noop")]
    if kind == "cpu":
        return [function_tool(burn, name_override="burn")]
    if kind in ("payload", "payload_local"):
        return [function_tool(payload, name_override="payload")]
    if kind in ("stamp", "stamp_local"):
        return [function_tool(stamp, name_override="stamp")]
    raise ValueError(kind)


class SdkLoop:
    """A private asyncio loop for the SDK side, driven from the (synchronous) benchmark code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()


# --------------------------------------------------------------------------------------------
# The raw Ray floor: the same workloads with bare actors and tasks, no framework.
# --------------------------------------------------------------------------------------------

_FLOOR: dict[str, Any] = {}


async def marked_turns(bare_task: Any, latency_s: float, k: int) -> list[tuple[str, float]]:
    """What ``FloorAgent.tools_turns`` does for one turn of ``k`` tool tasks, with the time of
    each step (in an async actor; ``phases.py``)."""
    now = time.time()
    marks = [("actor_start", now), ("model_in", now)]
    await asyncio.sleep(latency_s)
    marks.append(("model_out", time.time()))
    await asyncio.gather(*(bare_task.remote(j) for j in range(k)))
    marks.append(("model_in", time.time()))
    await asyncio.sleep(latency_s)
    marks.append(("model_out", time.time()))
    return marks


def floor() -> dict[str, Any]:
    """Remote functions and actor classes of the Ray floor (defined once Ray is up)."""
    if _FLOOR:
        return _FLOOR
    import ray

    @ray.remote(num_cpus=0)
    def bare_task(i: int) -> str:
        return noop(i)

    @ray.remote
    def cpu_task(i: int) -> str:
        return burn(i)

    @ray.remote
    def nap_task(i: int) -> str:
        return nap(i)

    @ray.remote
    def pool_task(i: int) -> int:
        return i

    @ray.remote(num_cpus=0, max_concurrency=10_000)
    class FloorAgent:
        """An async actor doing a run's work with nothing around it."""

        async def ping(self) -> int:
            return 0

        async def tools_turns(self, latency_s: float, k: int, turns: int, local: bool) -> str:
            for turn in range(turns):
                await asyncio.sleep(latency_s)
                if local:
                    [noop(turn * k + j) for j in range(k)]
                else:
                    await asyncio.gather(*(bare_task.remote(turn * k + j) for j in range(k)))
            await asyncio.sleep(latency_s)
            return "done"

        async def child(self, latency_s: float, tool: str) -> str:
            await asyncio.sleep(latency_s)
            await {"cpu": cpu_task, "sleep": nap_task}.get(tool, bare_task).remote(0)
            await asyncio.sleep(latency_s)
            return "answer"

        async def fan_out(self, sub: Any, latency_s: float, m: int, tool: str) -> str:
            """``tool``: ``cpu`` (200 ms of CPU), ``sleep`` (200 ms of sleep), else trivial."""
            await asyncio.sleep(latency_s)
            await asyncio.gather(*(sub.child.remote(latency_s, tool) for _ in range(m)))
            await asyncio.sleep(latency_s)
            return "merged"

    _FLOOR.update(
        bare_task=bare_task,
        cpu_task=cpu_task,
        nap_task=nap_task,
        pool_task=pool_task,
        FloorAgent=FloorAgent,
    )
    return _FLOOR


def fanout_sides(tool: str, m: int, name: str) -> dict[str, Callable[[], Any]]:
    """One fan-out of workload 3 (``m`` sub-agents with a ``tool`` tool, 100 ms model) on
    the Ray floor and with raygents (initialised), each run once to warm up actors and
    workers."""
    import ray

    import raygents as rg

    floor_actors = floor()
    orchestrator, sub = floor_actors["FloorAgent"].remote(), floor_actors["FloorAgent"].remote()
    agent = rg_fanout_agent(tool, name)
    sides: dict[str, Callable[[], Any]] = {
        "ray_floor": lambda: ray.get(orchestrator.fan_out.remote(sub, 0.1, m, tool)),
        "raygents": lambda: rg.run(agent, f"m={m}"),
    }
    for run in sides.values():
        run()
    return sides


def warm_pool(n: int) -> None:
    """Bring Ray's worker pool to the same state before a timed run: a backlog of ``n``
    trivial one-CPU tasks. Ray kills idle workers after a while and starts workers again for
    the next backlog, so the first run after an idle spell (another side's turn) would
    otherwise pay for starting Ray workers (the fan-out table's ``ray worker`` row)."""
    import ray

    task = floor()["pool_task"]
    ray.get([task.remote(i) for i in range(n)])


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> dict[str, Any]:
    """n, median (p50), p99, min, max, mean."""
    vals = [float(v) for v in values]
    if not vals:
        return {"n": 0}
    return {
        "n": len(vals),
        "p50": statistics.median(vals),
        "p99": percentile(vals, 99),
        "min": min(vals),
        "max": max(vals),
        "mean": statistics.fmean(vals),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def load() -> dict[str, Any]:
    """The machine's load right now."""
    import psutil

    return {"loadavg": list(os.getloadavg()), "cpu_percent": psutil.cpu_percent(interval=None)}


def settle(
    max_s: float = 60.0, busy_percent: float = 15.0, window_s: float = 2.0
) -> dict[str, Any]:
    """Wait until the machine is quiet: CPU use over ``window_s`` below ``busy_percent`` (of
    all CPUs), for at most ``max_s``. The processes of the previous workload (its Ray
    instance shutting down, its tool workers exiting) would otherwise run into the next one.
    Returns how long it waited and the last reading."""
    import psutil

    began = time.time()
    while True:
        busy = psutil.cpu_percent(interval=window_s)
        waited = time.time() - began
        if busy < busy_percent or waited >= max_s:
            return {"waited_s": round(waited, 1), "cpu_percent": busy}


def idle_workers() -> int:
    """How many idle Ray worker processes (``ray::IDLE``) run below this driver."""
    import psutil

    count = 0
    for p in psutil.Process().children(recursive=True):
        try:
            if " ".join(p.cmdline()).startswith("ray::IDLE"):
                count += 1
        except psutil.Error:
            continue
    return count


KEPT_IDLE_WORKERS = 8
"""Idle workers Ray keeps on the benchmarks' 2-CPU instance: raygents' ``init`` sets
``num_workers_soft_limit`` to four per CPU, at least 8 (benchmarks/README.md, finding 7)."""


def zero_cpu_sides(n: int) -> tuple[dict[str, dict[str, Any]], int]:
    """Workload 2's ``raygents_task`` and ``ray_floor`` sides at N concurrent runs (4 zero-CPU
    tool tasks, 100 ms model) on the running raygents instance, one after the other, after a
    warm-up of 10 runs on every side; each once Ray is back to its idle workers and the CPU is
    quiet.
    Returns each side's batch result with its sampler's report (``"sampler"``), and how many
    idle workers Ray keeps."""
    from workloads import harness as H

    import raygents as rg

    agent = rg.Agent("tp_task", tools=rg_tools("task"), model=rg_model(ToolTurns(k=4), 0.1))
    floor_actor = floor()["FloorAgent"].remote()
    sides = {
        "raygents_task": lambda m: H.rg_batch(agent, [f"k=4 run {i}" for i in range(m)]),
        "ray_floor": lambda m: H.run_async(
            H.floor_batch_async([lambda: floor_actor.tools_turns.remote(0.1, 4, 1, False)] * m)
        ),
    }
    for side in sides.values():
        side(10)
    time.sleep(2.0)
    pool = idle_footprint()["by_role"].get("ray::IDLE worker", {}).get("count", 0)
    out: dict[str, dict[str, Any]] = {}
    for name, side in sides.items():
        settle_workers(pool)
        settle(max_s=30.0, window_s=1.0)
        with Sampler(interval_s=0.5) as sampler:
            out[name] = side(n)
        out[name]["sampler"] = sampler.report
    return out, pool


def worker_processes(report: dict[str, Any]) -> int:
    """Worker processes a sampler saw (idle ones included), not all alive at once."""
    roles = report.get("by_role") or {}
    return sum(v["count"] for role, v in roles.items() if "worker" in role)


GC_TIMES_DIR = "RG_BENCH_GC_DIR"
"""The environment variable naming the folder of :func:`time_collections`."""


def time_collections() -> None:
    """Add up the CPU time this process spends in garbage collections, in a file of the folder
    named by ``$RG_BENCH_GC_DIR`` (``<pid>``, rewritten every 0.2 s by a thread): a Ray worker
    setup hook, and for the driver itself. :func:`collection_times` reads the files."""
    import gc
    import threading

    folder = os.environ[GC_TIMES_DIR]
    spent = [0.0]
    began = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.thread_time()
        else:
            spent[0] += time.thread_time() - began[0]

    def report() -> None:
        path = os.path.join(folder, str(os.getpid()))
        while True:
            time.sleep(0.2)
            with open(path + ".tmp", "w") as f:
                f.write(repr(spent[0]))
            os.replace(path + ".tmp", path)

    gc.callbacks.append(timed)
    threading.Thread(target=report, daemon=True, name="gc-times").start()


def collection_times(folder: str) -> dict[int, float]:
    """CPU seconds in garbage collections so far, by process (:func:`time_collections`)."""
    out = {}
    for name in os.listdir(folder):
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError), open(os.path.join(folder, name)) as f:
                out[int(name)] = float(f.read())
    return out


def tree_parser(doc: str | None) -> Any:
    """The argument parser of a script that compares checkouts with :func:`alternate_trees`
    (described by the first paragraph of its ``doc``), with ``--trees`` and the hidden
    ``--child`` (one run, in the checkout's own process)."""
    import argparse

    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    ap.add_argument("--trees", nargs="+", required=True, help="raygents checkouts to compare")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return ap


def alternate_trees(
    script: str, trees: Sequence[str], reps: int, child_args: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """Run ``script --child <child_args>`` once per checkout per repetition, in rotating
    order, each in a fresh process whose ``PYTHONPATH`` starts with that checkout, once the
    machine is quiet; the child prints one ``RESULT <json>`` line. Returns the results by
    checkout, and prints each as it comes. Run from a directory without a ``raygents``
    package (``benchmarks/``): Ray's workers put the driver's working directory first on
    their path."""
    results: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    order = list(trees)
    for rep in range(reps):
        for tree in order[rep % len(order) :] + order[: rep % len(order)]:
            settle(max_s=60.0)
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            done = subprocess.run(
                [sys.executable, script, *child_args, "--trees", tree, "--child"],
                capture_output=True,
                text=True,
                timeout=1800,
                env=env,
            )
            line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"{tree} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
            got = json.loads(line[len("RESULT ") :])
            results[tree].append(got)
            print(tree, json.dumps(got), flush=True)
    return results


def settle_workers(limit: int, max_s: float = 30.0, steady_s: float = 5.0) -> dict[str, Any]:
    """Wait until at most ``limit`` idle Ray workers are left (at least
    :data:`KEPT_IDLE_WORKERS`), or their number has not gone down for ``steady_s``, for at
    most ``max_s``.

    A side whose zero-CPU tasks made Ray start a worker per pending task leaves dozens of
    idle workers behind, which Ray stops over the next seconds; the next side would
    otherwise carry their memory and their idle CPU. Returns how long it waited and how many
    were left."""
    limit = max(limit, KEPT_IDLE_WORKERS)
    began = last_drop = time.time()
    fewest = idle_workers()
    while True:
        left = idle_workers()
        now = time.time()
        if left < fewest:
            fewest, last_drop = left, now
        if left <= limit or now - last_drop >= steady_s or now - began >= max_s:
            return {"waited_s": round(now - began, 1), "idle_workers": left}
        time.sleep(0.25)


def machine_info() -> dict[str, Any]:
    """What ran the benchmarks."""
    import psutil

    versions: dict[str, str] = {}
    for pkg in ("ray", "raygents", "openai-agents", "openai", "pydantic", "msgpack", "moto"):
        try:
            from importlib.metadata import version

            versions[pkg] = version(pkg)
        except Exception:
            versions[pkg] = "?"
    try:
        rev = subprocess.run(
            ["git", "-C", REPO_DIR, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", REPO_DIR, "status", "--porcelain", "raygents"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except Exception:
        rev, dirty = "?", ""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "versions": versions,
        "git": rev + ("+dirty(raygents/)" if dirty else ""),
        "loadavg": list(os.getloadavg()),
    }


# --------------------------------------------------------------------------------------------
# CPU and memory of every process involved
# --------------------------------------------------------------------------------------------


def role(cmdline: str, name: str, me: int, pid: int) -> str:
    """A short role name for a process of the benchmark."""
    if pid == me:
        return "driver"
    for key, label in (
        ("gcs_server", "gcs_server"),
        ("raylet", "raylet"),
        ("ray::Coordinator", "ray::Coordinator"),
        ("ray::AgentActor", "ray::AgentActor"),
        ("ray::FloorAgent", "ray::FloorAgent"),
        ("ray::_ScriptStore", "ray::_ScriptStore"),
        ("ray::tool:", "ray::tool worker"),
        ("ray::IDLE", "ray::IDLE worker"),
        ("ray::bare_task", "ray::task worker"),
        ("ray::cpu_task", "ray::task worker"),
        ("ray::nap_task", "ray::task worker"),
        ("dashboard/agent.py", "ray dashboard agent"),
        ("runtime_env/agent", "ray runtime_env agent"),
        ("log_monitor", "ray log_monitor"),
        ("moto_server", "moto_server"),
        ("default_worker.py", "ray worker"),
        ("ray::", "ray worker"),
    ):
        if key in cmdline:
            return label
    return name


class ProcSampler:
    """Samples process ``root`` (the driver) and all its descendants (Ray's processes, started
    by the driver with ``address="local"``, are all below it) every ``interval_s``: CPU seconds
    used inside the window, peak RSS and peak PSS per process and of the sum over processes.

    Use :class:`Sampler` (a separate process) around a measurement, so that sampling takes
    neither the driver's GIL nor its CPU time."""

    def __init__(self, root: int, interval_s: float = 0.5, pss: bool = True) -> None:
        import psutil

        self.psutil = psutil
        self.interval_s = interval_s
        self.pss = pss
        self.root = root
        self.me = os.getpid()
        self.procs: dict[int, dict[str, Any]] = {}
        self.peak_total_rss = 0
        self.peak_total_pss = 0
        self.samples = 0
        self.sys_cpu: list[float] = []
        self.wall0 = time.time()
        self.t0 = time.perf_counter()
        self.t1 = self.t0
        psutil.cpu_percent(interval=None)

    def scan(self) -> None:
        psutil = self.psutil
        try:
            top = psutil.Process(self.root)
            procs = [top, *top.children(recursive=True)]
        except psutil.Error:
            return
        total_rss = total_pss = 0
        for p in procs:
            if p.pid == self.me:
                continue
            try:
                with p.oneshot():
                    cpu = p.cpu_times()
                    used = cpu.user + cpu.system
                    if self.pss:
                        mem = p.memory_full_info()
                        rss, pss = mem.rss, getattr(mem, "pss", mem.rss)
                    else:
                        rss = pss = p.memory_info().rss
                    entry = self.procs.get(p.pid)
                    if entry is None:
                        born = p.create_time()
                        cmd = " ".join(p.cmdline())[:200]
                        entry = self.procs[p.pid] = {
                            "pid": p.pid,
                            "role": role(cmd, p.name(), self.root, p.pid),
                            "cmdline": cmd,
                            "cpu_first": 0.0 if born >= self.wall0 else used,
                            "cpu_last": used,
                            "peak_rss": rss,
                            "peak_pss": pss,
                        }
                    else:
                        if entry["role"] in ("ray worker", "ray::IDLE worker"):
                            cmd = " ".join(p.cmdline())[:200]
                            new_role = role(cmd, p.name(), self.root, p.pid)
                            if new_role not in ("ray worker", "ray::IDLE worker"):
                                entry["role"], entry["cmdline"] = new_role, cmd
                        entry["cpu_last"] = used
                        entry["peak_rss"] = max(entry["peak_rss"], rss)
                        entry["peak_pss"] = max(entry["peak_pss"], pss)
                total_rss += rss
                total_pss += pss
            except psutil.Error:
                continue
        self.peak_total_rss = max(self.peak_total_rss, total_rss)
        self.peak_total_pss = max(self.peak_total_pss, total_pss)
        self.samples += 1
        self.sys_cpu.append(psutil.cpu_percent(interval=None))
        self.t1 = time.perf_counter()

    def report(self) -> dict[str, Any]:
        """Per role and per process: CPU seconds in the window, peak RSS / PSS in MB."""
        wall = self.t1 - self.t0
        by_role: dict[str, dict[str, Any]] = {}
        rows = []
        for e in self.procs.values():
            cpu = max(0.0, e["cpu_last"] - e["cpu_first"])
            rows.append(
                {
                    "pid": e["pid"],
                    "role": e["role"],
                    "cpu_s": round(cpu, 3),
                    "peak_rss_mb": round(e["peak_rss"] / 2**20, 1),
                    "peak_pss_mb": round(e["peak_pss"] / 2**20, 1),
                    "cmdline": e["cmdline"][:120],
                }
            )
            r = by_role.setdefault(
                e["role"], {"count": 0, "cpu_s": 0.0, "peak_rss_mb": 0.0, "peak_pss_mb": 0.0}
            )
            r["count"] += 1
            r["cpu_s"] = round(r["cpu_s"] + cpu, 3)
            r["peak_rss_mb"] = round(r["peak_rss_mb"] + e["peak_rss"] / 2**20, 1)
            r["peak_pss_mb"] = round(r["peak_pss_mb"] + e["peak_pss"] / 2**20, 1)
        total_cpu = sum(r["cpu_s"] for r in rows)
        return {
            "wall_s": round(wall, 3),
            "cpu_s_total": round(total_cpu, 3),
            "cpu_util_of_2_cores": round(total_cpu / wall / 2, 3) if wall > 0 else None,
            "peak_total_rss_mb": round(self.peak_total_rss / 2**20, 1),
            "peak_total_pss_mb": round(self.peak_total_pss / 2**20, 1),
            "system_cpu_percent_p50": statistics.median(self.sys_cpu) if self.sys_cpu else None,
            "samples": self.samples,
            "by_role": dict(sorted(by_role.items(), key=lambda kv: -kv[1]["cpu_s"])),
            "processes": sorted(rows, key=lambda r: -r["cpu_s"])[:40],
        }


def _sampler_main(root: int, out: str, interval_s: float, pss: bool) -> None:
    import signal

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sampler = ProcSampler(root, interval_s, pss)
    sampler.scan()
    print("ready", flush=True)
    import psutil

    while not stop.wait(interval_s):
        if not psutil.pid_exists(root):  # the driver is gone: do not linger
            break
        sampler.scan()
    sampler.scan()
    dump(sampler.report(), out)


class Sampler:
    """A :class:`ProcSampler` in a separate process over this process and its descendants::

    with Sampler() as s:
        ...
    s.report  # the dict of ProcSampler.report()
    """

    def __init__(self, interval_s: float = 0.5, pss: bool = True) -> None:
        self.interval_s, self.pss = interval_s, pss
        self.report: dict[str, Any] = {}

    def __enter__(self) -> Sampler:
        import tempfile

        fd, self.out = tempfile.mkstemp(suffix=".json", prefix="sampler-")
        os.close(fd)
        code = (
            f"import sys; sys.path.insert(0, {BENCH_DIR!r}); import common; "
            f"common._sampler_main({os.getpid()}, {self.out!r}, {self.interval_s}, {self.pss})"
        )
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "ready": the first scan is done
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        try:
            with open(self.out) as f:
                self.report = json.load(f)
        except (OSError, ValueError):
            self.report = {"error": "the sampler wrote nothing"}
        os.unlink(self.out)


def idle_footprint(pss: bool = True) -> dict[str, Any]:
    """Total RSS / PSS of the driver and its descendants right now."""
    s = ProcSampler(os.getpid(), pss=pss)
    s.scan()
    r = s.report()
    return {
        "total_rss_mb": r["peak_total_rss_mb"],
        "total_pss_mb": r["peak_total_pss_mb"],
        "processes": len(r["processes"]),
        "by_role": {
            k: {"count": v["count"], "pss_mb": v["peak_pss_mb"]} for k, v in r["by_role"].items()
        },
    }


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def scratch(prefix: str) -> str:
    """A new temporary folder, removed when the process exits (stores, hooks, builds)."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def dump(obj: Any, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, default=str)


def log(*parts: Any) -> None:
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


class Moto:
    """moto's S3 server in a subprocess on 127.0.0.1 (so its CPU is its own, and sampled)."""

    def __init__(self) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    def start(self) -> None:
        exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
        self.proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import urllib.request

        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).read()
                break
            except Exception:
                time.sleep(0.2)
        os.environ.update(self.env)  # before Ray starts: the coordinator inherits it

    def bucket(self, name: str) -> str:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint).create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
