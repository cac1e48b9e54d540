"""A run's budget in dollars (``max_cost_usd=``) and the cost of its model calls: the run,
its agent-as-tool children included, stops with ``UsageLimitExceeded`` once its cost reaches
the budget; prices come from the agent's ``ModelSettings(price=)`` or ``init(prices=)``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")

# Every fake model reply is 10 input and 5 output tokens: at this price a call costs $0.01.
CENT = rg.Price(input_per_mtok=1000.0, output_per_mtok=0.0)
PRICED = rg.ModelSettings(price=CENT)


@rg.tool(remote=False)
def tick(n: int) -> str:
    """Count."""
    return f"tick {n}"


def _forever(request: rg.ModelRequest) -> rg.ModelResponse:
    done = sum(1 for m in request.messages if m.role == "tool")
    return calls(call("tick", {"n": done}, id=f"t{done}"))


def test_a_run_knows_its_cost_and_stops_when_it_reaches_its_budget() -> None:
    agent = rg.Agent(
        "cost_spender",
        tools=[tick],
        model=FunctionModel(_forever),
        model_settings=PRICED,
        max_turns=100,
    )
    handle = rg.start(agent, "go", max_cost_usd=0.05)
    with pytest.raises(rg.UsageLimitExceeded) as info:
        handle.result(timeout_s=60)
    error = info.value
    assert (error.limit, error.value) == ("max_cost_usd", 0.05)
    assert error.used == pytest.approx(0.05)
    assert error.run_id == handle.run_id
    failed = {i.run_id: i for i in rg.runs(status="failed")}
    assert "max_cost_usd" in (failed[handle.run_id].last_error or "")


def test_a_completed_run_reports_its_cost_and_an_unpriced_one_none() -> None:
    priced = rg.Agent(
        "cost_priced", model=FunctionModel(lambda r: text("hi")), model_settings=PRICED
    )
    assert rg.run(priced, "go").usage.cost_usd == pytest.approx(0.01)
    unpriced = rg.Agent("cost_unpriced", model=FunctionModel(lambda r: text("hi")))
    assert rg.run(unpriced, "go").usage.cost_usd is None


def test_a_budget_in_dollars_needs_a_price_for_the_model() -> None:
    agent = rg.Agent("cost_no_price", model=FunctionModel(lambda r: text("hi")))
    with pytest.raises(rg.UserError, match="has no price"):
        rg.run(agent, "go", max_cost_usd=1.0)


def test_children_spend_from_their_parents_dollars() -> None:
    helper = rg.Agent(
        "cost_helper", model=FunctionModel(lambda r: text("helped")), model_settings=PRICED
    )

    def parent_reply(request: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        return calls(call("helper", {"input": "help"}, id=f"h{done}"))

    parent = rg.Agent(
        "cost_parent",
        tools=[helper.as_tool("helper", "Ask the helper.")],
        model=FunctionModel(parent_reply),
        model_settings=PRICED,
        max_turns=50,
    )
    with pytest.raises(rg.UsageLimitExceeded) as info:
        rg.run(parent, "go", max_cost_usd=0.04)
    # parent, child, parent, child: $0.04 (a child's cost counts in its parent's)
    assert info.value.used == pytest.approx(0.04)


def test_a_fan_out_of_64_children_stops_within_one_call_per_child_of_its_budget() -> None:
    """Each child loops on a tool until its share of the budget is spent; the 64 run side by
    side, so the run as a whole may pass its budget only by the one call each child makes
    past its share."""
    worker = rg.Agent(
        "cost_fan_child",
        tools=[tick],
        model=FunctionModel(_forever),
        model_settings=PRICED,
        max_turns=1000,
    )
    width = 64

    def fan(request: rg.ModelRequest) -> rg.ModelResponse:
        return calls(*[call("worker", {"input": f"part {i}"}, id=f"w{i}") for i in range(width)])

    parent = rg.Agent(
        "cost_fan_parent",
        tools=[worker.as_tool("worker", "Work.")],
        model=FunctionModel(fan),
        model_settings=PRICED,
        max_turns=10,
    )
    budget = 2.0
    with pytest.raises(rg.UsageLimitExceeded) as info:
        rg.run(parent, "go", max_cost_usd=budget)
    used = info.value.used
    assert used is not None and budget <= used <= budget + width * 0.01 + 1e-9
    # the children ran: each spent its share of what the parent's first call left
    assert used > 0.01 * width


@pytest.fixture
def namespace_prices(own_raygents: None) -> Iterator[None]:
    rg.shutdown()
    rg.init(
        namespace=f"prices-{os.urandom(3).hex()}",
        store="memory://",
        prices={"named-model": rg.Price(input_per_mtok=1000.0, output_per_mtok=2000.0)},
    )
    yield
    with contextlib.suppress(Exception):
        rg.shutdown()


class _Named(FunctionModel):
    """A fake model with a provider's model name, as ``OpenAIChatModel`` has."""

    model = "named-model"


def test_the_namespaces_prices_apply_by_model_name_and_the_agents_price_wins(
    namespace_prices: None,
) -> None:
    named = rg.Agent("cost_named", model=_Named(lambda r: text("hi")))
    assert rg.run(named, "go").usage.cost_usd == pytest.approx(0.02)  # 10 * 1000 + 5 * 2000
    own = rg.Agent("cost_own", model=_Named(lambda r: text("hi")), model_settings=PRICED)
    assert rg.run(own, "go").usage.cost_usd == pytest.approx(0.01)
    with pytest.raises(rg.UsageLimitExceeded, match="max_cost_usd"):
        rg.run(rg.Agent("cost_loop", tools=[tick], model=_Named(_forever)), "go", max_cost_usd=0.03)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_a_bad_budget_in_dollars_is_a_user_error(bad: object) -> None:
    agent = rg.Agent("cost_never_runs", model=FunctionModel(lambda r: text("x")))
    with pytest.raises(rg.UserError, match="max_cost_usd"):
        rg.start(agent, "go", max_cost_usd=bad)  # type: ignore[arg-type]
