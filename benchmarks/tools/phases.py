"""Where the time of one 2-turn run goes, phase by phase, in raygents and on the Ray floor.

    python benchmarks/tools/phases.py                 # K=4 tool tasks, 100 ms model, 40 runs
    python benchmarks/tools/phases.py --durability exit # without the run's checkpoint records
    python benchmarks/tools/phases.py --cpu 40          # and the CPU of a run, process by process

The two sides run alternately in one process, as in ``ab.py --workload single``. raygents'
moments come from a Ray worker setup hook that wraps, in every worker, ``Relay.__init__`` (the
actor takes the run), ``FunctionModel.respond`` (a model call starts and returns),
``RecordWriter._mark_done`` (the completion marker) and the packing of a take's reply, and from
the driver (``start()`` called, ``_launch``, the mailbox's start, the result back); the floor's
from the same moments in its actor (``rayfloor.marked_turns``). Prints the median of each phase
on both sides and the difference, then raygents' run step by step. Clocks are ``time.time()``,
one clock for every process of this machine.

``--cpu N`` then runs N runs of each side, one side after the other, with a sampler process
(``sampling.Sampler``) reading the CPU time of every process, and prints the CPU per run by
process role.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH_DIR)

import fakes  # noqa: E402
import machine  # noqa: E402
import rayfloor  # noqa: E402

Chain = tuple[tuple[str, str, str], ...]
PHASES: Chain = (
    ("driver_start", "actor_start", "start() to the actor having the run"),
    ("actor_start", "model_in", "the actor: run taken to model call 1"),
    ("model_in", "model_out", "model call 1 (the fake model's sleep)"),
    ("model_out", "model_in", "model reply 1 to model call 2 (the tool turn)"),
    ("model_in", "model_out", "model call 2"),
    ("model_out", "driver_end", "model reply 2 to the result in the driver"),
)
STEPS: Chain = (
    ("driver_start", "launch", "start() to _launch (input checked, graph snapshot)"),
    ("launch", "mailbox_start", "_launch to the mailbox's start (the driver's loop)"),
    ("mailbox_start", "actor_start", "the start call to the actor having the run"),
    ("actor_start", "model_in", "the actor: run taken to model call 1"),
    ("model_in", "model_out", "model call 1"),
    ("model_out", "model_in", "the tool turn"),
    ("model_in", "model_out", "model call 2"),
    ("model_out", "marker_in", "model reply 2 to the completion marker"),
    ("marker_in", "marker_out", "the completion marker (built and stored)"),
    ("marker_out", "pack_in", "the marker to packing the outcome's take"),
    ("pack_in", "pack_out", "packing the take's reply"),
    ("pack_out", "driver_end", "the take's reply to the result in the driver"),
)
"""raygents' run step by step (the floor has no such steps)."""


