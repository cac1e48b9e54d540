"""Handoffs: their defaults, their options (checked where they are built), the prompt section.

No Ray needed.
"""

from __future__ import annotations

from typing import Any

import pytest

import raygents as rg
from raygents.agents.handoffs import handoff_section


def test_handoff_defaults_and_prompt_section() -> None:
    target = rg.Agent("Billing Support", handoff_description="Money things.")
    config = rg.handoff(target)
    assert config.tool_name == "transfer_to_billing_support"
    assert config.tool_description == "Transfer the conversation to Billing Support. Money things."
    section = handoff_section([config, rg.handoff(rg.Agent("x"), tool_description="")])
    assert section.startswith("\n\n## Handoffs\nYou can transfer the conversation")
    assert "- Billing Support: Transfer the conversation" in section
    assert section.endswith("- x: Transfer the conversation to x.")


def test_handoff_tool_names_a_model_refuses_are_refused() -> None:
    with pytest.raises(rg.UserError, match="handoff to 'b': tool name 'bad name!' is invalid"):
        rg.handoff(rg.Agent("b"), tool_name="bad name!")
    with pytest.raises(rg.UserError, match="handoff to 'b': tool name 3 is invalid"):
        rg.handoff(rg.Agent("b"), tool_name=3)  # type: ignore[arg-type]
    long, cjk = rg.Agent("x" * 60), rg.Agent("日本")
    for target in (long, cjk):
        with pytest.raises(rg.UserError, match="pass tool_name="):
            rg.handoff(target)
        with pytest.raises(rg.UserError, match="pass tool_name="):
            rg.Agent("a", handoffs=[target])
    assert rg.handoff(long, tool_name="to_long").tool_name == "to_long"
    direct = rg.Handoff(rg.Agent("b"), tool_name="to b", tool_description="")
    with pytest.raises(rg.UserError, match="tool name 'to b' is invalid"):
        rg.Agent("a", handoffs=[direct])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"input_filter": 3}, r"input_filter must be a function \(HandoffInputData\) ->"),
        ({"input_filter": rg.Message}, "input_filter must be a function .* got <class"),
        (
            {"on_handoff": 3},
            r"on_handoff must be a function \(ctx\) \(sync or async\) or None, got 3",
        ),
        ({"tool_description": 3}, r"tool_description must be a str( or None)?, got 3"),
        ({"tool_description": ["Bills."]}, r"tool_description must be .* got \['Bills.'\]"),
    ],
)
def test_bad_handoff_options_fail_fast(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(rg.UserError, match="handoff to 'b': " + match):
        rg.handoff(rg.Agent("b"), **kwargs)
    direct = rg.Handoff(rg.Agent("b"), **{"tool_name": "to_b", "tool_description": "", **kwargs})
    with pytest.raises(rg.UserError, match="handoff to 'b': " + match):
        rg.Agent("a", handoffs=[direct])


def test_a_handoff_built_directly_is_checked_by_its_agent() -> None:
    no_text = rg.Handoff(rg.Agent("b"), tool_name="to_b", tool_description=None)  # type: ignore[arg-type]
    with pytest.raises(
        rg.UserError, match="handoff to 'b': tool_description must be a str, got None"
    ):
        rg.Agent("a", handoffs=[no_text])
    no_agent = rg.Handoff("b", tool_name="to_b", tool_description="")  # type: ignore[arg-type]
    with pytest.raises(rg.UserError, match=r"Handoff\(...\) needs an Agent, got 'b'"):
        rg.Agent("a", handoffs=[no_agent])
    with pytest.raises(rg.UserError, match="handoff\\(\\) needs an Agent, got 'b'"):
        rg.handoff("b")  # type: ignore[arg-type]


def test_an_empty_handoff_tool_name_is_refused() -> None:
    with pytest.raises(rg.UserError, match="handoff to 'b': tool_name is empty: pass a name"):
        rg.handoff(rg.Agent("b"), tool_name="")
    assert rg.handoff(rg.Agent("b"), tool_name=None).tool_name == "transfer_to_b"


def test_good_handoff_options_are_kept() -> None:
    def keep_last(data: rg.HandoffInputData) -> list[rg.Message]:
        return list(data.new_items[-1:])

    async def noted(ctx: rg.RunContext) -> None:
        return None

    config = rg.handoff(
        rg.Agent("b"), tool_description="Bills.", input_filter=keep_last, on_handoff=noted
    )
    assert (config.tool_description, config.input_filter, config.on_handoff) == (
        "Bills.",
        keep_last,
        noted,
    )
    assert rg.Agent("a", handoffs=[config]).handoff_configs() == [config]
