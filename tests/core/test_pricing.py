"""Prices and costs: what a call costs at a price, how costs add up across calls and
children, and the loop stopping a run whose cost reached ``max_cost_usd``."""

from __future__ import annotations

import pickle

import pytest

from raygents.core import loop
from raygents.core.envelope import RunState
from raygents.core.messages import Message, ModelSettingsData, ToolCall, Usage
from raygents.core.pricing import Price, check_prices
from raygents.errors import UsageLimitExceeded, UserError
from raygents.models.base import ModelSettings
from raygents.runtime.actor.children import child_cost

PRICE = Price(input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.5)


@pytest.mark.parametrize(
    ("usage", "cost"),
    [
        (Usage(1_000_000, 0), 2.0),
        (Usage(0, 1_000_000), 8.0),
        (Usage(1_000_000, 500_000), 6.0),
        # cached input tokens are part of the input tokens, priced as cached
        (Usage(1_000_000, 0, cached_input_tokens=400_000), 0.6 * 2.0 + 0.4 * 0.5),
        # a provider that says more cached than input tokens is held to its input
        (Usage(100, 0, cached_input_tokens=1000), 100 * 0.5 / 1e6),
    ],
)
def test_a_call_costs_its_tokens_at_the_price(usage: Usage, cost: float) -> None:
    assert usage.at_price(PRICE).cost_usd == pytest.approx(cost)


def test_cached_input_without_a_cached_price_costs_as_input() -> None:
    price = Price(1.0, 1.0)
    assert Usage(1_000_000, 0, cached_input_tokens=1_000_000).at_price(price).cost_usd == 1.0


def test_no_price_leaves_the_cost_unknown_and_a_providers_cost_wins() -> None:
    assert Usage(10, 5).at_price(None).cost_usd is None
    assert Usage(10, 5, cost_usd=0.5).at_price(PRICE).cost_usd == 0.5


def test_costs_add_across_calls_and_an_unpriced_call_adds_nothing() -> None:
    a = Usage(1_000_000, 0, requests=1).at_price(PRICE)
    b = Usage(0, 1_000_000, requests=1).at_price(PRICE)
    unpriced = Usage(5, 5, requests=1)
    assert (a + b).cost_usd == pytest.approx(10.0)
    assert (a + unpriced).cost_usd == pytest.approx(2.0)
    assert (unpriced + a + unpriced).requests == 3
    assert (unpriced + unpriced).cost_usd is None
    assert Usage().cost_usd is None


def test_a_price_travels_with_model_settings_and_round_trips() -> None:
    data = ModelSettings(temperature=0.1, price=PRICE).to_data()
    assert isinstance(data, ModelSettingsData) and data.price == PRICE
    assert ModelSettingsData.model_validate(data.model_dump(mode="json")).price == PRICE
    assert pickle.loads(pickle.dumps(PRICE)) == PRICE


def _state(**fields: object) -> RunState:
    fields.setdefault("messages", (Message("user", "hi"),))
    return RunState(run_id="r", agent_name="a", **fields)  # type: ignore[arg-type]


def _view() -> loop.AgentView:
    return loop.AgentView(name="a", system="", tools=(), settings=ModelSettingsData())


def test_the_loop_stops_a_run_whose_cost_reached_its_budget() -> None:
    under = _state(max_cost_usd=1.0, usage=Usage(10, 5, cost_usd=0.99))
    _, action = loop.next_turn(under, _view())
    assert isinstance(action, loop.CallModel)
    spent = _state(max_cost_usd=1.0, usage=Usage(10, 5, cost_usd=1.0))
    _, action = loop.next_turn(spent, _view())
    assert isinstance(action, loop.Fail)
    error = action.error
    assert isinstance(error, UsageLimitExceeded)
    assert (error.limit, error.value, error.used) == ("max_cost_usd", 1.0, 1.0)
    assert "max_cost_usd" in str(error)
    assert pickle.loads(pickle.dumps(error)).limit == "max_cost_usd"


def test_an_unbudgeted_run_is_never_stopped_by_its_cost() -> None:
    _, action = loop.next_turn(_state(usage=Usage(10, 5, cost_usd=1e9)), _view())
    assert isinstance(action, loop.CallModel)


def test_children_share_what_the_parent_has_left_of_its_dollars() -> None:
    calls = tuple(ToolCall(f"c{i}", "t") for i in range(4))
    state = _state(
        max_cost_usd=1.0,
        usage=Usage(1, 1, cost_usd=0.2),
        messages=(Message("user", "hi"), Message("assistant", None, tool_calls=calls)),
    )
    assert child_cost(state) == pytest.approx(0.2)
    assert child_cost(state.evolve(usage=Usage(1, 1, cost_usd=3.0))) == 0.0
    assert child_cost(state.evolve(max_cost_usd=None)) is None


@pytest.mark.parametrize(
    "bad",
    [
        {"input_per_mtok": -1.0, "output_per_mtok": 1.0},
        {"input_per_mtok": float("nan"), "output_per_mtok": 1.0},
        {"input_per_mtok": 1.0, "output_per_mtok": float("inf")},
        {"input_per_mtok": 1.0, "output_per_mtok": "1"},
        {"input_per_mtok": True, "output_per_mtok": 1.0},
        {"input_per_mtok": 1.0, "output_per_mtok": 1.0, "cached_input_per_mtok": -0.1},
    ],
)
def test_a_bad_price_is_a_user_error(bad: dict[str, object]) -> None:
    with pytest.raises(UserError, match="Price"):
        Price(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prices", "match"),
    [
        ([("m", PRICE)], "must map model names"),
        ({"": PRICE}, "keys must be model names"),
        ({3: PRICE}, "keys must be model names"),
        ({"m": 0.15}, r"prices\['m'\] must be a Price"),
    ],
)
def test_bad_prices_are_a_user_error(prices: object, match: str) -> None:
    with pytest.raises(UserError, match=match):
        check_prices(prices)
