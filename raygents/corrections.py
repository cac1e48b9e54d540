"""Corrections for malformed model output, and the error once a run has used them all.

The loop answers malformed output (tool arguments that are not a JSON object) with a short
correction and lets the model try again. Each model reply that needs a correction counts once
against the run's ``max_output_retries`` (``RunState.output_retries``); a reply that needs one
past that fails the run with :class:`~raygents.errors.ModelOutputError`.
"""

from __future__ import annotations

from typing import Any

from raygents.errors import ModelOutputError
from raygents.schema import excerpt, parse_json

__all__ = [
    "DEFAULT_MAX_OUTPUT_RETRIES",
    "correction",
    "exhausted",
    "parse_arguments",
    "shown_excerpt",
]

DEFAULT_MAX_OUTPUT_RETRIES = 3
"""Corrections of malformed model output a run gets, unless its agents say otherwise."""
_SCANNED = 1024
"""Characters of the output looked at for credentials before an excerpt of it is shown."""


def parse_arguments(arguments: str) -> tuple[dict[str, Any] | None, str | None]:
    """A call's arguments as a JSON object and None, or None and what is wrong with them.

    Empty arguments are the empty object. What is wrong is a short phrase that never quotes
    the arguments themselves.
    """
    try:
        value = parse_json(arguments or "{}")
    except ValueError as exc:
        return None, f"arguments are not valid JSON ({excerpt(str(exc))})"
    if not isinstance(value, dict):
        return None, "arguments must be a JSON object"
    return value, None


def correction(tool: str, problem: str, arguments: str) -> str:
    """The tool message that tells the model its arguments were malformed (bounded in size)."""
    return f'Invalid parameters for tool "{tool}": {problem}: {excerpt(arguments)!r}'


def exhausted(
    *, run_id: str, agent: str, tool: str, problem: str, arguments: str, limit: int
) -> ModelOutputError:
    """The error of a run whose model sent malformed output once more than ``limit`` allows."""
    shown = shown_excerpt(arguments)
    return ModelOutputError(
        f"agent {agent!r} sent malformed output after {limit} correction"
        f"{'' if limit == 1 else 's'} (max_output_retries={limit}): tool {excerpt(tool, 64)!r}: "
        f"{problem}: {shown}; raise max_output_retries of the agent, or use a model that "
        "follows the tool schemas",
        run_id=run_id,
        agent_name=agent,
        tool_name=excerpt(tool, 64),
        excerpt=shown,
        max_output_retries=limit,
    )


def shown_excerpt(text: str) -> str:
    """``text`` cut short for an error message, or withheld when it looks like a credential.

    An error travels further than the conversation (logs, dashboards, the caller's process),
    so an excerpt holding an API key, a token or a password is not quoted.
    """
    from raygents.guardrails import SensitiveDataGuardrail  # only on this failure path

    cut = excerpt(text)
    kinds = SensitiveDataGuardrail.detect(text[:_SCANNED])  # (a credential the cut splits too)
    if kinds:
        return f"<{len(text)} characters withheld: they look like credentials ({', '.join(kinds)})>"
    return repr(cut)
