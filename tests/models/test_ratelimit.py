"""Rate limits without Ray: the limits' checks, the schedule, the limiter and the gate (with
the limiter called in-process), and how a call is estimated and a 429's pause read."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import raygents as rg
from raygents.core.messages import Message, ModelRequest, ModelSettingsData
from raygents.models.openai import _retry_after
from raygents.models.ratelimit import Gate, Limiter, RateLimit, Schedule, check_limits
from raygents.runtime.actor.modelcall import estimate_tokens, model_name


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"requests_per_minute": 0}, {"requests_per_minute": -1}, {"tokens_per_minute": True},
     {"requests_per_minute": "60"}, {"tokens_per_minute": float("inf")}],
)  # fmt: skip
def test_a_bad_rate_limit_is_a_user_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(rg.UserError, match="RateLimit"):
        RateLimit(**kwargs)


@pytest.mark.parametrize("limits", [["gpt"], {"": RateLimit(60)}, {"gpt": 60}, {1: RateLimit(60)}])
def test_bad_rate_limits_are_a_user_error(limits: Any) -> None:
    with pytest.raises(rg.UserError, match="rate_limits"):
        check_limits(limits)


def test_rate_limit_is_exported() -> None:
    assert rg.RateLimit is RateLimit
    assert check_limits({"gpt": RateLimit(60)}) == {"gpt": RateLimit(60)}


@pytest.mark.parametrize(
    ("limit", "tokens", "starts"),
    [
        (RateLimit(requests_per_minute=60), [5, 5, 5], [0.0, 1.0, 2.0]),
        (RateLimit(requests_per_minute=3000), [1, 1, 1], [0.0, 0.02, 0.04]),
        (RateLimit(tokens_per_minute=600), [10, 20, 5], [0.0, 1.0, 3.0]),
        (RateLimit(60, tokens_per_minute=60), [0, 3, 0], [0.0, 1.0, 4.0]),
    ],
)
def test_calls_are_spaced_by_their_share_of_the_minute(
    limit: RateLimit, tokens: list[int], starts: list[float]
) -> None:
    schedule = Schedule(limit)
    got = [schedule.reserve(100.0, t) - 100.0 for t in tokens]
    assert got == pytest.approx(starts)


def test_an_idle_schedule_starts_a_call_at_once() -> None:
    schedule = Schedule(RateLimit(requests_per_minute=60))
    assert schedule.reserve(10.0, 1) == 10.0
    assert schedule.reserve(50.0, 1) == 50.0  # no credit saved up while idle, no debt either


def test_usage_corrects_the_token_estimate() -> None:
    schedule = Schedule(RateLimit(tokens_per_minute=60))
    assert schedule.reserve(0.0, 1) == 0.0
    schedule.charge(4)  # it used 5, not 1
    assert schedule.reserve(0.0, 1) == pytest.approx(5.0)
    schedule.charge(-1)  # used 0, not 1
    assert schedule.reserve(0.0, 1) == pytest.approx(5.0)


def test_a_pause_holds_every_call_back() -> None:
    schedule = Schedule(RateLimit(requests_per_minute=6000))
    schedule.pause(0.0, 2.5)
    assert schedule.reserve(1.0, 1) == 2.5
    schedule.pause(1.0, 0.5)  # a shorter pause does not shorten the one under way
    assert schedule.reserve(1.0, 1) == pytest.approx(2.51)
    schedule.pause(0.0, 10_000)  # an absurd Retry-After is capped
    assert schedule.paused_until == 600.0


class _Remote:
    """A limiter method called in-process, as an actor handle's ``.remote`` would be."""

    def __init__(self, method: Any, calls: list[str]) -> None:
        self._method, self._calls = method, calls

    def remote(self, *args: Any) -> Any:
        self._calls.append(self._method.__name__)
        return self._method(*args)


class _LocalLimiter:
    """A :class:`Limiter` behind an actor handle's interface, counting the calls made."""

    def __init__(self, limits: dict[str, RateLimit]) -> None:
        self.limiter = Limiter(limits)
        self.limits = limits
        self.calls: list[str] = []
        for name in ("reserve", "charge", "pause"):
            setattr(self, name, _Remote(getattr(self.limiter, name), self.calls))


