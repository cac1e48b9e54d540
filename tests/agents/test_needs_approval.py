"""``tool(needs_approval=...)``: a bool, or a predicate asked per call in the agent actor."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import raygents as rg
from raygents.agents.tools import Tool, call_needs_approval
from raygents.core import loop
from raygents.core.context import RunContext
from raygents.core.envelope import RunState
from raygents.core.messages import ToolCall
from raygents.runtime.actor.toolbox import Toolbox
from raygents.runtime.actor.toolcalls import ToolCalls

CTX = RunContext(run_id="r", agent_name="a", context={"limit": 100})
seen: list[tuple[Any, ...]] = []


def over_limit(ctx: RunContext, arguments: dict[str, Any]) -> bool:
    seen.append((ctx.run_id, arguments))
    return bool(arguments["amount"] > ctx.context["limit"])


async def over_limit_async(ctx: RunContext, arguments: dict[str, Any], call_id: str) -> bool:
    seen.append((ctx.run_id, arguments, call_id))
    return bool(arguments["amount"] > ctx.context["limit"])


def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def needs(t: Tool, arguments: str, call_id: str = "c1") -> bool:
    return asyncio.run(call_needs_approval(t, CTX, ToolCall(call_id, t.name, arguments)))


@pytest.mark.parametrize("predicate", [over_limit, over_limit_async])
def test_a_predicate_decides_per_call_with_the_context_and_parsed_arguments(
    predicate: Any,
) -> None:
    seen.clear()
    t = rg.tool(name="pay", needs_approval=predicate)(pay)
    assert needs(t, '{"amount": 500}', "big") is True
    assert needs(t, '{"amount": 5}', "small") is False
    if predicate is over_limit:
        assert seen == [("r", {"amount": 500}), ("r", {"amount": 5})]
    else:
        assert seen == [("r", {"amount": 500}, "big"), ("r", {"amount": 5}, "small")]


@pytest.mark.parametrize("rule", [True, False])
def test_a_bool_is_used_as_it_is(rule: bool) -> None:
    t = rg.tool(needs_approval=rule)(pay)
    assert needs(t, '{"amount": 5}') is rule


def test_arguments_that_are_not_a_json_object_need_approval_without_asking() -> None:
    seen.clear()
    t = rg.tool(name="pay", needs_approval=over_limit)(pay)
    assert needs(t, "not json") is True
    assert needs(t, "[1, 2]") is True
    assert seen == []


@pytest.mark.parametrize("value", ["always", 1, None, [True], int])
def test_a_value_that_is_neither_a_bool_nor_a_function_is_refused_naming_the_tool(
    value: Any,
) -> None:
    with pytest.raises(rg.UserError, match=r"tool 'pay': needs_approval must be True, False"):
        rg.tool(name="pay", needs_approval=value)(pay)


def test_a_custom_tool_with_a_bad_needs_approval_is_refused_by_its_agent() -> None:
    class Wipe(Tool):
        name = "wipe"
        needs_approval = "yes"  # type: ignore[assignment]

    with pytest.raises(rg.UserError, match=r"tool 'wipe': needs_approval must be"):
        rg.Agent("a", tools=[Wipe()])


def test_a_predicate_returning_a_non_bool_or_raising_is_a_user_error_naming_the_tool() -> None:
    t = rg.tool(name="pay", needs_approval=lambda ctx, arguments: "yes")(pay)
    with pytest.raises(rg.UserError, match=r"tool 'pay': .* must return a bool, got 'yes'"):
        needs(t, '{"amount": 5}')

    def broken(ctx: RunContext, arguments: dict[str, Any]) -> bool:
        raise KeyError("limit")

    t = rg.tool(name="pay", needs_approval=broken)(pay)
    with pytest.raises(rg.UserError, match=r"tool 'pay': its needs_approval function raised"):
        needs(t, '{"amount": 5}')


def test_the_agent_actor_gates_only_the_calls_the_predicate_picks() -> None:
    t = rg.tool(name="pay", needs_approval=over_limit)(pay)
    agent = rg.Agent("a", tools=[t])
    toolbox = Toolbox(agent)
    asyncio.run(toolbox.resolve_tools())
    calls = ToolCalls(agent, toolbox, None, None, None, lambda run_id: None)  # type: ignore[arg-type]
    state = RunState(run_id="r", agent_name="a")
    batch = loop.RunTools(
        tuple(
            loop.Execute(ToolCall(f"c{amount}", "pay", json.dumps({"amount": amount})))
            for amount in (5, 500)
        )
    )
    gated = asyncio.run(calls.needs_approval(state, batch, {"limit": 100}))
    assert gated == frozenset({"c500"})


def test_a_call_decided_already_is_not_asked_about_again() -> None:
    seen.clear()
    t = rg.tool(name="pay", needs_approval=over_limit)(pay)
    agent = rg.Agent("a", tools=[t])
    toolbox = Toolbox(agent)
    asyncio.run(toolbox.resolve_tools())
    calls = ToolCalls(agent, toolbox, None, None, None, lambda run_id: None)  # type: ignore[arg-type]
    state = RunState(run_id="r", agent_name="a", approvals={"c500": rg.ApprovalDecision(True)})
    batch = loop.RunTools((loop.Execute(ToolCall("c500", "pay", '{"amount": 500}')),))
    assert asyncio.run(calls.needs_approval(state, batch, {"limit": 100})) == frozenset()
    assert seen == []
