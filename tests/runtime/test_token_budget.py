"""A run's token budget (``max_tokens=``): the run stops with ``UsageLimitExceeded`` once its
usage, its agent-as-tool children's included, reaches it; the failure is checkpointed."""

from __future__ import annotations

import pytest

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")

# (every fake model reply uses 15 tokens: 10 in, 5 out)


@rg.tool(remote=False)
def tick(n: int) -> str:
    """Count."""
    return f"tick {n}"


def _forever(request: rg.ModelRequest) -> rg.ModelResponse:
    done = sum(1 for m in request.messages if m.role == "tool")
    return calls(call("tick", {"n": done}, id=f"t{done}"))


def test_a_run_stops_when_its_usage_reaches_its_token_budget() -> None:
    agent = rg.Agent("spender", tools=[tick], model=FunctionModel(_forever), max_turns=100)
    handle = rg.start(agent, "go", max_tokens=100)
    with pytest.raises(rg.UsageLimitExceeded) as info:
        handle.result(timeout_s=60)
    error = info.value
    assert isinstance(error, rg.LimitExceeded)
    assert (error.limit, error.value, error.used) == ("max_tokens", 100, 105)
    assert "105 tokens of its budget of 100" in str(error)
    assert error.run_id == handle.run_id
    failed = {i.run_id: i for i in rg.runs(status="failed")}
    assert "max_tokens" in (failed[handle.run_id].last_error or "")


def test_children_spend_from_their_parents_token_budget() -> None:
    helper = rg.Agent("budget_helper", model=FunctionModel(lambda r: text("helped")))

    def parent_reply(request: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        return calls(call("helper", {"input": "help"}, id=f"h{done}"))

    parent = rg.Agent(
        "budget_parent",
        tools=[helper.as_tool("helper", "Ask the helper.")],
        model=FunctionModel(parent_reply),
    )
    with pytest.raises(rg.UsageLimitExceeded) as info:
        rg.run(parent, "go", max_tokens=40)
    # parent 15 + child 15, parent 15 (its second child gets no share of what is left)
    assert info.value.used == 45


@pytest.mark.parametrize("bad", [0, -5, 2.5, "100", True])
def test_a_bad_token_budget_is_a_user_error(bad: object) -> None:
    agent = rg.Agent("never_runs", model=FunctionModel(lambda r: text("x")))
    with pytest.raises(rg.UserError, match="max_tokens"):
        rg.start(agent, "go", max_tokens=bad)  # type: ignore[arg-type]
