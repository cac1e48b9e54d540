"""Instructions from template files (the public path of :mod:`raygents.agents.templates`)."""

from raygents.agents.templates import load_template, render, template_instructions

__all__ = ["load_template", "render", "template_instructions"]
