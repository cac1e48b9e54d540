"""A simulated cluster with an S3 store: a head (the driver and the coordinator) and two worker
nodes (agent actors and tool tasks), moto's S3 server behind a recording proxy.

Run as a script (it builds its own ``ray.cluster_utils.Cluster``); prints one JSON line with
what happened. ``tests/faults/test_cluster_s3.py`` runs it and checks the invariants.

    python tests/faults/scenarios/cluster_s3.py WORK_DIR MODE [RUNS]
    python tests/faults/scenarios/cluster_s3.py WORK_DIR serve

``serve`` starts the cluster once and runs one scenario per line of its input (``MODE RUNS``),
each on a namespace, bucket and folder of its own, with a JSON line for each; it stops at the
end of its input.

Modes:
    load              RUNS concurrent runs, each with a tool call and an agent-as-tool child
                      that calls a tool too.
    node_loss         the same, and a worker node is removed mid-load (then replaced).
    coordinator_kill  the same, and the coordinator's process gets SIGKILL mid-load.
    file_store        one run with a ``file://`` store while agent actors are on a worker.
    placement         two more nodes, one that declares a GPU and one a custom resource: where
                      the tools that reserve them run, and a fan-out that queues for the GPU.
    in_doubt_node     the node of the agent actor is removed while an ``on_recovery="ask"``
                      tool runs (then replaced): the run stops in doubt, and is resolved.
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


def crunch_tool(work: Path) -> rg.Tool:
    """The tool of a scenario: it notes its starts and leaves its effects in ``work``."""
    ledger = work / "ledger.jsonl"

    @rg.tool(num_cpus=0.5, max_retries=3)
    def crunch(ctx: rg.ToolContext, n: int) -> str:
        """Work a moment, then apply an effect once per idempotency key."""
        with open(ledger, "a") as f:
            f.write(json.dumps({"event": "start", "key": ctx.idempotency_key}) + "\n")
        time.sleep(0.3)
        marker = work / f"effect-{ctx.idempotency_key.replace(':', '_').replace('/', '_')}"
        with contextlib.suppress(FileExistsError):
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return f"crunched {n}"

    return crunch


def helper_reply(request: rg.ModelRequest) -> rg.ModelResponse:
    if any(m.role == "tool" for m in request.messages):
        return text("helped")
    return calls(call("crunch", {"n": 1}, id="h0"))


def worker_reply(request: rg.ModelRequest) -> rg.ModelResponse:
    results = [m.text or "" for m in request.messages if m.role == "tool"]
    if results:
        return text(" + ".join(sorted(results)))
    return calls(call("crunch", {"n": 0}, id="c0"), call("helper", {"input": "help"}, id="a0"))


CPU_FAN = 6
"""The CPU tools of the placement scenario's fan-out."""


def placement_tools(work: Path) -> list[rg.Tool]:
    """Tools that reserve a GPU, a custom resource, or only CPU; each notes where and when it
    ran in ``work``."""
    times = work / "times.jsonl"

    def note(kind: str, started: float, **more: Any) -> str:
        node = ray.get_runtime_context().get_node_id()
        with open(times, "a") as f:
            line = {"kind": kind, "start": started, "end": time.time(), **more}
            f.write(json.dumps(line) + "\n")
        return f"{kind}@{node}"

    def cpus_done() -> int:
        lines = times.read_text().splitlines() if times.exists() else []
        return sum(1 for line in lines if json.loads(line)["kind"] == "cpu")

    @rg.tool(num_cpus=0, num_gpus=1)
    def on_gpu(n: int) -> str:
        """Hold the GPU a moment: in a fan-out, until the CPU tools of the batch are done (they
        must not wait behind the GPU's queue), or a minute."""
        started = time.time()
        deadline = started + 60
        while n >= 0 and cpus_done() < CPU_FAN and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        return note("gpu", started, cpus_done=cpus_done())

    @rg.tool(num_cpus=0, resources={"special": 1})
    def on_special() -> str:
        """Run where the special resource is."""
        return note("special", time.time())

    @rg.tool(num_cpus=0.25)
    def anywhere(n: int) -> str:
        """Work a moment on any node."""
        started = time.time()
        time.sleep(0.2)
        return note("cpu", started)

    return [on_gpu, on_special, anywhere]


def placement_reply(request: rg.ModelRequest) -> rg.ModelResponse:
    results = [m.text or "" for m in request.messages if m.role == "tool"]
    if results:
        return text("\n".join(results))
    if "fan out" in (request.messages[-1].text or ""):
        gpus = [call("on_gpu", {"n": i}, id=f"g{i}") for i in range(4)]
        cpus = [call("anywhere", {"n": i}, id=f"c{i}") for i in range(CPU_FAN)]
        return calls(*gpus, *cpus)
    return calls(call("on_gpu", {"n": -1}, id="g"), call("on_special", id="s"))


