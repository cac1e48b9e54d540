"""What the loop tells a model (or a run) about what the model sent: corrections for malformed
output and the error once a run has used them all, argument errors, structured output checked
against its schema, and tool call ids made unique.

The loop answers malformed output (tool arguments that are not a JSON object) with a short
correction and lets the model try again. Each model reply that needs a correction counts once
against the run's ``max_output_retries`` (``RunState.output_retries``); a reply that needs one
past that fails the run with :class:`~raygents.errors.ModelOutputError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from raygents.core.messages import Message, ToolSpec
from raygents.core.schema import bounded_errors, parse_json
from raygents.core.secrets import detect
from raygents.errors import ModelOutputError, OutputValidationError, excerpt

__all__ = [
    "DEFAULT_MAX_OUTPUT_RETRIES",
    "MAX_CALL_ID",
    "argument_error",
    "correction",
    "exhausted",
    "output_error",
    "parse_arguments",
    "schema_error",
    "shown_excerpt",
    "unique_call_ids",
]

DEFAULT_MAX_OUTPUT_RETRIES = 3
"""Corrections of malformed model output a run gets, unless its agents say otherwise."""
MAX_CALL_ID = 128
"""Longer call ids are replaced (they travel in every record, key and event of the call)."""
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
    cut = excerpt(text)
    kinds = detect(text[:_SCANNED])  # (a credential the cut splits too)
    if kinds:
        return f"<{len(text)} characters withheld: they look like credentials ({', '.join(kinds)})>"
    return repr(cut)


def argument_error(spec: ToolSpec, arguments: str) -> str | None:
    """A message for the model when ``arguments`` do not fit the tool's schema, else None."""
    value, malformed = parse_arguments(arguments)
    if malformed is not None:
        return correction(spec.name, malformed, arguments)
    return schema_error(spec, value or {})


def schema_error(spec: ToolSpec, value: dict[str, Any]) -> str | None:
    """A message for the model when an arguments object does not fit the tool's schema."""
    errors = bounded_errors(spec.parameters, value) if spec.parameters else []
    if not errors:
        return None
    detail = "; ".join(f"{path}: {msg}" for path, msg in errors[:5])
    return f'Invalid parameters for tool "{spec.name}": {detail}'


def unique_call_ids(message: Message, history: Sequence[Message] = ()) -> Message:
    """``message`` with each tool call id made unique within the run.

    A call whose id is empty, longer than :data:`MAX_CALL_ID`, or already taken (earlier in the
    message or by a call in ``history``) gets ``<id>~<n>``, the first free ``n`` from its
    position. Renaming (not rejecting) keeps every call the model asked for, and the renamed
    id is what the model sees answered, so each id it is shown has exactly one tool message.
    """
    if not message.tool_calls:
        return message
    taken = {c.id for m in history if m.tool_calls for c in m.tool_calls}
    ids = [c.id for c in message.tool_calls]
    if len(set(ids)) == len(ids) and taken.isdisjoint(ids) and all(_fit_id(i) for i in ids):
        return message
    sent = set(ids)
    out = []
    for i, c in enumerate(message.tool_calls):
        new = c.id
        if not _fit_id(new) or new in taken:
            base = (new[:64] if new.strip() else "") or "call"
            n = i + 1
            while f"{base}~{n}" in taken or f"{base}~{n}" in sent:
                n += 1
            new = f"{base}~{n}"
            c = c.model_copy(update={"id": new})
        taken.add(new)
        out.append(c)
    return message.model_copy(update={"tool_calls": tuple(out)})


def _fit_id(call_id: str) -> bool:
    return 0 < len(call_id) <= MAX_CALL_ID and bool(call_id.strip())


def output_error(run_id: str, schema: Mapping[str, Any], text: str) -> OutputValidationError | None:
    """Validate structured output text against ``{"name", "schema"}``; the error, or None."""
    try:
        value = parse_json(text)
    except ValueError as exc:
        reason = excerpt(str(exc))
        return OutputValidationError(
            f"output is not valid JSON ({reason}): {excerpt(text)!r}",
            run_id=run_id,
            errors=[("/", f"not valid JSON: {reason}")],
            output=text[:2000],
        )
    errors = bounded_errors(dict(schema["schema"]), value)
    if not errors:
        return None
    detail = "; ".join(f"{path}: {msg}" for path, msg in errors[:5])
    return OutputValidationError(
        f"output does not match schema {schema.get('name')!r}: {detail}",
        run_id=run_id,
        errors=errors,
        output=text[:2000],
    )
