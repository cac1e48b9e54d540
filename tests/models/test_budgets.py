"""Daily budgets per tenant, without Ray: what a tenant spent, when a run of it must stop,
a new day, and the keeper's copy in the store that a restarted keeper reads back."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path

import pytest

from raygents.errors import UsageLimitExceeded
from raygents.models.budgets import (
    BUDGETS_PREFIX,
    Budget,
    BudgetKeeper,
    Spending,
    read_spending,
    today,
)
from raygents.records import codec
from raygents.stores.open import open_store

KEY = b"k" * 32


def test_a_tenant_over_its_tokens_or_dollars_must_stop() -> None:
    spending = Spending("2026-01-01")
    budget = Budget(tokens_per_day=100, usd_per_day=1.0)
    spending.charge("acme", 99, 0.5)
    assert spending.over("acme", budget) is None
    spending.charge("acme", 1, None)
    error = spending.over("acme", budget)
    assert isinstance(error, UsageLimitExceeded)
    assert (error.limit, error.value, error.used) == ("tenant_tokens_per_day", 100, 100)
    assert "'acme'" in str(error) and "2026-01-01" in str(error)
    assert pickle.loads(pickle.dumps(error)).limit == "tenant_tokens_per_day"
    dollars = Spending("2026-01-01")
    dollars.charge("acme", 1, 1.25)
    error = dollars.over("acme", budget)
    assert error is not None and (error.limit, error.used) == ("tenant_usd_per_day", 1.25)
    assert dollars.over("other", budget) is None  # (each tenant spends its own)


def test_spending_round_trips_and_a_hostile_copy_reads_as_nothing_spent() -> None:
    spending = Spending("2026-01-01")
    spending.charge("acme", 10, 0.5)
    spending.charge("beta", 3, None)
    back = Spending.from_plain(spending.to_plain(), "2026-01-01")
    assert (back.tokens, back.usd) == ({"acme": 10, "beta": 3}, {"acme": 0.5, "beta": 0.0})
    assert Spending.from_plain(spending.to_plain(), "2026-01-02").tokens == {}  # another day
    hostile = {"day": "2026-01-01", "tenants": {"acme": [-5, float("nan")], "b": "x"}}
    assert Spending.from_plain(hostile, "2026-01-01").tokens == {}
    assert Spending.from_plain(None, "2026-01-01").tokens == {}


def test_a_day_is_a_utc_date() -> None:
    assert today(0.0) == "1970-01-01"
    assert today(86_399.0) == "1970-01-01" and today(86_400.0) == "1970-01-02"


def test_a_restarted_keeper_reads_what_was_spent_today_from_the_store(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'store'}"
    budgets = {"acme": Budget(tokens_per_day=100)}

    async def spend() -> None:
        keeper = BudgetKeeper(budgets, url, KEY)
        await keeper.charge("acme", 60, 0.1)
        await keeper.charge("acme", 40, None)
        await keeper.save()
        await keeper.charge("other", 5, None)
        await keeper.save()

    asyncio.run(spend())
    store = open_store(url)
    day = today()
    assert len(store.list(f"{BUDGETS_PREFIX}{day}/")) == 1  # (older copies go)

    async def restarted() -> None:
        keeper = BudgetKeeper(budgets, url, KEY)
        error = await keeper.check("acme")
        assert error is not None and error.used == 100
        assert await keeper.check("other") is None  # (no budget: never stopped)
        report = await keeper.report()
        rows = {row["tenant"]: row for row in report["tenants"]}
        assert rows["acme"] == {
            "tenant": "acme",
            "tokens": 100,
            "tokens_per_day": 100,
            "usd": pytest.approx(0.1),
            "usd_per_day": None,
        }
        assert rows["other"]["tokens"] == 5 and report["day"] == day

    asyncio.run(restarted())


def test_a_copy_not_signed_with_the_key_is_not_read(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'store'}"
    store = open_store(url)
    day = today()
    forged = {"day": day, "tenants": {"acme": [0, 0.0]}}
    signed = {"day": day, "tenants": {"acme": [70, 0.0]}}
    store.put(f"{BUDGETS_PREFIX}{day}/000000000001", codec.encode(signed, key=KEY))
    store.put(f"{BUDGETS_PREFIX}{day}/000000000002", codec.encode(forged, key=b"x" * 32))
    spending, seq = read_spending(store, day, KEY)
    assert spending.tokens == {"acme": 70} and seq == 1