def _mark_worker() -> None:
    """Ray's worker setup hook: a line in this worker's file when an agent actor takes runs,
    and as a model call, a completion marker and the packing of a take's reply begin and end."""
    import os
    import time

    from raygents.runtime.actor import outbox
    from raygents.runtime.actor.writer import RecordWriter
    from raygents.testing import FunctionModel

    path = os.path.join(os.environ["RG_PHASES_DIR"], f"{os.getpid()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def mark(label: str) -> None:
        os.write(fd, f"{time.time():.6f} {label}\n".encode())

    def marked_async(method: Any, name: str) -> Any:
        async def marked(*args: Any) -> Any:
            mark(f"{name}_in")
            try:
                return await method(*args)
            finally:
                mark(f"{name}_out")

        return marked

    relay, pack = outbox.Relay.__init__, outbox.pack

    def marked_relay(self: Any, *args: Any) -> None:
        mark("actor_start")
        relay(self, *args)

    def marked_pack(items: Any) -> bytes:
        mark("pack_in")
        try:
            return pack(items)
        finally:
            mark("pack_out")

    outbox.Relay.__init__ = marked_relay  # type: ignore[method-assign]
    outbox.pack = marked_pack
    FunctionModel.respond = marked_async(FunctionModel.respond, "model")  # type: ignore[method-assign]
    RecordWriter._mark_done = marked_async(RecordWriter._mark_done, "marker")  # type: ignore[method-assign]


def _phases(marks: list[tuple[str, float]], chain: Chain = PHASES) -> list[float] | None:
    """The phases of one run (ms), from its marks in time order; None if any is missing."""
    out: list[float] = []
    at = 0
    for first, then, _ in chain:
        try:
            i = next(j for j in range(at, len(marks)) if marks[j][0] == first)
            k = next(j for j in range(i + 1, len(marks)) if marks[j][0] == then)
        except StopIteration:
            return None
        out.append(1000 * (marks[k][1] - marks[i][1]))
        at = k
    return out


def _worker_marks(folder: str) -> list[tuple[float, str]]:
    found = []
    for path in glob.glob(os.path.join(folder, "*.log")):
        with open(path) as f:
            for line in f:
                when, label = line.split()
                found.append((float(when), label))
    return sorted(found)


def _report(
    args: argparse.Namespace,
    driver: list[tuple[float, float]],
    floor_runs: list[list[tuple[str, float]]],
    folder: str,
    driver_marks: list[tuple[float, str]],
) -> None:
    found = sorted(_worker_marks(folder) + driver_marks)
    sides: dict[str, list[list[float]]] = {"raygents": [], "ray_floor": []}
    steps: list[list[float]] = []
    for began, ended in driver:
        marks = [(label, when) for when, label in found if began <= when <= ended]
        run = [("driver_start", began), *marks, ("driver_end", ended)]
        phases, by_step = _phases(run), _phases(run, STEPS)
        if phases is not None:
            sides["raygents"].append(phases)
        if by_step is not None:
            steps.append(by_step)
    for marks in floor_runs:
        phases = _phases(marks)
        if phases is not None:
            sides["ray_floor"].append(phases)
    counts = {side: len(v) for side, v in sides.items()}
    print(f"K={args.k}, model {args.latency * 1000:.0f} ms, {args.durability}; runs {counts}")
    print(f"{'phase (p50 ms)':50s} {'raygents':>9s} {'floor':>9s} {'diff':>7s}")
    totals = {side: [sum(p) for p in v] for side, v in sides.items()}
    for i, (_, _, name) in enumerate(PHASES):
        mine = statistics.median(p[i] for p in sides["raygents"])
        base = statistics.median(p[i] for p in sides["ray_floor"])
        print(f"{name:50s} {mine:9.2f} {base:9.2f} {mine - base:+7.2f}")
    mine, base = (statistics.median(totals[s]) for s in ("raygents", "ray_floor"))
    print(f"{'the run (driver to driver)':50s} {mine:9.2f} {base:9.2f} {mine - base:+7.2f}")
    print(f"\nraygents step by step ({len(steps)} runs)")
    for i, (_, _, name) in enumerate(STEPS if steps else ()):  # (none: a mark went missing)
        print(f"{name:50s} {statistics.median(p[i] for p in steps):9.2f}")
    print(f"load {os.getloadavg()}")


def _cpu_per_run(sides: dict[str, Any], n: int) -> None:
    """Run ``n`` runs of each side under a sampler; print each role's CPU ms per run."""
    import sampling

    got: dict[str, dict[str, float]] = {}
    for name, run in sides.items():
        with sampling.Sampler(interval_s=0.2, pss=False) as sampler:
            for _ in range(n):
                run()
        roles = sampler.report.get("by_role") or {}
        got[name] = {role: 1000 * v["cpu_s"] / n for role, v in roles.items()}
        got[name]["all processes"] = 1000 * sampler.report.get("cpu_s_total", 0.0) / n
    names = list(got)
    roles = sorted({r for per in got.values() for r in per}, key=lambda r: -got[names[0]].get(r, 0))
    print(f"\nCPU ms per run ({n} runs a side, one side after the other; a worker's role is")
    print("its title when sampled: a tool or task worker between tasks counts as IDLE)")
    print(f"{'role':50s} " + " ".join(f"{name:>9s}" for name in names))
    for role in roles:
        if max(got[name].get(role, 0.0) for name in names) >= 0.05:
            print(f"{role:50s} " + " ".join(f"{got[name].get(role, 0.0):9.2f}" for name in names))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--durability", default="sync", choices=("sync", "async", "exit"))
    ap.add_argument("--cpu", type=int, default=0, help="runs a side for the CPU per run (0: none)")
    args = ap.parse_args()

    import ray

    import raygents as rg
    from raygents.runtime.driver import runs
    from raygents.runtime.link import mailbox

    folder = tempfile.mkdtemp(prefix="rg-phases-")
    machine.init_raygents(
        store=f"file://{folder}/store",
        durability=args.durability,
        runtime_env={
            "env_vars": {"RG_PHASES_DIR": folder},
            "worker_process_setup_hook": _mark_worker,
        },
    )
    bare_task = rayfloor.floor()["bare_task"]

    @ray.remote(num_cpus=0)
    class MarkedFloor:
        async def turns(self, latency_s: float, k: int) -> list[tuple[str, float]]:
            return await rayfloor.marked_turns(bare_task, latency_s, k)

    floor = MarkedFloor.remote()  # type: ignore[attr-defined]
    agent = rg.Agent(
        "phases",
        tools=fakes.rg_tools("task"),
        model=fakes.rg_model(fakes.ToolTurns(k=args.k), args.latency),
    )
    start = runs.start
    driver: list[tuple[float, float]] = []  # raygents runs: (start() called, result back)

    def marked_start(*a: Any, **kw: Any) -> Any:
        driver.append((time.time(), 0.0))
        return start(*a, **kw)

    runs.start = marked_start  # type: ignore[assignment]
    driver_marks: list[tuple[float, str]] = []  # the driver's own steps (see STEPS)
    launch, mailbox_start = runs._launch, mailbox.Mailboxes.start

    def marked_launch(*a: Any, **kw: Any) -> Any:
        driver_marks.append((time.time(), "launch"))
        return launch(*a, **kw)

    async def marked_mailbox_start(self: Any, *a: Any) -> str:
        driver_marks.append((time.time(), "mailbox_start"))
        return await mailbox_start(self, *a)

    runs._launch = marked_launch  # type: ignore[assignment]
    mailbox.Mailboxes.start = marked_mailbox_start  # type: ignore[method-assign]

    def raygents_run() -> None:
        rg.run(agent, f"k={args.k}")
        driver[-1] = (driver[-1][0], time.time())

    floor_runs: list[list[tuple[str, float]]] = []

    def floor_run() -> None:
        began = time.time()
        marks = ray.get(floor.turns.remote(args.latency, args.k))
        floor_runs.append([("driver_start", began), *marks, ("driver_end", time.time())])

    for _ in range(5):  # warm up: actors, workers
        raygents_run()
        floor_run()
    del driver[:], floor_runs[:]
    for rep in range(args.n):
        for side in (raygents_run, floor_run)[:: 1 if rep % 2 else -1]:
            side()
    measured = len(driver), len(floor_runs)
    if args.cpu:
        _cpu_per_run({"raygents": raygents_run, "ray_floor": floor_run}, args.cpu)
    del driver[measured[0] :], floor_runs[measured[1] :]
    rg.shutdown()
    ray.shutdown()

    _report(args, driver, floor_runs, folder, driver_marks)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
