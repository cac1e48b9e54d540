"""Prompt templates shipped as package data, rendered with the run context."""

from __future__ import annotations

import pytest

import raygents as rg
from raygents.agents.templates import load_template, render, template_instructions


def test_the_shipped_template_renders_with_the_run_context() -> None:
    template = load_template("raygents.prompts", "analyst.txt.tmpl")
    assert "{{company}}" in template
    instructions = template_instructions(
        template,
        lambda ctx, agent: {"company": ctx.context["company"], "samples": 5, "topics": ["a", "b"]},
    )
    ctx = rg.RunContext(run_id="r", agent_name="analyst", context={"company": "Acme"})
    text = instructions(ctx, rg.Agent("analyst"))
    assert "analyst for Acme" in text and "samples=5" in text and "cover: a, b." in text
    assert "{{" not in text


def test_missing_values_and_templates_are_clear_errors() -> None:
    with pytest.raises(rg.UserError, match=r"\['who'\]"):
        render("hello {{ who }}", {})
    with pytest.raises(rg.UserError, match="not found"):
        load_template("raygents.prompts", "nope.txt.tmpl")
    assert render("{{a}}+{{ a }}", {"a": 1}) == "1+1"
