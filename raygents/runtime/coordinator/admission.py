"""Admission control: how many runs each tenant may have in flight at once."""

from __future__ import annotations

from raygents.ids import DEFAULT_TENANT

__all__ = ["DEFAULT_TENANT", "Admission"]


class Admission:
    """Counts the runs in flight per tenant and refuses one past the limit.

    Each tenant has its own quota, so a tenant that fills its own cannot starve another. Only
    runs in flight are kept (a run id and its tenant), so memory follows the runs, not the
    number of refusals. A run admitted again (a resume or a re-dispatch of the same id) keeps
    its one slot.

    Args:
        limit: runs in flight per tenant; ``None`` admits every run.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self._tenants: dict[str, str] = {}
        """Run id -> tenant, for each admitted run in flight."""
        self._counts: dict[str, int] = {}

    def admit(self, run_id: str, tenant: str = DEFAULT_TENANT) -> bool:
        """Take a slot of ``tenant`` for ``run_id``; False if the tenant has none left (the
        caller refuses the run with ``TooManyRuns``)."""
        held = self._tenants.get(run_id)
        if held == tenant:
            return True
        if held is not None:  # (the same id again under another tenant moves its slot)
            self.release(run_id)
        if self.limit is not None and self._counts.get(tenant, 0) >= self.limit:
            return False
        self._tenants[run_id] = tenant
        self._counts[tenant] = self._counts.get(tenant, 0) + 1
        return True

    def release(self, run_id: str) -> None:
        """``run_id`` is no longer in flight (it ended, suspended or stopped); no-op if it
        holds no slot."""
        tenant = self._tenants.pop(run_id, None)
        if tenant is None:
            return
        left = self._counts[tenant] - 1
        if left:
            self._counts[tenant] = left
        else:
            del self._counts[tenant]

    def in_flight(self, tenant: str = DEFAULT_TENANT) -> int:
        """How many runs of ``tenant`` hold a slot."""
        return self._counts.get(tenant, 0)

    def holds(self, run_id: str) -> bool:
        """Whether ``run_id`` holds a slot."""
        return run_id in self._tenants
