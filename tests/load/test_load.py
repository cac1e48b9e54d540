"""Load (L1 to L3 of the reliability plan): many concurrent runs multiplexed over a few agent
actors, a burst of starts, and a storm of suspends then resumes, on S3 under async durability.

Sizes fit the CI budget of a 2-core machine; ``RAYGENTS_LOAD_RUNS`` raises L1's (the plan's
5,000) and ``RAYGENTS_STORM_RUNS`` L3's (the plan's 1,000); ``benchmarks/soak.py`` runs the
workload for minutes under chaos. Figures (throughput, latency, peak RSS) are printed (``-s``),
never asserted; memory is asserted only as a bound per run.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import loadkit
import pytest
import ray
from faults.faultkit import Ledger, apply_effect_once, record, wait_for

import raygents as rg

REPLICAS = 4


def agent(name: str, model: rg.Model | None = None, **tool: float) -> rg.Agent:
    return rg.Agent(
        name,
        tools=[loadkit.step_tool(**tool)],
        model=model or loadkit.model(),
        replicas=REPLICAS,
    )


def named_actors() -> list[str]:
    """The named actors of raygents' namespace (its coordinator and agent actors)."""
    namespace = rg.runtime.driver.client.current().namespace
    return [
        entry["name"]
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry["namespace"] == namespace
    ]


def statuses(run_ids: list[str]) -> dict[str, str]:
    table = {r.run_id: r.status for r in rg.runs()}
    return {run_id: table.get(run_id, "missing") for run_id in run_ids}


@pytest.mark.timeout(600)
def test_l1_many_concurrent_runs_share_a_few_actors(load_store: str) -> None:
    n = int(os.environ.get("RAYGENTS_LOAD_RUNS", "600"))
    many = agent("l1_many")
    batch = loadkit.run_batch(many, range(n))
    workers = loadkit.ray_workers()
    print(f"\nL1 {n} runs, {REPLICAS} actors, S3 async: {batch.figures()} workers {workers}")
    assert batch.wrong() == {}
    actors = named_actors()
    assert len([a for a in actors if a.startswith("agent:")]) == REPLICAS, actors
    assert len(actors) <= REPLICAS + 2, f"no actor per run: {actors}"
    assert sum(workers.values()) < min(n, 50), f"no worker process per run: {workers}"
    ids = list(batch.run_ids.values())  # the run table hears of ends in batches
    wait_for(lambda: set(statuses(ids).values()) == {"completed"}, 60)


@pytest.mark.timeout(600)
def test_l2_a_burst_of_starts_completes_in_bounded_memory(load_store: str) -> None:
    """raygents has no admission control (``max_concurrent_runs``): every run of a burst is
    accepted at once. What must hold: none is lost or fails, and memory stays bounded (it
    does not keep what the runs held once they end)."""
    n = 2000
    burst = agent("l2_burst")
    assert loadkit.run_batch(burst, range(20), turns=1).wrong() == {}  # actors and workers up
    before = loadkit.tree_rss()
    batch = loadkit.run_batch(burst, range(n), turns=1)
    print(f"\nL2 burst of {n}: {batch.figures()}, before {before >> 20} MB")
    assert batch.wrong() == {}
    ids = list(batch.run_ids.values())  # the run table hears of ends in batches
    wait_for(lambda: set(statuses(ids).values()) == {"completed"}, 60)
    # A run holds little (a few kB of messages): the burst's peak stays within 1 MB a run
    # over the baseline, and once it ends the processes give most of it back.
    assert batch.peak_rss - before < n * 2**20, (batch.peak_rss >> 20, before >> 20)
    after = loadkit.tree_rss()
    print(f"L2 after: {after >> 20} MB")
    assert after - before < n * 2**19, (after >> 20, before >> 20)


def opened(gate: str) -> None:
    """Wait until the file ``gate`` exists."""
    while not os.path.exists(gate):
        time.sleep(0.2)


async def gated_reply(request: rg.ModelRequest) -> rg.ModelResponse:
    """The load model, but an even run's first model call waits for the gate file named in its
    input (``gate=<path> run ...``)."""
    head = request.messages[0].text or ""
    gate, run = head.split()[0].removeprefix("gate="), int(head.split("run ")[1].split()[0])
    if run % 2 == 0 and not any(m.role == "tool" for m in request.messages):
        while not os.path.exists(gate):
            await asyncio.sleep(0.2)
    return await loadkit.reply(request)


@rg.tool(num_cpus=0.25)
def step(ctx: rg.ToolContext, run: int, turn: int) -> str:
    """Do one step of a run; an odd run's first step waits for the gate file (run context)."""
    record(ctx.context["ledger"], "start", ctx.idempotency_key)
    if run % 2 == 1 and turn == 0:
        opened(ctx.context["gate"])
    apply_effect_once(ctx.context["ledger"], ctx.idempotency_key)
    return f"{run}.{turn}"


@pytest.mark.timeout(600)
def test_l3_a_suspend_storm_then_a_resume_storm(load_store: str, tmp_path: Path) -> None:
    """Every run is active (even ones in their first model call, odd ones in or queued for
    their first tool) when all are suspended at once; each stops with a stored checkpoint, and
    each resume completes without any tool running twice for its idempotency key."""
    n = int(os.environ.get("RAYGENTS_STORM_RUNS", "300"))
    gate, ledger = tmp_path / "gate", Ledger(tmp_path / "ledger.jsonl")
    context = {"ledger": str(ledger.path), "gate": str(gate)}
    storm = rg.Agent(
        "l3_storm", tools=[step], model=rg.testing.FunctionModel(gated_reply), replicas=REPLICAS
    )
    handles = [
        rg.start(storm, loadkit.prompt(i, f"gate={gate} "), context=context) for i in range(n)
    ]
    for i, handle in enumerate(handles):  # every run is in its first model call or tool
        waited = "agent_start" if i % 2 == 0 else "tool_start"
        next(e for e in handle.events() if e.type == waited)
    for handle in handles:
        handle.suspend()
    gate.touch()
    for handle in handles:
        with pytest.raises(rg.SuspendedError) as info:
            handle.result(timeout_s=300)
        assert info.value.checkpoint is None, "the checkpoint was stored"
    ids = [h.run_id for h in handles]
    assert set(statuses(ids).values()) == {"suspended"}
    with loadkit.PeakRSS() as peak:
        started = time.perf_counter()
        resumed = [rg.resume(run_id, agent=storm, context=context) for run_id in ids]
        batch = asyncio.run(loadkit.wait_all(dict(enumerate(resumed)), started))
    batch.peak_rss, batch.wall_s = peak.peak, time.perf_counter() - started
    print(f"\nL3 {n} suspended then resumed: {batch.figures()}")
    assert batch.wrong() == {}
    starts, effects = ledger.starts(), ledger.effects()
    assert len(effects) == sum(loadkit.turns_of(i) - 1 for i in range(n))
    assert set(starts.values()) == {1}, "no tool ran twice for its key"
    assert set(effects.values()) == {1}
    wait_for(lambda: set(statuses(ids).values()) == {"completed"}, 60)