def _placement(cluster: Cluster, proxy: FaultProxy, work: Path) -> dict[str, Any]:
    """Scenario ``placement``: its two nodes come for it and go after it."""
    gpu = cluster.add_node(num_cpus=1, num_gpus=1)
    special = cluster.add_node(num_cpus=1, resources={"special": 1})
    cluster.wait_for_nodes()
    rg.init(
        namespace="cluster-placement",
        store=f"s3://{create_bucket(proxy.endpoint_url)}/runs",
        actor_options={"resources": {"agents": 0.01}},
        handle_sigterm=False,
    )
    try:
        agent = rg.Agent(
            "cluster_placer", tools=placement_tools(work), model=FunctionModel(placement_reply)
        )
        placed = rg.run(agent, "place", timeout_s=120).final_output.split("\n")
        fanned = rg.run(agent, "fan out", timeout_s=120).final_output.split("\n")
        times = [json.loads(line) for line in (work / "times.jsonl").read_text().splitlines()]
        return {
            "mode": "placement",
            "gpu_node": gpu.node_id,
            "special_node": special.node_id,
            "placed": placed,
            "fanned": fanned,
            "times": [t for t in times if t["kind"] != "special"][1:],  # (the fan-out's)
        }
    finally:
        rg.shutdown()
        cluster.remove_node(gpu)
        cluster.remove_node(special)


def charge_tool(work: Path) -> rg.Tool:
    """A tool whose effect must not happen twice; it notes its starts and effects in ``work``."""
    ledger = work / "charges.jsonl"

    @rg.tool(num_cpus=0.5, on_recovery="ask")
    def charge(ctx: rg.ToolContext, amount: int) -> str:
        """Charge a card (the other side ignores idempotency keys)."""
        with open(ledger, "a") as f:
            f.write(json.dumps({"event": "start", "key": ctx.idempotency_key}) + "\n")
        time.sleep(3.0)
        with open(ledger, "a") as f:
            f.write(json.dumps({"event": "effect", "key": ctx.idempotency_key}) + "\n")
        return f"charged {amount}"

    return charge


def charge_reply(request: rg.ModelRequest) -> rg.ModelResponse:
    results = [m.text or "" for m in request.messages if m.role == "tool"]
    if results:
        return text(" | ".join(results))
    return calls(call("charge", {"amount": 5}, id="charge0"))


def _charges(work: Path, event: str) -> int:
    ledger = work / "charges.jsonl"
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    return sum(1 for line in lines if json.loads(line)["event"] == event)


def _in_doubt_node(
    cluster: Cluster, workers: list[Any], proxy: FaultProxy, work: Path
) -> dict[str, Any]:
    """Scenario ``in_doubt_node``: ``workers`` is updated with the node that replaces the one
    removed."""
    rg.init(
        namespace="cluster-doubt",
        store=f"s3://{create_bucket(proxy.endpoint_url)}/runs",
        heartbeat_s=0.5,
        stale_after_s=10.0,
        actor_options={"resources": {"agents": 0.01}},
        handle_sigterm=False,
    )
    report: dict[str, Any] = {"mode": "in_doubt_node"}
    try:
        agent = rg.Agent(
            "cluster_payer", tools=[charge_tool(work)], model=FunctionModel(charge_reply)
        )
        handle = rg.start(agent, "pay")
        deadline = time.time() + 120
        while _charges(work, "start") < 1 and time.time() < deadline:
            time.sleep(0.05)
        node = _agent_node(agent.name)
        lost = next(w for w in workers if w.node_id == node)
        cluster.remove_node(lost, allow_graceful=False)
        workers[workers.index(lost)] = cluster.add_node(num_cpus=2, resources={"agents": 10})
        try:
            handle.result(timeout_s=180)
            report["in_doubt"] = None
        except rg.RunInDoubt as exc:
            report["in_doubt"] = [[c.call_id, c.tool_name] for c in exc.calls]
        report["status"] = handle.status()
        time.sleep(3.5)  # (a copy of the call on a node that lives on is over by now)
        # The resolution comes once Ray knows the node is gone (its health checks take about
        # 5 s here, longer on a busy machine): until then Ray may still send the rerun's task
        # to the lost node, and a call lost again is rightly in doubt again.
        cluster.wait_for_nodes(timeout=120)
        report["starts_before"] = _charges(work, "start")
        report["effects_before"] = _charges(work, "effect")
        again = rg.resume(handle.run_id, agent=agent, resolutions={"charge0": "rerun"})
        report["output"] = again.result(timeout_s=180).final_output
        report["starts_after"] = _charges(work, "start")
        report["effects_after"] = _charges(work, "effect")
    except rg.RaygentsError as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        rg.shutdown()
    return report


def _lines(ledger: Path) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


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


