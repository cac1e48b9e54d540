"""Measure how long raygents takes to recover a run after its agent actor is SIGKILLed.

Usage: python tests/faults/scenarios/recovery_time.py [repetitions]
Prints one JSON line: per repetition the seconds from the kill to the ``recovered`` event and
to the run's completion, and their medians.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import tempfile
import time

import ray

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text


@rg.tool(num_cpus=0)
def work(n: int) -> str:
    """A quick step."""
    return f"worked {n}"


def reply(request: rg.ModelRequest) -> rg.ModelResponse:
    done = sum(m.role == "tool" for m in request.messages)
    return text("done") if done >= 2 else calls(call("work", {"n": done}, id=f"w{done}"))


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    store = tempfile.mkdtemp(prefix="raygents-recovery-")
    rg.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        store=f"file://{store}",
        heartbeat_s=1.0,
        stale_after_s=10.0,
    )
    to_event, to_done = [], []
    for i in range(reps):
        agent = rg.Agent(f"victim{i}", tools=[work], model=FunctionModel(reply, latency_s=1.0))
        handle = rg.start(agent, "go")
        events = iter(handle.events())
        next(e for e in events if e.type == "tool_end")
        name = next(
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(f"agent:victim{i}@")
        )
        pid = ray.get(ray.get_actor(name, namespace="raygents").ping.remote())
        killed = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        next(e for e in events if e.type == "recovered")
        to_event.append(time.perf_counter() - killed)
        handle.result(timeout_s=120)
        to_done.append(time.perf_counter() - killed)
    print(
        json.dumps(
            {
                "repetitions": reps,
                "kill_to_recovered_s": [round(x, 2) for x in to_event],
                "kill_to_completed_s": [round(x, 2) for x in to_done],
                "median_kill_to_recovered_s": round(statistics.median(to_event), 2),
                "median_kill_to_completed_s": round(statistics.median(to_done), 2),
                "load_avg_1m": os.getloadavg()[0],
            }
        )
    )
    rg.shutdown()


if __name__ == "__main__":
    main()
