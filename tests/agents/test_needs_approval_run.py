"""A tool's ``needs_approval`` predicate, asked in the agent actor, parks only the calls it
picks; the others of the batch wait with them and all run once the picked ones are decided."""

from __future__ import annotations

from typing import Any

import pytest

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


async def over_limit(ctx: rg.RunContext, arguments: dict[str, Any]) -> bool:
    return bool(arguments["amount"] > ctx.context["limit"])


@rg.tool(num_cpus=0, needs_approval=over_limit)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def pay_twice(request: rg.ModelRequest) -> rg.ModelResponse:
    results = [m.text or "" for m in request.messages if m.role == "tool"]
    if results:
        return text(" | ".join(results))
    return calls(call("pay", {"amount": 5}, id="small"), call("pay", {"amount": 500}, id="big"))


def test_only_the_calls_the_predicate_picks_wait_for_approval() -> None:
    agent = rg.Agent("payer", tools=[pay], model=FunctionModel(pay_twice))
    with pytest.raises(rg.RunInterrupted) as info:
        rg.run(agent, "pay both", context={"limit": 100})
    assert [(p.call_id, p.tool_name) for p in info.value.pending] == [("big", "pay")]
    decided = {"big": True}
    handle = rg.resume(info.value.run_id, agent=agent, approvals=decided, context={"limit": 100})
    assert handle.result(timeout_s=60).final_output == "paid 5 | paid 500"


def test_under_the_limit_nothing_waits() -> None:
    agent = rg.Agent("payer_rich", tools=[pay], model=FunctionModel(pay_twice))
    result = rg.run(agent, "pay both", context={"limit": 1000})
    assert result.final_output == "paid 5 | paid 500"
