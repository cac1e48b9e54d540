"""Cluster-wide model rate limits: the limits, their schedule, the limiter actor and the gate
each process passes through before a model call.

One :class:`Limiter` actor per namespace (named, created on first use by
:mod:`raygents.runtime.actor.gates`) holds a
:class:`Schedule` per model name: every call reserves a start time there, spaced so that the
requests and tokens per minute stay under the limit. An agent actor's :class:`Gate` sends the
reservations its runs make in one event-loop turn as one call, waits for the start times, and
reports what each call really used (tokens) and any pause a provider asked for (a 429 with
``Retry-After``), which then holds every process back.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raygents.errors import UserError
from raygents.telemetry import metrics

__all__ = [
    "Gate",
    "Limiter",
    "RateLimit",
    "Schedule",
    "check_limits",
    "listen",
    "report_pause",
    "retry_turn",
]

log = logging.getLogger("raygents")

_LATE_S = 0.02
"""A call that wakes this much past its turn takes another turn instead."""
_LATE_RETRIES = 50
"""Turns a call takes before it goes however late it wakes."""
_CHARGE_WINDOW_S = 0.05
"""How long a usage correction waits for others to travel with."""
_MAX_PAUSE_S = 600.0
"""A provider's ``Retry-After`` longer than this is taken as this long."""


@dataclass(frozen=True)
class RateLimit:
    """How fast every agent of the namespace may call one model, together.

    Args:
        requests_per_minute: calls per minute, or None for no limit on calls.
        tokens_per_minute: tokens (input and output) per minute, or None for no limit on
            tokens. A call is charged an estimate from its request size before it goes,
            corrected by its reported usage once it returns; a call that fails is given its
            estimate back (it reports no usage). An estimate above a minute's tokens is
            charged as a minute's tokens: one huge request (a hostile input, say) then holds
            the other calls back a minute at most, and the provider, which knows the
            model's context, is the one that refuses it.

    Raises:
        UserError: a limit is not a positive number, or neither is given.
    """

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None

    def __post_init__(self) -> None:
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"RateLimit {name} must be a number > 0 or None, got {value!r}")
            if not (math.isfinite(value) and value > 0):
                raise UserError(f"RateLimit {name} must be a number > 0 or None, got {value!r}")
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise UserError("RateLimit needs requests_per_minute=, tokens_per_minute= or both")


def check_limits(limits: object) -> dict[str, RateLimit]:
    """``init(rate_limits=)`` checked: a mapping of model names to :class:`RateLimit`.

    Raises:
        UserError: it is not such a mapping.
    """
    if not isinstance(limits, Mapping):
        raise UserError(
            f"rate_limits must map model names to RateLimit, got {type(limits).__name__}"
        )
    for name, limit in limits.items():
        if not isinstance(name, str) or not name:
            raise UserError(f"rate_limits keys must be model names, got {name!r}")
        if not isinstance(limit, RateLimit):
            raise UserError(
                f"rate_limits[{name!r}] must be a RateLimit, got {type(limit).__name__}"
            )
    return dict(limits)


def _charged(limit: RateLimit, tokens: int) -> int:
    """What a call estimated at ``tokens`` is charged under ``limit``: at most a minute's
    tokens, so that no estimate can hold every other call back for minutes."""
    tokens = max(tokens, 0)
    tpm = limit.tokens_per_minute
    return tokens if tpm is None else min(tokens, math.ceil(tpm))


class Schedule:
    """The start times of one model's calls under its limit: pure, time passed in.

    Calls are spaced evenly (a generic cell rate algorithm without burst): the next call may
    start once the previous one's share of the minute has passed, for requests and for
    tokens alike, and never during a pause.
    """

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self._next_request = 0.0
        self._next_tokens = 0.0
        self.paused_until = 0.0

    def reserve(self, now: float, tokens: int) -> float:
        """Reserve a call estimated at ``tokens``; returns when it may start."""
        start = max(now, self.paused_until, self._next_request, self._next_tokens)
        rpm, tpm = self.limit.requests_per_minute, self.limit.tokens_per_minute
        if rpm is not None:
            self._next_request = start + 60.0 / rpm
        if tpm is not None:
            self._next_tokens = start + _charged(self.limit, tokens) * 60.0 / tpm
        return start

    def charge(self, tokens: int) -> None:
        """Correct an estimate by ``tokens`` (negative: fewer were used than estimated)."""
        tpm = self.limit.tokens_per_minute
        if tpm is not None:
            self._next_tokens += tokens * 60.0 / tpm

    def pause(self, now: float, seconds: float) -> None:
        """No call starts for ``seconds`` from ``now`` (the provider asked for a pause)."""
        self.paused_until = max(self.paused_until, now + min(max(seconds, 0.0), _MAX_PAUSE_S))


class Limiter:
    """The namespace's schedules, one per limited model. Wrapped with ``ray.remote`` (an
    async actor) where it is created; its methods never await, so each runs whole."""

    def __init__(self, limits: Mapping[str, RateLimit]) -> None:
        self.schedules: dict[str, Schedule] = {}
        self._set(limits)

    def _set(self, limits: Mapping[str, RateLimit]) -> None:
        for name, limit in limits.items():
            known = self.schedules.get(name)
            if known is None or known.limit != limit:
                self.schedules[name] = Schedule(limit)

    async def configure(self, limits: Mapping[str, RateLimit]) -> None:
        """Take the namespace's limits (a limiter outlives the coordinator that set them)."""
        self._set(limits)

    async def reserve(self, model: str, tokens: list[int]) -> list[float]:
        """Start times (``time.time()``) for calls of ``model`` estimated at ``tokens`` each."""
        schedule = self.schedules.get(model)
        now = time.time()
        if schedule is None:
            return [now] * len(tokens)
        return [schedule.reserve(now, t) for t in tokens]

    async def charge(self, model: str, tokens: int) -> None:
        """Correct the token estimates of ``model``'s calls by ``tokens``."""
        schedule = self.schedules.get(model)
        if schedule is not None:
            schedule.charge(tokens)

    async def pause(self, model: str, seconds: float) -> None:
        """Hold every call of ``model`` back for ``seconds`` from now."""
        schedule = self.schedules.get(model)
        if schedule is not None:
            schedule.pause(time.time(), seconds)