def test_the_calls_of_one_loop_turn_reserve_in_one_limiter_call() -> None:
    async def main() -> list[bool]:
        local = _LocalLimiter({"gpt": RateLimit(requests_per_minute=60_000)})
        gate = Gate(local, local.limits)
        got = await asyncio.gather(*(gate.acquire("gpt", 10) for _ in range(20)))
        assert local.calls == ["reserve"]
        return list(got)

    assert asyncio.run(main()) == [True] * 20


def test_a_model_without_a_limit_passes_without_a_limiter_call() -> None:
    async def main() -> None:
        local = _LocalLimiter({"gpt": RateLimit(requests_per_minute=60)})
        gate = Gate(local, local.limits)
        assert await gate.acquire("other", 10) is False
        gate.settle("other", 10, 50)
        gate.pause("other", 1.0)
        assert local.calls == []

    asyncio.run(main())


def test_a_pause_learnt_in_a_process_holds_back_calls_already_granted() -> None:
    async def main() -> None:
        local = _LocalLimiter({"gpt": RateLimit(requests_per_minute=60_000)})
        gate = Gate(local, local.limits)
        gate.pause("gpt", 0.2)
        await asyncio.sleep(0)
        assert local.calls == ["pause"]
        assert local.limiter.schedules["gpt"].paused_until > time.time()
        waiting = asyncio.ensure_future(gate.acquire("gpt", 1))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        waiting.cancel()  # a wait can be given up (a run suspended or cancelled meanwhile)
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())


def test_usage_corrections_travel_together_and_only_when_they_differ() -> None:
    async def main() -> None:
        local = _LocalLimiter({"gpt": RateLimit(tokens_per_minute=60_000)})
        gate = Gate(local, local.limits)
        gate.settle("gpt", 10, 10)
        gate.settle("gpt", 10, 30)
        gate.settle("gpt", 10, 5)
        await asyncio.sleep(0.1)
        assert local.calls == ["charge"]  # one for the window
        assert local.limiter.schedules["gpt"]._next_tokens == pytest.approx(15 * 60 / 60_000)

    asyncio.run(main())


def test_a_call_is_estimated_from_its_request_size() -> None:
    request = ModelRequest(
        agent_name="a",
        system="x" * 40,
        messages=(Message("user", "y" * 80),),
        settings=ModelSettingsData(max_tokens=100),
    )
    assert estimate_tokens(request) == 10 + 20 + 1 + 100
    assert model_name(rg.OpenAIChatModel("gpt-4o-mini", base_url="http://h/v1")) == "gpt-4o-mini"
    assert model_name(object()) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),
        ({"retry-after": "0"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
    ],
)
def test_a_429s_pause_is_read_from_its_headers(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert _retry_after(headers) == seconds


def test_a_driver_asking_for_other_rate_limits_does_not_join_silently() -> None:
    from raygents.runtime.driver import startup
    from raygents.runtime.link.settings import Settings

    theirs = Settings(rate_limits={"m": RateLimit(requests_per_minute=60)})
    other = Settings(rate_limits={"m": RateLimit(requests_per_minute=600)})
    error = startup.settings_mismatch("ns", other, theirs)
    assert isinstance(error, rg.UserError) and "rate_limits" in str(error)
    assert startup.settings_mismatch("ns", Settings(), theirs) is None  # (takes theirs)
    same = Settings(rate_limits={"m": RateLimit(requests_per_minute=60)})
    assert startup.settings_mismatch("ns", same, theirs) is None


def test_the_openai_clients_own_retry_waits_for_a_turn_at_the_limiter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from openai_server import FakeOpenAIServer, Reply

    from raygents.models import ratelimit

    async def main(url: str) -> list[str]:
        local = _LocalLimiter({"gpt": RateLimit(requests_per_minute=60_000)})
        monkeypatch.setattr(ratelimit, "_listening", [Gate(local, local.limits)])
        model = rg.OpenAIChatModel("gpt", base_url=url, max_retries=1)
        request = ModelRequest(agent_name="a", system="", messages=[Message("user", "hi")])
        response = await model.respond(request)
        assert response.message.text == "ok"
        return local.calls

    replies = [Reply.failure(429, "slow down", retry_after_ms="10"), Reply(text="ok")]
    with FakeOpenAIServer(replies) as server:
        calls = asyncio.run(main(server.url))
        assert len(server.requests) == 2
    # the 429 paused the model at the limiter, and the retry took a turn there
    assert calls == ["pause", "reserve"]
