"""Daily budgets per tenant on a real local Ray: two drivers and a batch job of one tenant
share its budget, a run over it stops with ``UsageLimitExceeded``, other tenants go on, and
what the tenant spent survives a restart of the coordinator and of the budget keeper."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

import raygents as rg
from raygents.runtime.actor.spending import KEEPER_NAME
from raygents.runtime.link.coordinator_client import COORDINATOR_NAME
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.timeout(240)

BUDGET = 300  # tokens a day for tenant "acme"; every run below uses 15 (one model call)


@rg.tool(remote=False)
def pad(n: int) -> str:
    """Pad the history."""
    return f"pad {n}: " + "words " * 60


def _reply(request: rg.ModelRequest) -> rg.ModelResponse:
    return text("ok", input_tokens=10, output_tokens=5)


@pytest.fixture
def budgeted(own_raygents: None, rt: None, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """raygents on its own namespace and file store, with a daily budget for ``acme``."""
    rg.shutdown()
    namespace, store = f"budgets-{os.urandom(3).hex()}", f"file://{tmp_path / 'store'}"
    rg.init(namespace=namespace, store=store, budgets={"acme": rg.Budget(tokens_per_day=BUDGET)})
    yield namespace, store
    rg.shutdown()
    with contextlib.suppress(ValueError):  # (the keeper outlives its namespace's coordinator)
        ray.kill(ray.get_actor(KEEPER_NAME, namespace=namespace))


@ray.remote(num_cpus=0)
def other_driver(namespace: str, store: str, runs: int) -> int:
    """Another process of the namespace, starting runs of tenant ``acme`` itself."""
    rg.init(namespace=namespace, store=store, handle_sigterm=False)
    try:
        agent = rg.Agent("budget-other", model=FunctionModel(_reply))
        return sum(rg.run(agent, f"q{i}", tenant="acme").usage.total_tokens for i in range(runs))
    finally:
        rg.shutdown()


def test_two_drivers_and_a_batch_job_share_the_tenants_daily_budget(
    budgeted: tuple[str, str],
) -> None:
    namespace, store = budgeted
    agent = rg.Agent("budget-here", model=FunctionModel(_reply))
    here = sum(rg.run(agent, f"q{i}", tenant="acme").usage.total_tokens for i in range(6))
    there = ray.get(other_driver.remote(namespace, store, 6), timeout=120)
    assert here == there == 90
    job = rg.run_batch(
        agent,
        [f"item {i}" for i in range(40)],
        job_id="budget-job",
        tenant="acme",
        concurrency=2,
        progress=False,
    )
    # 120 tokens were left: 8 items; the calls in flight when it is reached may pass it
    assert 8 <= job.completed <= 11
    failed = [item for item in job.items if item.status == "failed"]
    assert len(failed) == 40 - job.completed
    assert all("tenant_tokens_per_day" in (item.error or "") for item in failed)
    with pytest.raises(rg.UsageLimitExceeded) as info:
        rg.run(agent, "one more", tenant="acme")
    assert info.value.limit == "tenant_tokens_per_day" and info.value.value == BUDGET
    assert info.value.used is not None and info.value.used >= BUDGET
    assert rg.run(agent, "another tenant", tenant="beta").final_output == "ok"
    assert rg.run(agent, "the default tenant").final_output == "ok"


def test_a_tenants_spending_survives_restarts_of_the_coordinator_and_keeper(
    budgeted: tuple[str, str],
) -> None:
    namespace, _ = budgeted
    agent = rg.Agent("budget-restart", model=FunctionModel(_reply))
    for i in range(BUDGET // 15):
        rg.run(agent, f"q{i}", tenant="acme")
    with pytest.raises(rg.UsageLimitExceeded, match="tenant 'acme'"):
        rg.run(agent, "over", tenant="acme")
    time.sleep(1.0)  # (the keeper's copy in the store follows its charges by a moment)
    ray.kill(ray.get_actor(KEEPER_NAME, namespace=namespace), no_restart=True)
    ray.kill(ray.get_actor(COORDINATOR_NAME, namespace=namespace), no_restart=False)
    with pytest.raises(rg.UsageLimitExceeded) as info:
        rg.run(agent, "still over", tenant="acme")
    assert info.value.limit == "tenant_tokens_per_day" and info.value.used == BUDGET


def test_raygents_budgets_shows_what_each_tenant_spent_today(budgeted: tuple[str, str]) -> None:
    import argparse
    import io
    import json

    from raygents.cli.runs import CommandFailed, run_command

    agent = rg.Agent("budget-shown", model=FunctionModel(_reply))
    rg.run(agent, "q", tenant="acme")
    rg.run(agent, "q", tenant="beta")

    def budgets(*, tenant: str | None = None, as_json: bool = False) -> str:
        out = io.StringIO()
        args = argparse.Namespace(command="budgets", tenant=tenant, json=as_json)
        assert run_command(args, out) == 0
        return out.getvalue()

    table = budgets()
    assert "TENANT" in table and "TOKENS PER DAY" in table
    assert any(line.split()[:4] == ["acme", "15", "300", "0.000000"] for line in table.splitlines())
    assert "beta" not in table  # (a tenant without a budget is not counted)
    shown = json.loads(budgets(tenant="acme", as_json=True))
    assert [row["tenant"] for row in shown["tenants"]] == ["acme"]
    assert shown["tenants"][0]["tokens"] == 15
    with pytest.raises(CommandFailed, match="tenant 'nobody' has no budget"):
        budgets(tenant="nobody")


def test_a_summarisers_tokens_count_in_the_tenants_budget(budgeted: tuple[str, str]) -> None:
    """The run's own calls report no usage; its summariser reads 1,000 tokens, over acme's
    300 a day: the run stops before its next call (if the charge is there by then), and the
    next run of acme is refused."""
    namespace, _ = budgeted

    def researcher(request: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        reply = text("done") if done >= 6 else calls(call("pad", {"n": done}, id=f"p{done}"))
        return reply.model_copy(update={"usage": rg.Usage()})

    def summariser(request: rg.ModelRequest) -> rg.ModelResponse:
        return text("the pads so far", input_tokens=1000, output_tokens=0)

    agent = rg.Agent(
        "budget-summarised",
        tools=[pad],
        max_turns=20,
        model=FunctionModel(researcher),
        compaction=rg.Compaction(300, keep_last_turns=1, summarizer=FunctionModel(summariser)),
    )
    handle = rg.start(agent, "go", tenant="acme")
    try:  # the summary's charge may reach the keeper before the run's next call, or after
        assert handle.result(timeout_s=60).final_output == "done"
    except rg.UsageLimitExceeded as exc:
        assert exc.limit == "tenant_tokens_per_day" and exc.used == 1000
    assert any(e.type == "compacted" for e in handle.events())
    keeper = ray.get_actor(KEEPER_NAME, namespace=namespace)
    deadline = time.monotonic() + 30  # (a call is told to the keeper without waiting)
    while ray.get(keeper.check.remote("acme")) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(rg.UsageLimitExceeded) as info:
        rg.run(rg.Agent("budget-after", model=FunctionModel(_reply)), "q", tenant="acme")
    assert info.value.limit == "tenant_tokens_per_day"
    assert info.value.used is not None and info.value.used >= 1000