class Gate:
    """One process's way through the limiter: reservations made in one event-loop turn go
    in one call per model, usage corrections and pauses without waiting for an answer.

    Args:
        limiter: the limiter's actor handle (or anything with the same methods).
        limits: the namespace's limits; calls of other models pass at once.
    """

    def __init__(self, limiter: Any, limits: Mapping[str, RateLimit]) -> None:
        self.limiter = limiter
        self.limits = dict(limits)
        self._waiting: dict[str, list[tuple[int, asyncio.Future[float]]]] = {}
        self._paused_until: dict[str, float] = {}
        self._owed: dict[str, int] = {}
        self._sends: set[asyncio.Future[Any]] = set()

    async def acquire(self, model: str, tokens: int) -> bool:
        """Wait until a call of ``model`` estimated at ``tokens`` may start; False (at once)
        when the model has no limit. Cancelling the wait gives up the call's turn."""
        limit = self.limits.get(model)
        if limit is None:
            return False
        started = time.monotonic()
        await self._take_turn(model, _charged(limit, tokens))
        metrics.rate_limit_wait(model, time.monotonic() - started)
        return True

    async def _take_turn(self, model: str, tokens: int) -> None:
        """Wait for a start time at the limiter, and until then (and any pause after it)."""
        for _ in range(_LATE_RETRIES):
            start = await self._reserve_one(model, tokens)
            while True:  # (a pause learnt meanwhile holds back calls already granted)
                due = max(start, self._paused_until.get(model, 0.0))
                delay = due - time.time()
                if delay <= 0:
                    break
                await asyncio.sleep(delay)
            if -delay <= _LATE_S:
                return
            # The event loop was busy past the turn: going now would crowd the calls of
            # other processes that start on time, so this call takes a later turn.

    def _reserve_one(self, model: str, tokens: int) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.setdefault(model, [])
        if not waiting:
            asyncio.get_running_loop().call_soon(self._flush, model)
        waiting.append((tokens, future))
        return future

    def _flush(self, model: str) -> None:
        batch = self._waiting.pop(model, [])
        if batch:
            self._send(self._reserve(model, batch))

    async def _reserve(self, model: str, batch: list[tuple[int, asyncio.Future[float]]]) -> None:
        try:
            starts = await self.limiter.reserve.remote(model, [t for t, _ in batch])
        except Exception as exc:  # the call goes unlimited rather than fail its run
            log.warning("rate limiter unavailable for model %r: %s", model, exc)
            starts = [0.0] * len(batch)
        for (_, future), start in zip(batch, starts, strict=True):
            if not future.done():
                future.set_result(start)

    def settle(self, model: str, estimate: int, used: int) -> None:
        """A call estimated at ``estimate`` tokens used ``used``: correct the schedule (the
        corrections of a short window go in one call). The estimate counts as it was charged,
        a minute's tokens at most, so a refund never gives back more than was taken."""
        limit = self.limits.get(model)
        if limit is None:
            return
        estimate = _charged(limit, estimate)
        if used == estimate:
            return
        if not self._owed:
            asyncio.get_running_loop().call_later(_CHARGE_WINDOW_S, self._charge)
        self._owed[model] = self._owed.get(model, 0) + used - estimate

    def _charge(self) -> None:
        owed, self._owed = self._owed, {}
        for model, tokens in owed.items():
            if tokens:
                self._send(self.limiter.charge.remote(model, tokens))

    def pause(self, model: str, seconds: float) -> None:
        """The provider asked for a pause: hold this process back, and tell the limiter."""
        if model not in self.limits:
            return
        until = time.time() + min(max(seconds, 0.0), _MAX_PAUSE_S)
        self._paused_until[model] = max(self._paused_until.get(model, 0.0), until)
        self._send(self.limiter.pause.remote(model, seconds))

    def _send(self, call: Any) -> None:
        task = asyncio.ensure_future(_quietly(call))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)


async def _quietly(call: Any) -> None:
    try:
        await call
    except Exception as exc:  # a lost correction or pause is logged, never a run's failure
        log.warning("rate limiter call failed: %s", exc)


_listening: list[Gate] = []
"""This process's gates that hear of the pauses its models are asked for."""


def listen(gate: Gate) -> None:
    """Pass the pauses this process's models are asked for (:func:`report_pause`) to ``gate``."""
    _listening.append(gate)


def report_pause(model: str, seconds: float) -> None:
    """A provider answered ``model``'s call with 429 and ``Retry-After: seconds``: every
    process using the model backs off (a no-op where no gate limits it)."""
    metrics.rate_limit_pause(model)
    for gate in list(_listening):
        gate.pause(model, seconds)


async def retry_turn(model: str, tokens: int) -> None:
    """A call of ``model`` is about to be sent again (the provider client's own retry, after a
    429 or a transient error): it waits for a turn at the limiter as a new call does, so that
    retries never go past the limit (a no-op where no gate limits the model)."""
    for gate in list(_listening):
        await gate.acquire(model, tokens)
