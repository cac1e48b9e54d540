"""What the graph snapshot of ``start()`` costs for the benchmarks' agents: pickled in full every
time (cloudpickle and SHA-256, as ``start()`` did before raygents/runtime/snapshot.py), and
found again by its key when the graph has not changed.

    python benchmarks/snapshot_cost.py [--number 2000]

The benchmarks' modules are registered to be pickled by value (as in every workload), so the
fake models' classes travel by value, as a script's own classes and functions would. Prints the
best of five timings per snapshot, in microseconds. No Ray instance is started.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import timeit

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import common as C  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--number", type=int, default=2000)
    args = ap.parse_args()

    from ray import cloudpickle

    import raygents as rg
    from raygents.agent import agent_graph
    from raygents.runtime.snapshot import snapshot

    C.register_by_value()
    agents = {
        "2-turn agent, remote=False tools": rg.Agent(
            "snap_local", tools=C.rg_tools("local"), model=C.rg_model(C.ToolTurns(k=4), 0.1)
        ),
        "fan-out orchestrator and worker": C.rg_fanout_agent("cpu", "snap_fo"),
    }
    for name, agent in agents.items():

        def full(agent: rg.Agent = agent) -> str:
            blob = cloudpickle.dumps(agent_graph(agent))
            return hashlib.sha256(blob).hexdigest()

        def found(agent: rg.Agent = agent) -> str:
            return snapshot(agent)[2]

        found()  # the first snapshot, pickled in full
        took = {
            label: min(timeit.repeat(fn, number=args.number, repeat=5)) / args.number * 1e6
            for label, fn in (("in full", full), ("found by its key", found))
        }
        print(f"{name}: " + ", ".join(f"{label} {us:.1f} us" for label, us in took.items()))


if __name__ == "__main__":
    main()
