"""A hostile row at the rate limiter: a huge request's estimate holds the namespace back at
most a minute, and a call the provider refuses gives its tokens back (limiter in-process)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from raygents.core.messages import Message, ModelRequest, ModelResponse
from raygents.errors import ModelError
from raygents.models.ratelimit import Gate, Limiter, RateLimit, Schedule
from raygents.runtime.actor import gates, modelcall

TPM = 60_000
HOSTILE = "x" * (4 << 20)  # one 4 MiB row: about a million tokens at four characters a token


class _Remote:
    def __init__(self, method: Any) -> None:
        self._method = method

    def remote(self, *args: Any) -> Any:
        return self._method(*args)


class _LocalLimiter:
    """A :class:`Limiter` behind an actor handle's interface."""

    def __init__(self, limits: dict[str, RateLimit]) -> None:
        self.limiter = Limiter(limits)
        for name in ("reserve", "charge", "pause"):
            setattr(self, name, _Remote(getattr(self.limiter, name)))


class _Refusing:
    """A provider that refuses every request (too large), reporting no usage."""

    model = "gpt"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        raise ModelError("400: the request is too large for the model's context")


def _request(text: str) -> ModelRequest:
    return ModelRequest(agent_name="a", system="", messages=(Message("user", text),))


def _wait_after(schedule: Schedule) -> float:
    """How long a small call reserved now waits for its turn."""
    now = time.time()
    return schedule.reserve(now, 1) - now


def test_an_estimate_is_charged_at_most_a_minutes_budget() -> None:
    schedule = Schedule(RateLimit(tokens_per_minute=TPM))
    assert schedule.reserve(0.0, 1_000_000) == 0.0
    # the next call waits a minute at most, not the seventeen minutes a million tokens take
    assert schedule.reserve(0.0, 1) <= 60.0


def test_a_refused_call_gives_its_tokens_back(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> Schedule:
        local = _LocalLimiter({"gpt": RateLimit(tokens_per_minute=TPM)})
        gate = Gate(local, {"gpt": RateLimit(tokens_per_minute=TPM)})

        async def the_gate(namespace: str | None) -> Gate:
            return gate

        monkeypatch.setattr(gates, "gate", the_gate)
        with pytest.raises(ModelError, match="too large"):
            await modelcall.call_model(_Refusing(), "a", _request(HOSTILE), None, namespace="ns")
        await asyncio.sleep(0.2)  # the refund travels after a short window
        return local.limiter.schedules["gpt"]

    schedule = asyncio.run(main())
    assert _wait_after(schedule) < 1.0


def test_a_refund_never_gives_back_more_than_was_charged() -> None:
    async def main() -> tuple[float, Schedule]:
        local = _LocalLimiter({"gpt": RateLimit(tokens_per_minute=TPM)})
        gate = Gate(local, {"gpt": RateLimit(tokens_per_minute=TPM)})
        started = time.time()
        await gate.acquire("gpt", 1_000_000)
        gate.settle("gpt", 1_000_000, 0)
        await asyncio.sleep(0.2)
        return started, local.limiter.schedules["gpt"]

    started, schedule = asyncio.run(main())
    # the estimate charged was a minute's budget, so the refund is a minute's budget: the
    # schedule is back where it started (no credit of seventeen minutes for later calls)
    assert schedule._next_tokens == pytest.approx(started, abs=1.0)
