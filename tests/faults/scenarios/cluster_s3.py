"""A simulated cluster with an S3 store: a head (the driver and the coordinator) and two worker
nodes (agent actors and tool tasks), moto's S3 server behind a recording proxy.

Run as a script (it builds its own ``ray.cluster_utils.Cluster``); prints one JSON line with
what happened. ``tests/faults/test_cluster_s3.py`` runs it and checks the invariants.

    python tests/faults/scenarios/cluster_s3.py WORK_DIR MODE [RUNS]

Modes:
    load              RUNS concurrent runs, each with a tool call and an agent-as-tool child
                      that calls a tool too.
    node_loss         the same, and a worker node is removed mid-load (then replaced).
    coordinator_kill  the same, and the coordinator's process gets SIGKILL mid-load.
    file_store        one run with a ``file://`` store while agent actors are on a worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: s3_server

from s3_server import FaultProxy, MotoServer, aws_env, create_bucket

import raygents as rg
from raygents.runtime.driver.client import current
from raygents.testing import FunctionModel, call, calls, text

WORK = Path(sys.argv[1])
MODE = sys.argv[2]
RUNS = int(sys.argv[3]) if len(sys.argv) > 3 else 200
LEDGER = WORK / "ledger.jsonl"


def note(event: str, key: str) -> None:
    with open(LEDGER, "a") as f:
        f.write(json.dumps({"event": event, "key": key}) + "\n")


@rg.tool(num_cpus=0.5, max_retries=3)
def crunch(ctx: rg.ToolContext, n: int) -> str:
    """Work a moment, then apply an effect once per idempotency key."""
    note("start", ctx.idempotency_key)
    time.sleep(0.3)
    marker = WORK / f"effect-{ctx.idempotency_key.replace(':', '_').replace('/', '_')}"
    with contextlib.suppress(FileExistsError):
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    return f"crunched {n}"


def helper_reply(request: rg.ModelRequest) -> rg.ModelResponse:
    if any(m.role == "tool" for m in request.messages):
        return text("helped")
    return calls(call("crunch", {"n": 1}, id="h0"))


def worker_reply(request: rg.ModelRequest) -> rg.ModelResponse:
    results = [m.text or "" for m in request.messages if m.role == "tool"]
    if results:
        return text(" + ".join(sorted(results)))
    return calls(call("crunch", {"n": 0}, id="c0"), call("helper", {"input": "help"}, id="a0"))


def _lines() -> int:
    return len(LEDGER.read_text().splitlines()) if LEDGER.exists() else 0


def _coordinator_pid() -> int:
    namespace = current().namespace
    coordinator = ray.get_actor("raygents:coordinator", namespace=namespace)
    return int(ray.get(coordinator.__ray_call__.remote(lambda _self: os.getpid())))


def _agent_node(name: str) -> str:
    """The node of the actor serving agent ``name``."""
    namespace = current().namespace
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == namespace and entry["name"].startswith(f"agent:{name}@"):
            actor = ray.get_actor(entry["name"], namespace=namespace)
            where = actor.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id())
            return str(ray.get(where))
    raise LookupError(name)


def _writers(proxy: FaultProxy) -> dict[str, int]:
    """Record puts by the node that sent them (the S3 client's user agent names it)."""
    by_node: Counter[str] = Counter()
    for entry in proxy.records:
        if entry.method == "PUT" and entry.path.split("?")[0].endswith(".ckpt"):
            node = next(
                (p.split("/", 1)[1] for p in entry.agent.split() if p.startswith("ray-node/")), "?"
            )
            by_node[node] += 1
    return dict(by_node)


def main() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    # (the AWS environment is set before the nodes start: their workers inherit it)
    with (
        MotoServer() as server,
        FaultProxy(server.endpoint_url) as proxy,
        aws_env(proxy.endpoint_url),
    ):
        report = _scenario(proxy)
    print(json.dumps(report), flush=True)


def _scenario(proxy: FaultProxy) -> dict[str, Any]:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "resources": {"head": 10}, "include_dashboard": False},
    )
    # The driver joins before the workers exist, so it (and the coordinator, which goes to
    # the driver's node) is on the head: nodes of a simulated cluster share one address, and
    # a driver joining later may attach to a worker's raylet.
    ray.init(address=cluster.address, log_to_driver=False)
    workers = [cluster.add_node(num_cpus=2, resources={"agents": 10}) for _ in range(2)]
    cluster.wait_for_nodes()
    assert ray.get_runtime_context().get_node_id() == cluster.head_node.node_id
    bucket = create_bucket(proxy.endpoint_url)
    store = f"file://{WORK / 'store'}" if MODE == "file_store" else f"s3://{bucket}/runs"
    rg.init(
        store=store,
        heartbeat_s=0.5,
        stale_after_s=10.0,
        actor_options={"resources": {"agents": 0.01}},
        handle_sigterm=False,
    )
    helper = rg.Agent("cluster_helper", tools=[crunch], model=FunctionModel(helper_reply))
    agent = rg.Agent(
        "cluster_worker",
        tools=[crunch, helper.as_tool("helper", "Ask the helper.")],
        model=FunctionModel(worker_reply, latency_s=0.1),
    )
    report: dict[str, Any] = {
        "head": cluster.head_node.node_id,
        "workers": [w.node_id for w in workers],
    }
    if MODE == "file_store":
        try:
            rg.run(agent, "x", timeout_s=120)
            report["error"] = None
        except rg.RaygentsError as exc:
            report["error"] = f"{type(exc).__name__}: {exc}"
        return _close(cluster, report)
    started = time.time()
    handles = [rg.start(agent, f"job {i}") for i in range(RUNS)]
    if MODE in ("node_loss", "coordinator_kill"):
        deadline = time.time() + 120
        while time.time() < deadline and _lines() < RUNS // 2:  # tools run on the workers
            time.sleep(0.05)
        report["fault_after_starts"] = _lines()
        if MODE == "node_loss":  # (the node of the parents' agent actor)
            node = _agent_node(agent.name)
            cluster.remove_node(next(w for w in workers if w.node_id == node), allow_graceful=False)
            cluster.add_node(num_cpus=2, resources={"agents": 10})
        else:
            os.kill(_coordinator_pid(), signal.SIGKILL)
    outputs, errors = [], []
    for h in handles:
        try:
            outputs.append(h.result(timeout_s=300).final_output)
        except rg.RaygentsError as exc:
            errors.append(f"{type(exc).__name__}: {str(exc)[:300]}")
    entries = [json.loads(line) for line in LEDGER.read_text().splitlines()]
    starts = Counter(e["key"] for e in entries if e["event"] == "start")
    report.update(
        seconds=round(time.time() - started, 2),
        outputs=Counter(outputs),
        errors=errors,
        effects=len(list(WORK.glob("effect-*"))),
        keys=len(starts),
        started_twice=sum(1 for n in starts.values() if n > 1),
        recovered=sum(1 for h in handles for e in h.events() if e.type == "recovered"),
        record_puts=_writers(proxy),
        agent_nodes=sorted({_agent_node(agent.name), _agent_node(helper.name)}),
    )
    return _close(cluster, report)


def _close(cluster: Cluster, report: dict[str, Any]) -> dict[str, Any]:
    rg.shutdown()
    ray.shutdown()
    cluster.shutdown()
    return report


if __name__ == "__main__":
    main()
