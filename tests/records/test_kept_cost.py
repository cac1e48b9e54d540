"""A completed run's marker keeps its cost in dollars with its usage; a cost that is not a
finite number >= 0 (or None) makes the marker's usage unreadable, as a bad count does."""

from __future__ import annotations

from typing import Any

import pytest

from raygents.cli.output import usage_text
from raygents.core.messages import Message, Usage
from raygents.records import codec, keptresult
from raygents.records.keptresult import done_marker
from raygents.records.runinfo import RunInfo, RunSummary


def _marker(usage: Usage) -> dict[str, Any]:
    result = RunSummary(
        final_output="ok",
        messages=(Message("user", "go"), Message("assistant", "ok")),
        usage=usage,
        turns=1,
        agent_name="a",
        input_count=1,
    )
    done = done_marker(RunInfo("r1", "completed", "a", 1, seq=1), 1, result)
    marker: dict[str, Any] = keptresult.read_marker(
        codec.encode(done), key=None, run_id="r1", source="k"
    )
    return marker


@pytest.mark.parametrize("cost", [None, 0.0, 0.0125])
def test_a_marker_keeps_the_runs_cost(cost: float | None) -> None:
    usage = Usage(12, 5, requests=2, cost_usd=cost)
    marker = _marker(usage)
    kept = keptresult.summary(marker)
    assert kept is not None and kept["usage"] == usage
    assert keptresult.usage_of(marker) == usage.model_dump(mode="json")


@pytest.mark.parametrize("cost", [float("nan"), -1.0, "0.5", True, float("inf")])
def test_a_marker_with_a_hostile_cost_has_no_usage(cost: object) -> None:
    marker = _marker(Usage(1, 1))
    marker["usage"]["cost_usd"] = cost
    assert keptresult.usage_of(marker) is None


def test_the_cli_shows_a_cost_where_one_is_known() -> None:
    assert usage_text({"requests": 1, "input_tokens": 10, "output_tokens": 5}).endswith("tokens")
    shown = usage_text({"requests": 1, "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.01})
    assert shown.endswith("15 tokens, $0.010000")
