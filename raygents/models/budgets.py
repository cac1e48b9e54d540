"""Cluster-wide daily budgets per tenant: the budgets, what each tenant spent today, and the
keeper actor that every agent actor of a namespace asks before a model call and tells after.

One :class:`BudgetKeeper` actor per namespace (named, created on first use by
:mod:`raygents.runtime.actor.spending`) holds what each tenant spent on the current UTC day,
in tokens and in dollars. It keeps a copy in the checkpoint store (``budgets/<day>/<seq>``,
signed with the checkpoint key like every record), written a moment after each charge, so
that the amounts survive a restart of the keeper, of the coordinator or of the whole cluster.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raygents.errors import CheckpointError, UsageLimitExceeded, UserError
from raygents.ids import is_id, validate_id
from raygents.records import codec
from raygents.stores.open import open_store

__all__ = [
    "BUDGETS_PREFIX",
    "Budget",
    "BudgetKeeper",
    "Spending",
    "check_budgets",
    "read_spending",
    "report",
    "today",
]

log = logging.getLogger("raygents")

BUDGETS_PREFIX = "budgets/"
"""Where the keeper's copies of each day's spending are, one folder per UTC day."""
_FLUSH_DELAY_S = 0.2
"""How long a charge waits for others to go into the store with it."""


@dataclass(frozen=True)
class Budget:
    """What one tenant's runs may spend per UTC day, across the namespace (every driver, node,
    sub-agent and batch item of the tenant), in tokens, in US dollars, or both.

    A run of a tenant that reached a budget stops before its next model call with
    :class:`~raygents.UsageLimitExceeded` (``limit`` ``"tenant_tokens_per_day"`` or
    ``"tenant_usd_per_day"``). Runs in flight side by side pass it by at most the model call
    each has out when it is reached. Dollars are counted at the models' prices
    (``init(prices=)``, ``ModelSettings(price=)``); a call without a price costs nothing.

    Raises:
        UserError: a budget is not a positive, finite number (an int for tokens), or
            neither is given.
    """

    tokens_per_day: int | None = None
    usd_per_day: float | None = None

    def __post_init__(self) -> None:
        tokens, usd = self.tokens_per_day, self.usd_per_day
        if tokens is not None and (type(tokens) is not int or tokens < 1):
            raise UserError(f"Budget tokens_per_day must be an int >= 1 or None, got {tokens!r}")
        if usd is not None and (
            isinstance(usd, bool)
            or not isinstance(usd, int | float)
            or not math.isfinite(usd)
            or usd <= 0
        ):
            raise UserError(
                f"Budget usd_per_day must be a finite number of dollars > 0 or None, got {usd!r}"
            )
        if tokens is None and usd is None:
            raise UserError("Budget needs tokens_per_day=, usd_per_day= or both")


def check_budgets(budgets: object) -> dict[str, Budget]:
    """``init(budgets=)`` checked: a mapping of tenant ids to :class:`Budget`.

    Raises:
        UserError: it is not such a mapping.
    """
    if not isinstance(budgets, Mapping):
        raise UserError(f"budgets must map tenant ids to Budget, got {type(budgets).__name__}")
    for tenant, budget in budgets.items():
        validate_id(tenant, "tenant")
        if not isinstance(budget, Budget):
            raise UserError(f"budgets[{tenant!r}] must be a Budget, got {type(budget).__name__}")
    return dict(budgets)


def today(now: float | None = None) -> str:
    """The UTC day of ``now`` (default: now) as ``YYYY-MM-DD``: budgets are per UTC day."""
    moment = datetime.datetime.fromtimestamp(time.time() if now is None else now, datetime.UTC)
    return moment.strftime("%Y-%m-%d")


@dataclass
class Spending:
    """What each tenant spent on one day: tokens (input and output) and dollars. Pure."""

    day: str
    tokens: dict[str, int] = field(default_factory=dict)
    usd: dict[str, float] = field(default_factory=dict)

    def charge(self, tenant: str, tokens: int, usd: float | None) -> None:
        """Add what one model call of ``tenant`` used."""
        self.tokens[tenant] = self.tokens.get(tenant, 0) + max(int(tokens), 0)
        if usd is not None and math.isfinite(usd) and usd > 0:
            self.usd[tenant] = self.usd.get(tenant, 0.0) + usd

    def over(self, tenant: str, budget: Budget) -> UsageLimitExceeded | None:
        """The error for a run of ``tenant`` once it reached ``budget`` today, or None."""
        tokens, usd = self.tokens.get(tenant, 0), self.usd.get(tenant, 0.0)
        if budget.tokens_per_day is not None and tokens >= budget.tokens_per_day:
            return UsageLimitExceeded(
                f"tenant {tenant!r} used {tokens} tokens of its daily budget of "
                f"{budget.tokens_per_day} (tenant_tokens_per_day, init(budgets=)) on {self.day} "
                "UTC; it starts again "
                "at 00:00 UTC",
                limit="tenant_tokens_per_day",
                value=budget.tokens_per_day,
                used=tokens,
            )
        if budget.usd_per_day is not None and usd >= budget.usd_per_day:
            return UsageLimitExceeded(
                f"tenant {tenant!r} spent ${usd:.6f} of its daily budget of "
                f"${budget.usd_per_day:.6f} (tenant_usd_per_day, init(budgets=)) on {self.day} "
                "UTC; it starts again at 00:00 UTC",
                limit="tenant_usd_per_day",
                value=budget.usd_per_day,
                used=usd,
            )
        return None

    def to_plain(self) -> dict[str, Any]:
        """As plain data for the store."""
        tenants = {t: [self.tokens.get(t, 0), self.usd.get(t, 0.0)] for t in self.tenants()}
        return {"day": self.day, "tenants": tenants}

    def tenants(self) -> list[str]:
        """The tenants that spent anything today, sorted."""
        return sorted(set(self.tokens) | set(self.usd))

    @classmethod
    def from_plain(cls, data: Any, day: str) -> Spending:
        """What :meth:`to_plain` wrote, for ``day``; what does not read as such is skipped."""
        found = cls(day)
        tenants = data.get("tenants") if isinstance(data, dict) else None
        if not isinstance(tenants, dict) or data.get("day") != day:
            return found
        for tenant, pair in tenants.items():
            if not (is_id(tenant) and isinstance(pair, list) and len(pair) == 2):
                continue
            tokens, usd = pair
            if type(tokens) is int and tokens >= 0:
                found.tokens[tenant] = tokens
            if isinstance(usd, float | int) and math.isfinite(usd) and usd >= 0:
                found.usd[tenant] = float(usd)
        return found


def report(budgets: Mapping[str, Budget], spending: Spending) -> dict[str, Any]:
    """``spending`` of every tenant with a budget or spending, with its budgets, as plain
    data (what ``raygents budgets`` shows)."""
    rows = []
    for tenant in sorted(set(budgets) | set(spending.tenants())):
        budget = budgets.get(tenant)
        rows.append(
            {
                "tenant": tenant,
                "tokens": spending.tokens.get(tenant, 0),
                "tokens_per_day": None if budget is None else budget.tokens_per_day,
                "usd": spending.usd.get(tenant, 0.0),
                "usd_per_day": None if budget is None else budget.usd_per_day,
            }
        )
    return {"day": spending.day, "tenants": rows}


def read_spending(store: Any, day: str, key: bytes | None) -> tuple[Spending, int]:
    """The newest copy of ``day``'s spending in ``store`` that reads back (signed with
    ``key`` where one is set), and its sequence number (0: none)."""
    prefix = f"{BUDGETS_PREFIX}{day}/"
    names = sorted((k for k in store.list(prefix) if k[len(prefix) :].isdigit()), reverse=True)
    for name in names:
        data = store.get(name)
        if data is None:
            continue
        try:
            plain = codec.decode(data, key=key, source=name)
        except CheckpointError as exc:
            log.warning("budgets: %s does not read back (%s); trying an older copy", name, exc)
            continue
        return Spending.from_plain(plain, day), int(name[len(prefix) :])
    return Spending(day), 0


class BudgetKeeper:
    """The namespace's budgets and what each tenant spent today. Wrapped with ``ray.remote``
    (an async actor) where it is created; its methods never await but to write the store, so
    each check and charge runs whole.

    Args:
        budgets: the namespace's budgets by tenant.
        store: the checkpoint store's URL (where the day's spending is kept).
        key: the checkpoint key (the copies are signed with it), or None.
    """

    def __init__(self, budgets: Mapping[str, Budget], store: str, key: bytes | None = None) -> None:
        self.budgets = dict(budgets)
        self.store = open_store(store)
        self.key = key
        self.spending, self.seq = read_spending(self.store, today(), key)
        self._saved_seq = self.seq
        self._flush: asyncio.Task[None] | None = None
        self._dirty = False

    async def configure(self, budgets: Mapping[str, Budget]) -> None:
        """Take the namespace's budgets (a keeper outlives the coordinator that set them)."""
        self.budgets = dict(budgets)

    async def check(self, tenant: str) -> UsageLimitExceeded | None:
        """The error for a run of ``tenant`` that may make no more model calls today, or
        None (a tenant without a budget never has one)."""
        budget = self.budgets.get(tenant)
        if budget is None:
            return None
        return self._today().over(tenant, budget)

    async def charge(self, tenant: str, tokens: int, usd: float | None) -> None:
        """Count one model call of ``tenant``; the store's copy follows shortly."""
        self._today().charge(tenant, tokens, usd)
        self._dirty = True
        if self._flush is None or self._flush.done():
            self._flush = asyncio.ensure_future(self._save_soon())

    async def report(self) -> dict[str, Any]:
        """Today's spending of every tenant with a budget or spending, with the budgets."""
        return report(self.budgets, self._today())

    async def save(self) -> None:
        """Write today's spending to the store now (also done a moment after each charge)."""
        spending, self.seq = self.spending, self.seq + 1
        seq, plain = self.seq, spending.to_plain()
        name = f"{BUDGETS_PREFIX}{spending.day}/{seq:012d}"
        frame = codec.encode(plain, key=self.key, source=name)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.store.put, name, frame)
        older = self._saved_seq
        self._saved_seq = max(self._saved_seq, seq)
        if 0 < older < seq:
            stale = f"{BUDGETS_PREFIX}{spending.day}/{older:012d}"
            await loop.run_in_executor(None, self.store.delete, [stale])

    def _today(self) -> Spending:
        """The current day's spending: a new day starts with nothing spent."""
        day = today()
        if day != self.spending.day:
            self.spending, self.seq, self._saved_seq = Spending(day), 0, 0
        return self.spending

    async def _save_soon(self) -> None:
        """Save once charges stop coming for a moment, until what is saved is the newest."""
        while self._dirty:
            await asyncio.sleep(_FLUSH_DELAY_S)
            self._dirty = False
            try:
                await self.save()
            except Exception as exc:  # the next charge tries again; runs never fail for it
                self._dirty = True
                log.warning("budgets: cannot write today's spending to the store: %s", exc)
                return
