"""Handoffs: their defaults, their options (checked where they are built), the prompt section.

No Ray needed.
"""

from __future__ import annotations

import pytest

import raygents as rg
from raygents.handoffs import handoff_section


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
