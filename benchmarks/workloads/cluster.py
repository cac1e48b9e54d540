"""Workload 12: a simulated 4-node cluster.

A ``ray.cluster_utils.Cluster`` on this machine: a head node (no CPUs: the driver and the
coordinator) and three worker nodes that share ``run.py --cpus`` between them and declare a
custom resource ``agents``, which raygents' agent actors reserve (``actor_options``), so they
run on the workers as they would on a cluster. The store is S3 (moto's server, the store the
README tells cluster users to take), durability ``sync``. N concurrent 2-turn runs (4 tool
tasks in the first turn, ``num_cpus=0.25`` so they go to the workers; 100 ms model), started
with ``raygents.start`` and awaited, as in workload 2.

Reported per N: runs/s, per-run latency p50/p99, errors, recovered runs, and on which nodes
the tool calls ran (each call notes its node in a file of the scratch folder).

Sizes: N = 100, 1,000 (quick and full); with ``--big`` also 10,000; smoke: 10, 50.
"""

from __future__ import annotations

import collections
import os
from typing import Any

import fakes
import machine
import stats

from workloads import harness as H

NODES = 4
"""The head and three worker nodes."""
LATENCY_S = 0.1
K = 4


def where_tool(ledger: str) -> Any:
    """A tool that notes the node it ran on, one line per call, in ``ledger``."""
    import ray

    import raygents as rg

    @rg.tool(num_cpus=0.25, name="noop")
    def noop(i: int) -> str:
        """Note the node."""
        node = ray.get_runtime_context().get_node_id()
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{node}\n".encode())
        finally:
            os.close(fd)
        return f"ok {i}"

    return noop


def sizes(mode: str, big: bool) -> tuple[tuple[int, ...], dict[int, int]]:
    """The N of each mode and their repetitions."""
    if mode == "smoke":
        return (10, 50), {10: 1, 50: 1}
    ns = (100, 1000, 10_000) if big else (100, 1000)
    reps = {100: 3, 1000: 2, 10_000: 1} if mode == "quick" else {100: 5, 1000: 3, 10_000: 1}
    return ns, reps


def start_cluster(cpus: int) -> tuple[Any, list[Any]]:
    """The head (no CPUs) and ``NODES - 1`` worker nodes sharing ``cpus``; Ray joined."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "resources": {"head": 10}, "include_dashboard": False},
    )
    # The driver joins before the workers exist, so it (and the coordinator, which goes to the
    # driver's node) is on the head: nodes of a simulated cluster share one address.
    machine.register_by_value()
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    per_node = max(1, cpus // (NODES - 1))
    workers = [
        cluster.add_node(num_cpus=per_node, resources={"agents": 1000}) for _ in range(NODES - 1)
    ]
    cluster.wait_for_nodes()
    return cluster, workers


def run(mode: str, tmp: str) -> dict[str, Any]:
    import ray

    import raygents as rg

    cpus, big = machine.cpus(), machine.big()
    ns, reps = sizes(mode, big)
    moto = machine.Moto()
    moto.start()  # sets the AWS environment before the nodes start: their workers inherit it
    cluster = None
    try:
        cluster, workers = start_cluster(cpus)
        rg.init(
            namespace="bench-cluster",
            store=f"s3://{moto.bucket('cluster')}/runs",
            durability="sync",
            actor_options={"resources": {"agents": 0.01}},
            handle_sigterm=False,
        )
        ledger = os.path.join(tmp, "nodes.txt")
        agent = rg.Agent(
            "cl_agent",
            tools=[where_tool(ledger)],
            model=fakes.rg_model(fakes.ToolTurns(k=K), LATENCY_S),
        )
        H.rg_batch(agent, [f"k={K} warm {i}" for i in range(10)])
        names = {w.node_id: f"worker{i + 1}" for i, w in enumerate(workers)}
        names[cluster.head_node.node_id] = "head"
        rows = []
        for n in ns:
            outs, calls = [], collections.Counter[str]()
            for rep in range(reps[n]):
                if os.path.exists(ledger):
                    os.unlink(ledger)
                machine.log(f"cluster: N={n}, repetition {rep + 1} of {reps[n]}")
                out = H.rg_batch(agent, [f"k={K} run {i}" for i in range(n)])
                outs.append(out)
                with open(ledger) as f:
                    calls.update(names.get(line.strip(), "other") for line in f)
                machine.log(
                    f"  {n / out['wall_s']:.1f} runs/s, errors {len(out['errors'])}, "
                    f"recovered {out['recovered']}"
                )
            rows.append(_row(n, outs, calls))
        rg.shutdown()
        ray.shutdown()
    finally:
        if cluster is not None:
            cluster.shutdown()
        moto.stop()
    worst = max(r["errors"] for r in rows)
    return {
        "config": {
            "nodes": NODES,
            "cpus": cpus,
            "cpus_per_worker_node": max(1, cpus // (NODES - 1)),
            "latency_ms": LATENCY_S * 1000,
            "tool_calls_per_run": K,
            "store": "s3 (moto)",
            "durability": "sync",
        },
        "rows": rows,
        "checks": {
            "every run on the simulated cluster completed (0 failed)": {
                "value": worst,
                "target": "0",
                "pass": worst == 0,
            }
        },
    }


def _row(n: int, outs: list[dict[str, Any]], calls: collections.Counter[str]) -> dict[str, Any]:
    rates = [n / o["wall_s"] for o in outs]
    lat = stats.summary([x for o in outs for x in o["latencies"]])
    return {
        "n": n,
        "reps": len(outs),
        "runs_per_s": stats.summary(rates),
        "latency_p50_ms": stats.ms(lat["p50"]),
        "latency_p99_ms": stats.ms(lat["p99"]),
        "errors": sum(len(o["errors"]) for o in outs),
        "error_sample": next((o["errors"][0] for o in outs if o["errors"]), None),
        "recovered": sum(o["recovered"] for o in outs),
        "tool_calls_by_node": dict(sorted(calls.items())),
    }
