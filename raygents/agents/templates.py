"""Prompt templates: ``.txt.tmpl`` files with ``{{name}}`` placeholders, rendered per run."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from raygents.errors import UserError

if TYPE_CHECKING:
    from raygents.agents.agent import Agent
    from raygents.core.context import RunContext

__all__ = ["load_template", "render", "template_instructions"]

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def load_template(package: str, name: str) -> str:
    """Read a template shipped as package data.

    Example: ``load_template("raygents.prompts", "analyst.txt.tmpl")``.
    """
    try:
        return resources.files(package).joinpath(name).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise UserError(f"prompt template {name!r} not found in package {package!r}") from exc


def render(template: str, values: Mapping[str, Any]) -> str:
    """Replace every ``{{name}}`` with ``values[name]``; a missing value is a :class:`UserError`."""
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(template)} - set(values))
    if missing:
        raise UserError(f"prompt template needs values for {missing!r}")
    return _PLACEHOLDER.sub(lambda m: _text(values[m.group(1)]), template)


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def template_instructions(
    template: str, values: Callable[[RunContext, Agent], Mapping[str, Any]]
) -> Callable[[RunContext, Agent], str]:
    """Dynamic instructions that render ``template`` with ``values(ctx, agent)`` each time the
    agent becomes active."""

    def instructions(ctx: RunContext, agent: Agent) -> str:
        return render(template, values(ctx, agent))

    return instructions
