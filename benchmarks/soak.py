"""Soak with chaos (L4 of the reliability plan; outside CI): a steady stream of runs with tools
while a killer kills agent actors, tool workers and the coordinator, and S3 errors a share of
requests; then a check that no run was lost and no effect happened twice.

Phases: warm-up (10% of the time), clean (30%), chaos (40%: a kill every 20 to 60 s, S3
faults at ``--fault-rate``), heal (20%: no faults, the stream goes on). Then every run started
is waited for, and the checker reports: runs lost (no answer, or a wrong one), runs failed
(with their error), duplicate effects per idempotency key, peak memory of the chaos phase
against the clean one, and whether every CPU came back within 60 s.

Runs on a private local Ray instance (``address="local"``) with moto's S3 behind the tests'
fault proxy (``tests/s3_server.py``); the workload is the load tests' (``tests/load/loadkit.py``)::

    python benchmarks/soak.py --minutes 15
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "load")]

import loadkit  # noqa: E402
import ray  # noqa: E402
from faults import faultkit  # noqa: E402
from s3_server import Fault, FaultProxy, MotoServer, aws_env, create_bucket  # noqa: E402

import raygents as rg  # noqa: E402

PHASES = (("warm-up", 0.1), ("clean", 0.3), ("chaos", 0.4), ("heal", 0.2))
REPLICAS = 4


@dataclass
class Run:
    index: int
    phase: str
    handle: rg.RunHandle
    started: float
    ended: float | None = None
    output: str | None = None
    error: BaseException | None = None


@dataclass
class Soak:
    """The stream of runs and what happened to them."""

    agent: rg.Agent
    ledger: Path
    runs: list[Run] = field(default_factory=list)
    kills: list[tuple[float, str, str]] = field(default_factory=list)
    peaks: dict[str, int] = field(default_factory=dict)
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)

    def __post_init__(self) -> None:
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def start(self, phase: str) -> None:
        i = len(self.runs)
        started = time.perf_counter()
        handle = rg.start(self.agent, loadkit.prompt(i), context={"ledger": str(self.ledger)})
        run = Run(i, phase, handle, started)
        self.runs.append(run)
        asyncio.run_coroutine_threadsafe(self._watch(run), self.loop)

    async def _watch(self, run: Run) -> None:
        try:
            run.output = (await run.handle).final_output
        except Exception as exc:  # kept and reported by the checker
            run.error = exc
        run.ended = time.perf_counter()


# --------------------------------------------------------------------------------------------
# The killer
# --------------------------------------------------------------------------------------------


def _agent_actors(namespace: str) -> list[str]:
    return [
        e["name"]
        for e in ray.util.list_named_actors(all_namespaces=True)
        if e["namespace"] == namespace and e["name"].startswith("agent:")
    ]


def kill_agent_actor(namespace: str, rng: random.Random) -> str:
    """SIGKILL a random agent actor, by the pid its ping reports (as tests/faults do)."""
    names = _agent_actors(namespace)
    if not names:
        return "no agent actor"
    name = rng.choice(names)
    pid: int = ray.get(ray.get_actor(name, namespace=namespace).ping.remote(), timeout=30)
    os.kill(pid, signal.SIGKILL)
    return f"{name} (pid {pid})"


_NOT_TOOLS = ("ray::IDLE", "ray::AgentActor", "ray::Coordinator", "ray::RuntimeEnvAgent")


def kill_tool_worker(namespace: str, rng: random.Random) -> str:
    """SIGKILL a worker process while it runs a tool task (its title is ``ray::<task>``; it
    is no actor and not idle); waits up to 10 s for one to be busy."""
    deadline = time.perf_counter() + 10
    while time.perf_counter() < deadline:
        titles = {pid: loadkit.cmdline(pid).split(" ", 1)[0] for pid in loadkit.descendants()}
        busy = [
            pid
            for pid, title in titles.items()
            if title.startswith("ray::")
            and not title.startswith(_NOT_TOOLS)
            and "Agent" not in title
        ]
        if busy:
            pid = rng.choice(busy)
            os.kill(pid, signal.SIGKILL)
            return f"tool worker {titles[pid]} (pid {pid})"
        time.sleep(0.05)
    return "no tool running"


def kill_coordinator(namespace: str, rng: random.Random) -> str:
    """Kill the coordinator; Ray restarts it and it rebuilds from the store."""
    coordinator = ray.get_actor("raygents:coordinator", namespace=namespace)
    ray.kill(coordinator, no_restart=False)
    return "coordinator"


VICTIMS = {"agent": kill_agent_actor, "tool": kill_tool_worker, "coordinator": kill_coordinator}


def killer(soak: Soak, namespace: str, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.wait(rng.uniform(20, 60)):
        kind = rng.choice(sorted(VICTIMS))
        try:
            what = VICTIMS[kind](namespace, rng)
        except Exception as exc:  # a victim that just died: note it and go on
            what = f"failed: {type(exc).__name__}: {exc}"
        soak.kills.append((time.perf_counter(), kind, what))
        print(f"  kill {kind}: {what}", flush=True)


# --------------------------------------------------------------------------------------------
# The soak
# --------------------------------------------------------------------------------------------


def stream(soak: Soak, phase: str, seconds: float, rate: float) -> None:
    """Start runs at ``rate`` a second for ``seconds``."""
    with loadkit.PeakRSS() as peak:
        t0 = time.perf_counter()
        while (now := time.perf_counter() - t0) < seconds:
            due = int(now * rate) + 1 - sum(r.phase == phase for r in soak.runs)
            for _ in range(max(0, due)):
                soak.start(phase)
            time.sleep(0.05)
    soak.peaks[phase] = peak.peak


def wait_for_runs(soak: Soak, timeout_s: float) -> None:
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline and any(r.ended is None for r in soak.runs):
        time.sleep(0.5)


def resources_back(timeout_s: float = 60.0) -> float | None:
    """Seconds until every CPU is free again, or None."""
    t0 = time.perf_counter()
    try:
        faultkit.no_leaked_cpus(timeout_s)
    except TimeoutError:
        return None
    return time.perf_counter() - t0


def pct(values: list[float], q: float) -> str:
    if not values:
        return "-"
    values = sorted(values)
    return f"{values[min(len(values) - 1, int(len(values) * q))] * 1000:.0f}"


def report(soak: Soak, proxy: FaultProxy, back_s: float | None, wall_s: float) -> bool:
    effects = faultkit.Ledger(soak.ledger).effects()
    duplicates = {k: n for k, n in effects.items() if n > 1}
    lost = [r for r in soak.runs if r.ended is None]
    wrong = [r for r in soak.runs if r.output is not None and r.output != loadkit.expected(r.index)]
    failed = [r for r in soak.runs if r.error is not None]
    expected_effects = sum(loadkit.turns_of(r.index) - 1 for r in soak.runs if r.output is not None)
    print(
        f"\n{'phase':<8} {'runs':>5} {'done':>5} {'failed':>6} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'peak RSS MB':>11}"
    )
    for phase, _ in PHASES:
        mine = [r for r in soak.runs if r.phase == phase]
        lat = [r.ended - r.started for r in mine if r.ended is not None and r.error is None]
        print(
            f"{phase:<8} {len(mine):>5} {sum(r.output is not None for r in mine):>5} "
            f"{sum(r.error is not None for r in mine):>6} {pct(lat, 0.5):>7} {pct(lat, 0.99):>7} "
            f"{soak.peaks.get(phase, 0) >> 20:>11}"
        )
    clean, chaos = soak.peaks.get("clean", 0), soak.peaks.get("chaos", 0)
    ratio = chaos / clean if clean else float("nan")
    errors: dict[str, int] = {}
    for r in failed:
        text = f"{type(r.error).__name__}: {str(r.error)[:100]}"
        errors[text] = errors.get(text, 0) + 1
    faults = proxy.count(fault="error")
    print(f"\nwall {wall_s:.0f} s; {len(soak.runs)} runs, {len(soak.runs) / wall_s:.1f}/s")
    print(f"kills: {len(soak.kills)} ({', '.join(k for _, k, _ in soak.kills) or 'none'})")
    print(f"S3 requests {proxy.count()}, of them answered with an injected error: {faults}")
    print(f"lost runs (no end): {len(lost)}; wrong answers: {len(wrong)}; failed: {len(failed)}")
    for text, n in sorted(errors.items(), key=lambda kv: -kv[1]):
        print(f"  {n} x {text}")
    print(
        f"effects: {len(effects)} keys (expected {expected_effects}), duplicates: {len(duplicates)}"
    )
    print(f"peak memory chaos / clean: {ratio:.2f} (plan: within 1.5)")
    print(f"CPUs all free again after the heal: {'no' if back_s is None else f'{back_s:.1f} s'}")
    ok = not lost and not wrong and not duplicates and back_s is not None
    print("\nCHECK", "PASS" if ok else "FAIL", "(0 lost, 0 wrong, 0 duplicate effects, CPUs back)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="length of the four phases")
    parser.add_argument("--rate", type=float, default=3.0, help="runs started a second")
    parser.add_argument("--fault-rate", type=float, default=0.01, help="S3 error share (chaos)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--drain-s", type=float, default=600.0, help="wait for runs this long")
    args = parser.parse_args()
    print(
        f"soak: {args.minutes} min, {args.rate} runs/s, S3 faults {args.fault_rate:.1%}, "
        f"seed {args.seed}",
        flush=True,
    )
    os.environ.setdefault("RAYGENTS_CHECKPOINT_KEY", os.urandom(32).hex())  # signed records
    with (
        tempfile.TemporaryDirectory(prefix="soak-") as tmp,
        MotoServer() as server,
        FaultProxy(server.endpoint_url) as proxy,
        aws_env(proxy.endpoint_url),
    ):
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(loadkit)
        cloudpickle.register_pickle_by_value(faultkit)
        namespace = f"soak-{os.urandom(3).hex()}"
        rg.init(
            namespace=namespace,
            store=f"s3://{create_bucket(server.endpoint_url)}/soak",
            durability="async",
            heartbeat_s=0.5,
            stale_after_s=5.0,
            max_attempts=10,
        )
        agent = rg.Agent(
            "soak",
            tools=[loadkit.step_tool(0.25, hold_s=0.05)],
            model=loadkit.model(),
            replicas=REPLICAS,
        )
        soak = Soak(agent, Path(tmp) / "ledger.jsonl")
        t0 = time.perf_counter()
        stop = threading.Event()
        for phase, share in PHASES:
            seconds = args.minutes * 60 * share
            print(f"{phase}: {seconds:.0f} s", flush=True)
            if phase == "chaos":
                proxy.random_faults(
                    args.fault_rate,
                    (Fault.slow_down(), Fault.internal_error(), Fault.reset()),
                    seed=args.seed,
                )
                chaos = threading.Thread(target=killer, args=(soak, namespace, stop, args.seed))
                chaos.start()
            stream(soak, phase, seconds, args.rate)
            if phase == "chaos":
                stop.set()
                chaos.join()
                proxy.clear()
        print(f"draining {sum(r.ended is None for r in soak.runs)} runs", flush=True)
        wait_for_runs(soak, args.drain_s)
        wall = time.perf_counter() - t0
        ok = report(soak, proxy, resources_back(), wall)
        rg.shutdown()
        ray.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
