"""Prices of model tokens, and what a model call's usage costs at a price."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from raygents.errors import UserError

__all__ = ["Price", "check_prices", "check_usd"]


class Price(BaseModel):
    """What a model charges, in US dollars per million tokens.

    Cached input tokens (those the provider served from its prompt cache) cost
    ``cached_input_per_mtok``; None prices them as other input tokens.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None

    def __init__(
        self,
        input_per_mtok: float,
        output_per_mtok: float,
        cached_input_per_mtok: float | None = None,
        **data: Any,
    ) -> None:
        BaseModel.__init__(
            self,
            input_per_mtok=input_per_mtok,
            output_per_mtok=output_per_mtok,
            cached_input_per_mtok=cached_input_per_mtok,
            **data,
        )

    @field_validator("input_per_mtok", "output_per_mtok", "cached_input_per_mtok", mode="before")
    @classmethod
    def _amount(cls, value: object, info: ValidationInfo) -> object:
        """Every way a price is made (its constructor, a record read back) is checked."""
        if value is not None or info.field_name != "cached_input_per_mtok":
            check_usd(f"Price {info.field_name}", value)
        return value

    def cost(self, input_tokens: int, output_tokens: int, cached_input_tokens: int = 0) -> float:
        """What a call with these token counts costs, in US dollars. ``cached_input_tokens``
        are part of ``input_tokens``, as providers count them."""
        cached = min(max(cached_input_tokens, 0), input_tokens)
        cached_rate = self.input_per_mtok
        if self.cached_input_per_mtok is not None:
            cached_rate = self.cached_input_per_mtok
        return (
            (input_tokens - cached) * self.input_per_mtok
            + cached * cached_rate
            + output_tokens * self.output_per_mtok
        ) / 1_000_000


def check_usd(name: str, value: object) -> None:
    """Refuse an amount of dollars that is not a finite number >= 0 (a bool neither).

    Raises:
        UserError: it is not.
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise UserError(f"{name} must be a finite number of US dollars >= 0, got {value!r}")


def check_prices(prices: object) -> dict[str, Price]:
    """``init(prices=)`` checked: a mapping of model names to :class:`Price`.

    Raises:
        UserError: it is not such a mapping.
    """
    if not isinstance(prices, Mapping):
        raise UserError(f"prices must map model names to Price, got {type(prices).__name__}")
    for name, price in prices.items():
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"prices keys must be model names, got {name!r}")
        if not isinstance(price, Price):
            raise UserError(f"prices[{name!r}] must be a Price, got {type(price).__name__}")
    return dict(prices)
