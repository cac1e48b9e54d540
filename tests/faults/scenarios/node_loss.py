"""Node loss: agents and tools on a worker node that is removed mid-run, then replaced.

Run as a script (it builds its own ``ray.cluster_utils.Cluster``); prints one JSON line with
what happened. ``tests/faults/test_node_loss.py`` runs it and checks the invariants.

    python tests/faults/scenarios/node_loss.py WORK_DIR [RUNS]

With 10 runs (the default) each tool call holds a whole CPU for 1.5 s; with more, calls are
shorter and take a quarter CPU each, so a 2-CPU node runs eight at a time.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

WORK = Path(sys.argv[1])
LEDGER = WORK / "ledger.jsonl"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
SMALL = RUNS > 10


def note(event: str, key: str) -> None:
    with open(LEDGER, "a") as f:
        f.write(json.dumps({"event": event, "key": key}) + "\n")


@rg.tool(num_cpus=0.25 if SMALL else 1, max_retries=3)
def crunch(ctx: rg.ToolContext, n: int) -> str:
    """Work for a while, then record the effect once per idempotency key."""
    note("start", ctx.idempotency_key)
    time.sleep(0.5 if SMALL else 1.5)
    marker = WORK / f"effect-{ctx.idempotency_key.replace(':', '_')}"
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        note("effect", ctx.idempotency_key)
    except FileExistsError:
        pass
    note("end", ctx.idempotency_key)
    return f"crunched {n}"


def _lines() -> int:
    return len(LEDGER.read_text().splitlines()) if LEDGER.exists() else 0


def reply(request: rg.ModelRequest) -> rg.ModelResponse:
    done = sum(m.role == "tool" for m in request.messages)
    if done >= 2:
        return text(f"done {done}")
    return calls(call("crunch", {"n": done}, id=f"c{done}"))


def main() -> None:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "resources": {"head": 10}, "include_dashboard": False},
    )
    worker = cluster.add_node(num_cpus=2, resources={"agents": 10})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    rg.init(
        store=f"file://{WORK / 'store'}",
        heartbeat_s=0.5,
        stale_after_s=10.0,
        actor_options={"resources": {"agents": 0.01}},
        handle_sigterm=False,
    )
    agent = rg.Agent("node_worker", tools=[crunch], model=FunctionModel(reply, latency_s=0.3))
    handles = [rg.start(agent, f"job {i}") for i in range(RUNS)]
    deadline = time.time() + 120
    while time.time() < deadline and _lines() < 2 * (RUNS // 10):  # tools run on the node
        time.sleep(0.1)
    started = time.time()
    cluster.remove_node(worker, allow_graceful=False)
    time.sleep(1.0)
    cluster.add_node(num_cpus=2, resources={"agents": 10})
    outputs, errors = [], []
    for h in handles:
        try:
            outputs.append(h.result(timeout_s=300).final_output)
        except rg.RaygentsError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    recovered_s = time.time() - started
    recovered = sum(1 for h in handles for e in h.events() if e.type == "recovered")
    # An effect is its marker file (created once per key, O_EXCL): a worker killed between
    # creating it and noting it in the ledger has still had its effect.
    entries = [json.loads(line) for line in LEDGER.read_text().splitlines()]
    effects = {p.name[len("effect-") :]: 1 for p in WORK.glob("effect-*")}
    noted = {e["key"].replace(":", "_") for e in entries if e["event"] == "effect"}
    assert noted <= set(effects), "every noted effect has its marker"
    time.sleep(2)
    free = ray.available_resources().get("CPU", 0) == ray.cluster_resources().get("CPU", 0)
    print(
        json.dumps(
            {
                "outputs": outputs,
                "errors": errors,
                "effects": effects,
                "recovered_events": recovered,
                "seconds_to_finish_after_loss": round(recovered_s, 2),
                "cpus_free": free,
            }
        ),
        flush=True,
    )
    rg.shutdown()
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main()
