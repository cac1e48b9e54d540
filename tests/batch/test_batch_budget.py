"""Budgets of batch jobs: each item's (``max_tokens``, ``max_cost_usd``) and the job's
(``job_max_tokens``, ``job_max_cost_usd``), which stops the job, and which a run of the job
with a larger budget goes on from."""

from __future__ import annotations

import pytest

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")

CENT = rg.ModelSettings(price=rg.Price(input_per_mtok=1000.0, output_per_mtok=0.0))
"""At this price each fake reply below (10 input tokens) costs $0.01."""


def _echo(request: rg.ModelRequest) -> rg.ModelResponse:
    return text(f"echo {request.messages[-1].text}", input_tokens=10, output_tokens=5)


@rg.tool(remote=False)
def tick(n: int) -> str:
    """Count."""
    return f"tick {n}"


def _forever(request: rg.ModelRequest) -> rg.ModelResponse:
    done = sum(1 for m in request.messages if m.role == "tool")
    return calls(call("tick", {"n": done}, id=f"t{done}"))


def test_a_job_stops_once_its_items_used_its_tokens_and_a_larger_budget_goes_on() -> None:
    agent = rg.Agent("job-tokens", model=FunctionModel(_echo))
    inputs = [f"q{i}" for i in range(300)]
    first = rg.run_batch(
        agent, inputs, job_id="job-tokens", concurrency=2, job_max_tokens=150, progress=False
    )
    assert first.stopped is not None and "job_max_tokens" in first.stopped
    # 15 tokens an item: 10 items reach the budget; those in flight then may still complete
    assert 10 <= first.completed <= 12 and first.total < 300
    again = rg.run_batch(
        agent, inputs, job_id="job-tokens", concurrency=2, job_max_tokens=150, progress=False
    )
    assert again.stopped is not None and again.completed == 0  # (spent by the first run)
    more = rg.run_batch(
        agent, inputs, job_id="job-tokens", concurrency=2, job_max_tokens=450, progress=False
    )
    assert more.stopped is not None and "job_max_tokens" in more.stopped
    # (its completed items include the first run's, skipped)
    assert more.skipped == first.completed and 30 <= more.completed <= 32
    assert more.usage.total_tokens == 15 * (more.completed - more.skipped)


def test_a_job_stops_once_its_items_cost_its_dollars() -> None:
    agent = rg.Agent("job-dollars", model=FunctionModel(_echo), model_settings=CENT)
    result = rg.run_batch(
        agent,
        (f"q{i}" for i in range(300)),
        job_id="job-dollars",
        concurrency=2,
        job_max_cost_usd=0.1,
        progress=False,
    )
    assert result.stopped is not None and "job_max_cost_usd" in result.stopped
    assert 10 <= result.completed <= 12
    assert result.usage.cost_usd == pytest.approx(0.01 * result.completed)


def test_each_item_of_a_job_has_its_own_budget_in_dollars() -> None:
    agent = rg.Agent(
        "item-dollars",
        tools=[tick],
        model=FunctionModel(_forever),
        model_settings=CENT,
        max_turns=100,
    )
    result = rg.run_batch(
        agent, ["a", "b", "c"], job_id="item-dollars", max_cost_usd=0.03, progress=False
    )
    assert [i.status for i in result.items] == ["failed"] * 3
    assert all("max_cost_usd" in (i.error or "") for i in result.items)
    assert result.stopped is None


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"job_max_tokens": 0}, "job_max_tokens"),
        ({"job_max_tokens": 1.5}, "job_max_tokens"),
        ({"job_max_cost_usd": float("nan")}, "job_max_cost_usd"),
        ({"job_max_cost_usd": -1.0}, "job_max_cost_usd"),
        ({"job_max_cost_usd": 0}, "job_max_cost_usd"),
        ({"max_cost_usd": float("inf")}, "max_cost_usd"),
    ],
)
def test_a_bad_job_budget_is_a_user_error(options: dict[str, object], match: str) -> None:
    agent = rg.Agent("job-never", model=FunctionModel(_echo))
    with pytest.raises(rg.UserError, match=match):
        rg.start_batch(agent, ["a"], job_id="job-never", progress=False, **options)  # type: ignore[arg-type]
