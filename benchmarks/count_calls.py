"""Count the Ray calls one fan-out run makes, by process and method.

    python benchmarks/count_calls.py [--m 64] [--tool cpu|local]

Every process of a private local Ray instance (the driver, the coordinator, the agent actors,
the tool workers) records each actor call and task it submits: the instance is started with a
``sitecustomize`` module on ``PYTHONPATH`` that wraps Ray's submission functions. The agents
are those of workload 3 (an orchestrator calling M sub-agents through agent-as-tool, each
making one tool call). After a warm-up, one run is counted; the table lists calls per
submitting process and method, and per child run.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import common as C  # noqa: E402

_HOOK = """
import os

_path = os.environ.get("RAYGENTS_COUNT_CALLS")
if _path:
    try:
        import ray.actor
        import ray.remote_function

        _out = open(_path, "a", buffering=1)
        _actor_call = ray.actor.ActorHandle._actor_method_call
        _task_call = ray.remote_function.RemoteFunction._remote

        def _counted_actor_call(self, method_name, *args, **kwargs):
            name = self._ray_actor_creation_function_descriptor.class_name
            _out.write(f"{os.getpid()} {name}.{method_name}\\n")
            return _actor_call(self, method_name, *args, **kwargs)

        def _counted_task_call(self, *args, **kwargs):
            _out.write(f"{os.getpid()} task {self._function_name.rsplit('.', 1)[-1]}\\n")
            return _task_call(self, *args, **kwargs)

        ray.actor.ActorHandle._actor_method_call = _counted_actor_call
        ray.remote_function.RemoteFunction._remote = _counted_task_call
    except Exception:
        pass
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=int, default=64, help="sub-agent calls in the one turn")
    ap.add_argument("--tool", default="cpu", choices=("cpu", "local"))
    args = ap.parse_args()

    hook_dir = C.scratch("rgcount-")
    with open(os.path.join(hook_dir, "sitecustomize.py"), "w") as f:
        f.write(_HOOK)
    log = os.path.join(hook_dir, "calls.txt")
    # Ray's processes inherit this environment from the driver that starts the instance.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (hook_dir, os.environ.get("PYTHONPATH")) if p
    )
    os.environ["RAYGENTS_COUNT_CALLS"] = log
    exec(_HOOK, {})  # this process started before the hook was on its path

    import psutil

    import raygents as rg

    C.init_raygents(store=f"file://{os.path.join(hook_dir, 'store')}")
    agent = C.rg_fanout_agent(args.tool, "count")
    rg.run(agent, f"m={args.m}")  # warm up: actors, workers
    time.sleep(1.0)
    open(log, "w").close()
    rg.run(agent, f"m={args.m}")
    time.sleep(1.0)  # the last reports and ends
    roles = {}
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            roles[p.pid] = C.role(" ".join(p.cmdline()), p.name(), me.pid, p.pid)
        except psutil.Error:
            continue
    agents = sorted(pid for pid, role in roles.items() if role == "ray::AgentActor")
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    with open(log) as f:
        for line in f:
            pid, call = line.split(" ", 1)
            role = roles.get(int(pid), "other")
            if role == "ray::AgentActor" and len(agents) > 1:
                role += f" #{agents.index(int(pid)) + 1}"
            counts[(role, call.strip())] += 1
    rg.shutdown()
    print(f"Ray calls of one run: M = {args.m}, {args.tool} tools")
    print(f"{'process':24s} {'call':34s} {'count':>6s} {'per child':>10s}")
    for (role, call), n in sorted(counts.items(), key=lambda kv: (kv[0][0], -kv[1])):
        print(f"{role:24s} {call:34s} {n:6d} {n / args.m:10.2f}")
    total = sum(counts.values())
    print(f"{'all':24s} {'':34s} {total:6d} {total / args.m:10.2f}")


if __name__ == "__main__":
    main()
