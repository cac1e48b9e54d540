"""raygents.telemetry.metrics: what each record function records, with which labels, and that a
failing
metric is never a run's failure (through fake metric objects; the Ray shell scrapes real ones)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from raygents.core.envelope import Outcome, RunState
from raygents.core.messages import Usage
from raygents.errors import RaygentsError, RunCancelled
from raygents.models.ratelimit import Gate, RateLimit
from raygents.telemetry import metrics


class _Fake:
    """Records ``(name, value, tags)`` for every ``inc``/``observe``."""

    def __init__(self, name: str, points: list[tuple[str, float, dict[str, str]]]) -> None:
        self.name, self.points = name, points

    def inc(self, value: float, tags: dict[str, str]) -> None:
        self.points.append((self.name, value, tags))

    observe = inc


@pytest.fixture
def points(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, float, dict[str, str]]]]:
    got: list[tuple[str, float, dict[str, str]]] = []
    fakes = {name: _Fake(name, got) for name in metrics._SPECS}
    monkeypatch.setattr(metrics, "_made", fakes)
    yield got


def _outcome(kind: Any, error: RaygentsError | None = None) -> Outcome:
    return Outcome(kind, RunState(run_id="r1", agent_name="a"), error=error)


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        (_outcome("completed"), "completed"),
        (_outcome("failed", RaygentsError("x")), "failed"),
        (_outcome("failed", RunCancelled("run cancelled")), "cancelled"),
        (_outcome("suspended"), "suspended"),
        (_outcome("interrupted"), "awaiting_approval"),
    ],
)
def test_a_run_ends_with_its_status(points: list[Any], outcome: Outcome, status: str) -> None:
    metrics.run_ended("triage", outcome)
    assert points == [("runs_ended", 1.0, {"agent": "triage", "status": status})]


def test_a_handoff_is_no_end(points: list[Any]) -> None:
    metrics.run_ended("triage", _outcome("handoff"))
    assert points == []


def test_runs_started_turns_recoveries_suspends(points: list[Any]) -> None:
    metrics.run_started("a", resumed=False)
    metrics.run_started("a", resumed=True)
    metrics.turn("a")
    metrics.recovered("a")
    metrics.suspended("a")
    assert points == [
        ("runs_started", 1.0, {"agent": "a", "how": "new"}),
        ("runs_started", 1.0, {"agent": "a", "how": "resumed"}),
        ("turns", 1.0, {"agent": "a"}),
        ("recoveries", 1.0, {"agent": "a"}),
        ("suspends", 1.0, {"agent": "a"}),
    ]


def test_a_model_call_records_its_latency_and_tokens_by_direction(points: list[Any]) -> None:
    metrics.model_call("a", "gpt", 0.5, Usage(input_tokens=12, output_tokens=3))
    metrics.model_call("a", "gpt", 0.1, Usage(input_tokens=0, output_tokens=4))
    metrics.model_call("a", "gpt", 2.0, None)
    assert points == [
        ("model_call_seconds", 0.5, {"agent": "a", "model": "gpt", "outcome": "ok"}),
        ("tokens", 12, {"model": "gpt", "direction": "input"}),
        ("tokens", 3, {"model": "gpt", "direction": "output"}),
        ("model_call_seconds", 0.1, {"agent": "a", "model": "gpt", "outcome": "ok"}),
        ("tokens", 4, {"model": "gpt", "direction": "output"}),  # (a zero is no increment)
        ("model_call_seconds", 2.0, {"agent": "a", "model": "gpt", "outcome": "error"}),
    ]


def test_tool_calls_checkpoints_and_rate_limits(points: list[Any]) -> None:
    metrics.tool_call("a", "search", 0.25, error=True)
    metrics.checkpoint_bytes("a", 2048, full=False)
    metrics.checkpoint_written("a", 0.003)
    metrics.rate_limit_wait("gpt", 0.0)
    metrics.rate_limit_pause("gpt")
    assert points == [
        ("tool_call_seconds", 0.25, {"agent": "a", "tool": "search", "outcome": "error"}),
        ("checkpoint_bytes", 2048, {"agent": "a", "kind": "delta"}),
        ("checkpoint_write_seconds", 0.003, {"agent": "a"}),
        ("rate_limit_wait_seconds", 0.0, {"model": "gpt"}),
        ("rate_limit_pauses", 1.0, {"model": "gpt"}),
    ]


def test_a_gate_records_each_limited_calls_wait(points: list[Any]) -> None:
    class Limiter:
        class reserve:  # (a method handle, as Ray's: ``.remote``)
            @staticmethod
            async def remote(model: str, tokens: list[int]) -> list[float]:
                return [0.0] * len(tokens)

    async def main() -> None:
        gate = Gate(Limiter(), {"gpt": RateLimit(requests_per_minute=60)})
        assert await gate.acquire("gpt", 10) is True
        assert await gate.acquire("other", 10) is False

    asyncio.run(main())
    assert [(name, tags) for name, _, tags in points] == [
        ("rate_limit_wait_seconds", {"model": "gpt"})
    ]


def test_a_failing_metric_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def inc(self, value: float, tags: dict[str, str]) -> None:
            raise ValueError("no")

        observe = inc

    monkeypatch.setattr(metrics, "_made", {name: Broken() for name in metrics._SPECS})
    metrics.turn("a")
    metrics.tool_call("a", "t", 1.0, error=False)


def test_every_metric_is_made_once_outside_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_made", {})
    made = {name: metrics._metric(name) for name in metrics._SPECS}
    assert all(metrics._metric(name) is made[name] for name in metrics._SPECS)
    assert {m.info["name"] for m in made.values()} == {f"raygents_{n}" for n in metrics._SPECS}
    metrics.turn("a")  # (outside Ray a record goes nowhere, and fails nothing)
