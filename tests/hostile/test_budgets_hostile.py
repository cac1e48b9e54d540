"""Bad budgets and prices are refused with a ``UserError`` that names the value, before
anything starts: negative, NaN or infinite amounts, bools, tenants that are not ids,
prices that are not ``Price``."""

from __future__ import annotations

from typing import Any

import pytest

import raygents as rg
from raygents.core.pricing import check_prices
from raygents.models.budgets import check_budgets
from raygents.runtime.driver.runchecks import check_run_limits


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"tokens_per_day": -1}, "tokens_per_day"),
        ({"tokens_per_day": 0}, "tokens_per_day"),
        ({"tokens_per_day": 1.5}, "tokens_per_day"),
        ({"tokens_per_day": True}, "tokens_per_day"),
        ({"usd_per_day": float("nan")}, "usd_per_day"),
        ({"usd_per_day": float("inf")}, "usd_per_day"),
        ({"usd_per_day": -0.5}, "usd_per_day"),
        ({"usd_per_day": 0}, "usd_per_day"),
        ({"usd_per_day": "5"}, "usd_per_day"),
        ({}, "tokens_per_day=, usd_per_day= or both"),
    ],
)
def test_a_bad_budget_is_refused(fields: dict[str, Any], match: str) -> None:
    with pytest.raises(rg.UserError, match=match):
        rg.Budget(**fields)


@pytest.mark.parametrize(
    ("budgets", "match"),
    [
        ([("acme", rg.Budget(tokens_per_day=1))], "must map tenant ids"),
        ({"../acme": rg.Budget(tokens_per_day=1)}, "tenant"),
        ({"": rg.Budget(tokens_per_day=1)}, "tenant"),
        ({"a\x1b[31m": rg.Budget(tokens_per_day=1)}, "tenant"),
        ({"acme": 100}, r"budgets\['acme'\] must be a Budget"),
    ],
)
def test_bad_budgets_are_refused(budgets: object, match: str) -> None:
    with pytest.raises(rg.UserError, match=match):
        check_budgets(budgets)


@pytest.mark.parametrize(
    ("prices", "match"),
    [
        ({"gpt-4o-mini": {"input_per_mtok": 0.15}}, "must be a Price"),
        ({None: rg.Price(1.0, 1.0)}, "model names"),
        ({"  ": rg.Price(1.0, 1.0)}, "model names"),
        ("gpt-4o-mini", "must map model names"),
    ],
)
def test_bad_prices_are_refused(prices: object, match: str) -> None:
    with pytest.raises(rg.UserError, match=match):
        check_prices(prices)


@pytest.mark.parametrize("bad", [float("nan"), float("-inf"), -0.01, 0, 0.0, True, "1", [1]])
def test_a_bad_budget_in_dollars_for_a_run_is_refused(bad: object) -> None:
    with pytest.raises(rg.UserError, match="max_cost_usd"):
        check_run_limits(None, None, None, bad)


def test_init_refuses_bad_prices_and_budgets_before_it_starts_anything() -> None:
    with pytest.raises(rg.UserError, match="Price"):
        rg.init(namespace="never", prices={"m": 0.15})  # type: ignore[dict-item]
    with pytest.raises(rg.UserError, match="Budget"):
        rg.init(namespace="never", budgets={"acme": {"usd_per_day": 5}})  # type: ignore[dict-item]


@pytest.mark.parametrize("bad", ["cheap", 0.15, {"input_per_mtok": 1.0, "output_per_mtok": 1.0}])
def test_a_model_settings_price_that_is_not_a_price_is_refused(bad: object) -> None:
    with pytest.raises(rg.UserError, match="ModelSettings price"):
        rg.ModelSettings(price=bad)  # type: ignore[arg-type]


def test_a_price_read_back_is_checked_as_a_price_made_here() -> None:
    from raygents.core.messages import ModelSettingsData

    with pytest.raises(rg.UserError, match="input_per_mtok"):
        ModelSettingsData.model_validate(
            {"price": {"input_per_mtok": float("nan"), "output_per_mtok": 1.0}}
        )


def test_raygents_budgets_neutralises_what_it_prints() -> None:
    import io

    from raygents.cli.output import print_budgets

    out = io.StringIO()
    row = {"tenant": "a\x1b]0;x\x07b", "tokens": 1, "tokens_per_day": None}
    print_budgets(
        {"day": "2026-\x1b[2J", "tenants": [row | {"usd": 0.0, "usd_per_day": 1.0}]}, False, out
    )
    printed = out.getvalue()
    assert "\x1b" not in printed and "\x07" not in printed
    assert "\\x1b" in printed


def test_raygents_budgets_refuses_a_tenant_that_is_not_an_id() -> None:
    from raygents.cli.main import parser

    with pytest.raises(SystemExit):
        parser().parse_args(["budgets", "--tenant", "../x"])


def test_a_driver_asking_for_other_prices_or_budgets_does_not_join_silently() -> None:
    from raygents.runtime.driver import startup
    from raygents.runtime.link.settings import Settings

    theirs = Settings(
        prices={"m": rg.Price(1.0, 2.0)}, budgets={"acme": rg.Budget(tokens_per_day=10)}
    )
    cheaper = Settings(prices={"m": rg.Price(0.5, 2.0)})
    error = startup.settings_mismatch("ns", cheaper, theirs)
    assert isinstance(error, rg.UserError) and "prices=" in str(error)
    richer = Settings(budgets={"acme": rg.Budget(tokens_per_day=10**9)})
    error = startup.settings_mismatch("ns", richer, theirs)
    assert isinstance(error, rg.UserError) and "budgets=" in str(error)
    assert startup.settings_mismatch("ns", Settings(), theirs) is None  # (takes theirs)