def _writers(proxy: FaultProxy, first: int) -> dict[str, int]:
    """Record puts by the node that sent them (the S3 client's user agent names it), from
    the proxy's record ``first`` on."""
    by_node: Counter[str] = Counter()
    for entry in proxy.records[first:]:
        if entry.method == "PUT" and entry.path.split("?")[0].endswith(".ckpt"):
            node = next(
                (p.split("/", 1)[1] for p in entry.agent.split() if p.startswith("ray-node/")), "?"
            )
            by_node[node] += 1
    return dict(by_node)


HEALTH_CHECKS = {
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 2000,
    "health_check_failure_threshold": 4,
}
"""How the head finds a lost node dead: in about 5 s (Ray's defaults take about 15 s, and the
scenarios that remove a node wait for it)."""


def main() -> None:
    work, mode = Path(sys.argv[1]), sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    # (the AWS environment is set before the nodes start: their workers inherit it)
    with (
        MotoServer() as server,
        FaultProxy(server.endpoint_url) as proxy,
        aws_env(proxy.endpoint_url),
    ):
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 0,
                "resources": {"head": 10},
                "include_dashboard": False,
                "_system_config": HEALTH_CHECKS,
            },
        )
        # The driver joins before the workers exist, so it (and the coordinator, which goes
        # to the driver's node) is on the head: nodes of a simulated cluster share one
        # address, and a driver joining later may attach to a worker's raylet.
        ray.init(address=cluster.address, log_to_driver=False)
        workers = [cluster.add_node(num_cpus=2, resources={"agents": 10}) for _ in range(2)]
        cluster.wait_for_nodes()
        assert ray.get_runtime_context().get_node_id() == cluster.head_node.node_id
        asked = (line.split() for line in sys.stdin) if mode == "serve" else [(mode, runs)]
        for n, (one, count) in enumerate(asked):
            folder = work / f"{n}-{one}" if mode == "serve" else work
            report = _scenario(cluster, workers, proxy, folder, one, int(count), n)
            print(json.dumps(report), flush=True)
        ray.shutdown()
        cluster.shutdown()


def _scenario(
    cluster: Cluster,
    workers: list[Any],
    proxy: FaultProxy,
    work: Path,
    mode: str,
    runs: int,
    n: int,
) -> dict[str, Any]:
    """Scenario ``mode`` with ``runs`` runs on namespace ``cluster-<n>``; ``workers`` (the
    worker nodes) is updated when a node is replaced."""
    work.mkdir(parents=True, exist_ok=True)
    if mode == "placement":
        return _placement(cluster, proxy, work)
    if mode == "in_doubt_node":
        return _in_doubt_node(cluster, workers, proxy, work)
    ledger, first = work / "ledger.jsonl", len(proxy.records)
    crunch = crunch_tool(work)
    bucket = create_bucket(proxy.endpoint_url)
    store = f"file://{work / 'store'}" if mode == "file_store" else f"s3://{bucket}/runs"
    rg.init(
        namespace=f"cluster-{n}",
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
        "mode": mode,
        "head": cluster.head_node.node_id,
        "workers": [w.node_id for w in workers],
    }
    if mode == "file_store":
        try:
            rg.run(agent, "x", timeout_s=120)
            report["error"] = None
        except rg.RaygentsError as exc:
            report["error"] = f"{type(exc).__name__}: {exc}"
        rg.shutdown()
        return report
    started = time.time()
    handles = [rg.start(agent, f"job {i}") for i in range(runs)]
    if mode in ("node_loss", "coordinator_kill"):
        deadline = time.time() + 120
        while time.time() < deadline and _lines(ledger) < runs // 2:  # tools on the workers
            time.sleep(0.05)
        report["fault_after_starts"] = _lines(ledger)
        if mode == "node_loss":  # (the node of the parents' agent actor)
            node = _agent_node(agent.name)
            lost = next(w for w in workers if w.node_id == node)
            cluster.remove_node(lost, allow_graceful=False)
            workers[workers.index(lost)] = cluster.add_node(num_cpus=2, resources={"agents": 10})
        else:
            os.kill(_coordinator_pid(), signal.SIGKILL)
    outputs, errors = [], []
    for h in handles:
        try:
            outputs.append(h.result(timeout_s=300).final_output)
        except rg.RaygentsError as exc:
            errors.append(f"{type(exc).__name__}: {str(exc)[:300]}")
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    starts = Counter(e["key"] for e in entries if e["event"] == "start")
    report.update(
        seconds=round(time.time() - started, 2),
        outputs=Counter(outputs),
        errors=errors,
        effects=len(list(work.glob("effect-*"))),
        keys=len(starts),
        started_twice=sum(1 for n in starts.values() if n > 1),
        recovered=sum(1 for h in handles for e in h.events() if e.type == "recovered"),
        record_puts=_writers(proxy, first),
        agent_nodes=sorted({_agent_node(agent.name), _agent_node(helper.name)}),
    )
    rg.shutdown()
    return report


if __name__ == "__main__":
    main()
