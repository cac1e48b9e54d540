"""Profile raygents under one benchmark scenario with py-spy (``pip install py-spy``).

    python benchmarks/tools/profile.py SCENARIO [--seconds 15] [--n N] [--tool sleep]

    single            sequential 2-turn runs, K=4 task tools
    single-local      the same with remote=False tools
    concurrent        N concurrent runs (--n 300), 100 ms model
    concurrent-task   the same with num_cpus=0 tool tasks
    resume            suspend N runs (--n 200), profile resuming them
    checkpoint        10 local tool turns, model latency 0, sync on the file store (workload 4)
    fanout            an orchestrator calls N sub-agents (--n 64) with 200 ms CPU tool tasks
                      (workload 3; --tool sleep: sleeping tools)

py-spy records the driver, the coordinator and the agent actor(s) (found by their ``ray::``
process titles) at 100 Hz (``--rate``), on-CPU samples only, into
``<tmp>/raygents-profiles/<scenario>-<process>.txt`` (``--out``; collapsed stacks); a summary
of each (top inclusive / self functions) is printed and written next to them (``.summary.txt``).
``--gil`` keeps only samples of threads holding the GIL (Python running, not blocked in fsync
or in Ray's C++ threads) and names the files ``<scenario>-gil-<process>``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH_DIR = os.path.dirname(HERE)
sys.path.insert(0, BENCH_DIR)

import fakes  # noqa: E402
import machine  # noqa: E402


def _targets() -> dict[str, int]:
    import psutil

    me = psutil.Process()
    found = {"driver": me.pid}
    for p in me.children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        for key, name in (("ray::Coordinator", "coordinator"), ("ray::AgentActor", "agent_actor")):
            if key in cmd:
                n = sum(1 for k in found if k.startswith(name))
                found[f"{name}{n or ''}"] = p.pid
    return found


def _record(
    scenario: str, seconds: float, out_dir: str, gil: bool = False, rate: int = 100
) -> list[tuple[str, str, Any]]:
    procs = []
    for name, pid in _targets().items():
        path = os.path.join(out_dir, f"{scenario}{'-gil' if gil else ''}-{name}.txt")
        proc = subprocess.Popen(
            [
                "py-spy",
                "record",
                "-p",
                str(pid),
                "-d",
                str(int(seconds)),
                "-r",
                str(rate),
                "-f",
                "raw",
                "-o",
                path,
                "--nonblocking",
                *(["--gil"] if gil else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append((name, path, proc))
    time.sleep(0.5)
    return procs


def _prepare(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """The scenario's agent, warmed up, and (``resume``) the handles of its suspended runs."""
    import raygents as rg

    handles: list[Any] = []
    kind = "local" if args.scenario in ("single-local", "concurrent") else "task"
    latency = 0.0 if args.scenario.startswith("single") else 0.1
    if args.scenario == "checkpoint":
        agent = rg.Agent(
            "prof_ck",
            tools=fakes.rg_tools("payload_local"),
            model=fakes.rg_model(fakes.ToolTurns(k=1, tool="payload", n=512), 0.0),
            max_turns=20,
        )
        for _ in range(3):
            rg.run(agent, "k=1 turns=10")
    elif args.scenario == "fanout":
        agent = fakes.rg_fanout_agent(args.tool, "prof_fo", latency)
        rg.run(agent, "m=2")
    elif args.scenario == "resume":
        from workloads.suspend import phase

        agent = rg.Agent(
            "prof_storm",
            instructions=phase,
            tools=fakes.rg_tools("local"),
            model=fakes.rg_model(fakes.UntilFinish(), latency),
            max_turns=100_000,
        )
        handles = [rg.start(agent, f"go {i}", context="loop") for i in range(args.n)]
        time.sleep(2.0)
        for h in handles:
            h.suspend()
        for h in handles:
            with contextlib.suppress(rg.SuspendedError):
                h.result(300)
    else:
        agent = rg.Agent(
            f"prof_{kind}",
            tools=fakes.rg_tools(kind),
            model=fakes.rg_model(fakes.ToolTurns(k=4), latency),
        )
        for _ in range(5):
            rg.run(agent, "k=4")
    return agent, handles


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "scenario",
        choices=(
            "single",
            "single-local",
            "concurrent",
            "concurrent-task",
            "resume",
            "checkpoint",
            "fanout",
        ),
    )
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--durability", default="sync", choices=("sync", "async", "exit"))
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "raygents-profiles"))
    ap.add_argument(
        "--gil",
        action="store_true",
        help="only samples of threads holding the GIL (Python on CPU, not blocked in I/O); "
        "files get a -gil suffix",
    )
    ap.add_argument("--rate", type=int, default=100, help="samples per second")
    ap.add_argument(
        "--tool",
        default="cpu",
        choices=("cpu", "sleep"),
        help="fanout: the sub-agents' tool, 200 ms of CPU or of sleep (no CPU contention)",
    )
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    from workloads import harness as H

    import raygents as rg

    tmp = machine.scratch("rgprof-")
    machine.init_raygents(store=f"file://{tmp}/store", durability=args.durability)
    agent, handles = _prepare(args)
    procs = _record(args.scenario, args.seconds, args.out, args.gil, args.rate)
    t0 = time.perf_counter()
    count = 0
    if args.scenario.startswith("single") or args.scenario in ("checkpoint", "fanout"):
        prompt = {"checkpoint": "k=1 turns=10", "fanout": f"m={args.n}"}.get(args.scenario, "k=4")
        while time.perf_counter() - t0 < args.seconds:
            rg.run(agent, prompt)
            count += 1
        print(f"{count} runs in {args.seconds} s: {1000 * args.seconds / count:.1f} ms per run")
    elif args.scenario.startswith("concurrent"):
        out = H.rg_batch(agent, [f"k=4 run {i}" for i in range(args.n)])
        print(f"{args.n} runs: {args.n / out['wall_s']:.1f} runs/s, start {out['start_s']:.2f} s")
    else:
        t = time.perf_counter()
        resumed = [rg.resume(h.run_id, agent=agent, context="finish") for h in handles]
        calls = time.perf_counter() - t
        for h in resumed:
            h.result(300)
        done = time.perf_counter() - t
        print(
            f"{args.n} resumes: calls {calls:.2f} s ({args.n / calls:.1f}/s), all done {done:.2f} s"
        )
    print(f"load {os.getloadavg()}")
    for name, path, proc in procs:
        proc.wait()
        res = subprocess.run(
            [sys.executable, os.path.join(HERE, "profile_summary.py"), path, "--top", "30"],
            capture_output=True,
            text=True,
        )
        with open(path.replace(".txt", ".summary.txt"), "w") as f:
            f.write(res.stdout)
        print(f"===== {name}: {path}\n{res.stdout}")
    rg.shutdown()


if __name__ == "__main__":
    main()
