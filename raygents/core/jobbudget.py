"""A job's budget: the tokens and dollars all of its items (batch items, dataset rows) may
spend together."""

from __future__ import annotations

from dataclasses import dataclass, field

from raygents.core.messages import Usage
from raygents.core.pricing import check_usd
from raygents.errors import UserError

__all__ = ["JobBudget"]


@dataclass
class JobBudget:
    """What a job's items may spend together (``job_max_tokens``, ``job_max_cost_usd``) and
    what they spent: the usage of every completed item, those of earlier runs of the job
    included (their ledger lines keep it), so that a job run again with the same budget
    stops where it stopped, and with a larger one goes on. A run that did not complete
    (failed, suspended) reports no usage, and is not counted."""

    max_tokens: int | None = None
    max_cost_usd: float | None = None
    spent: Usage = field(default_factory=Usage)

    def __post_init__(self) -> None:
        tokens = self.max_tokens
        if tokens is not None and (type(tokens) is not int or tokens < 1):
            raise UserError(f"job_max_tokens must be an int >= 1 (or None), got {tokens!r}")
        if self.max_cost_usd is not None:
            check_usd("job_max_cost_usd", self.max_cost_usd)
            if self.max_cost_usd == 0:
                raise UserError("job_max_cost_usd must be more than 0 dollars (or None), got 0")

    def add(self, usage: Usage | None) -> None:
        """Count what one completed item spent."""
        if usage is not None:
            self.spent = self.spent + usage

    def reached(self) -> str | None:
        """Why the job must stop (a budget it reached), or None."""
        used = self.spent.total_tokens
        if self.max_tokens is not None and used >= self.max_tokens:
            return f"job_max_tokens: the items used {used} tokens of {self.max_tokens}"
        cost = self.spent.cost_usd or 0.0
        if self.max_cost_usd is not None and cost >= self.max_cost_usd:
            return f"job_max_cost_usd: the items cost ${cost:.6f} of ${self.max_cost_usd:.6f}"
        return None
