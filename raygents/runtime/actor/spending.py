"""Each agent actor's way to its namespace's budget keeper: ask before a model call of a
tenant with a daily budget, tell what the call used after."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray

from raygents.core.envelope import RunState
from raygents.core.messages import ModelRequest, ModelResponse, Usage
from raygents.core.pricing import Price
from raygents.errors import UsageLimitExceeded, UserError
from raygents.ids import DEFAULT_TENANT
from raygents.models.budgets import BudgetKeeper
from raygents.runtime.link.coordinator_client import COORDINATOR_NAME, CoordinatorClient
from raygents.runtime.link.settings import Settings

__all__ = [
    "KEEPER_NAME",
    "before_call",
    "budgeted",
    "charge",
    "check",
    "keeper",
    "price_of",
    "priced",
]

log = logging.getLogger("raygents")

KEEPER_NAME = "raygents:budgets"

_keepers: dict[str, asyncio.Future[Any]] = {}
"""This process's handle on each namespace's keeper, found (or created) once."""
_sends: set[asyncio.Future[Any]] = set()


def budgeted(settings: Settings, tenant: str | None) -> str | None:
    """The tenant whose daily budget a run's model calls count against, or None."""
    name = tenant or DEFAULT_TENANT
    return name if name in settings.budgets else None


async def keeper(namespace: str) -> Any:
    """The namespace's keeper (created on first use with the coordinator's settings).

    Raises:
        Exception: it cannot be reached or created (the caller decides what a run does).
    """
    found = _keepers.get(namespace)
    if found is None:
        found = _keepers[namespace] = asyncio.ensure_future(_open(namespace))
    try:
        return await asyncio.shield(found)
    except Exception:
        if _keepers.get(namespace) is found:
            del _keepers[namespace]
        raise


async def _open(namespace: str) -> Any:
    loop = asyncio.get_running_loop()
    coordinator = await loop.run_in_executor(None, ray.get_actor, COORDINATOR_NAME, namespace)
    settings = await CoordinatorClient(namespace, coordinator).settings()
    remote = ray.remote(BudgetKeeper).options(
        name=KEEPER_NAME,
        namespace=namespace,
        get_if_exists=True,
        lifetime="detached",  # it serves every agent actor, whichever created it
        num_cpus=0,
        max_restarts=-1,
    )
    handle: Any = await loop.run_in_executor(
        None, remote.remote, dict(settings.budgets), settings.store, settings.key
    )
    await handle.configure.remote(dict(settings.budgets))
    return handle


async def check(namespace: str, tenant: str) -> UsageLimitExceeded | None:
    """The error for a run of ``tenant`` that reached its daily budget, or None. A keeper
    that cannot be reached lets the call go (logged), as the rate limiter does."""
    for attempt in range(2):  # (a keeper that went away is found, or made, again)
        try:
            handle = await keeper(namespace)
            verdict: UsageLimitExceeded | None = await handle.check.remote(tenant)
            return verdict
        except Exception as exc:
            _keepers.pop(namespace, None)
            if attempt:
                log.warning("cannot reach the budget keeper of namespace %r: %s", namespace, exc)
    return None


def charge(namespace: str, tenant: str, usage: Usage) -> None:
    """Tell the keeper what one model call of ``tenant`` used (without waiting for it)."""
    task = asyncio.ensure_future(_charge(namespace, tenant, usage))
    _sends.add(task)
    task.add_done_callback(_sends.discard)


async def _charge(namespace: str, tenant: str, usage: Usage) -> None:
    try:
        handle = await keeper(namespace)
        await handle.charge.remote(tenant, usage.total_tokens, usage.cost_usd)
    except Exception as exc:  # a lost charge is logged, never a run's failure
        log.warning("cannot tell the budget keeper of namespace %r: %s", namespace, exc)


def price_of(settings: Settings, request: ModelRequest, name: str | None) -> Price | None:
    """What the model of a call charges: the agent's ``ModelSettings(price=)``, else the
    namespace's price for the model's name (``name``), else None."""
    if request.settings.price is not None:
        return request.settings.price
    return settings.prices.get(name) if name else None


async def before_call(
    settings: Settings, namespace: str, state: RunState, request: ModelRequest, name: str | None
) -> None:
    """Refuse a model call that a budget in dollars cannot price, or whose tenant spent its
    daily budget.

    Raises:
        UserError: the run has ``max_cost_usd`` and the model (``name``) no price.
        UsageLimitExceeded: the tenant reached its budget today.
    """
    if state.max_cost_usd is not None and price_of(settings, request, name) is None:
        raise UserError(
            f"run {state.run_id!r} has a budget in dollars (max_cost_usd) but agent "
            f"{state.agent_name!r}'s model {name!r} has no price: give one with "
            "init(prices={name: Price(...)}) or ModelSettings(price=Price(...))"
        )
    tenant = budgeted(settings, state.tenant)
    if tenant is not None:
        over = await check(namespace, tenant)
        if over is not None:
            raise over


def priced(
    settings: Settings,
    namespace: str,
    state: RunState,
    request: ModelRequest,
    response: ModelResponse,
    name: str | None,
) -> ModelResponse:
    """``response`` with its usage priced, told to the tenant's budget keeper if it has a
    daily budget (without waiting)."""
    price = price_of(settings, request, name)
    if price is not None:
        response = response.model_copy(update={"usage": response.usage.at_price(price)})
    tenant = budgeted(settings, state.tenant)
    if tenant is not None:
        charge(namespace, tenant, response.usage)
    return response
