"""Checks of what a tool is given where it is defined: its name, its execution options, its
``needs_approval`` and ``is_enabled``, and (for custom tools and MCP tools) its parameters'
JSON schema. Each refuses with a ``UserError`` naming the tool."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from raygents.core.context import IsEnabled, NeedsApproval
from raygents.core.doubt import OnRecovery
from raygents.core.schema import unbounded_patterns
from raygents.errors import UserError, excerpt

__all__ = [
    "TOOL_NAME",
    "ExecutionOptions",
    "check_is_enabled",
    "check_needs_approval",
    "check_on_recovery",
    "check_options",
    "check_resources",
    "check_tool_name",
    "is_amount",
    "is_function",
    "parameters_problem",
    "valid_tool_name",
]


@dataclass(frozen=True)
class ExecutionOptions:
    """Where and how a tool call runs."""

    num_cpus: float | None = None
    num_gpus: float | None = None
    resources: Mapping[str, float] | None = None
    max_retries: int | None = None
    timeout_s: float | None = None
    needs_approval: NeedsApproval = False
    remote: bool = True
    is_enabled: IsEnabled = True
    on_recovery: OnRecovery = "rerun"


TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a tool name may be: what model APIs accept (OpenAI's function names)."""


def check_options(owner: str, options: ExecutionOptions) -> None:
    """Check a tool's execution options, as Ray and the agent actor will use them.

    Raises:
        UserError: one is not what :func:`tool` takes, naming its owner (the tool) and it.
    """
    for field in ("num_cpus", "num_gpus"):
        value = getattr(options, field)
        if value is not None and not is_amount(value):
            raise UserError(
                f"{owner}: {field} must be a number >= 0, got {excerpt(repr(value), 80)}"
            )
    check_resources(owner, options.resources)
    retries = options.max_retries
    if retries is not None and (type(retries) is not int or retries < 0):
        raise UserError(
            f"{owner}: max_retries must be an int >= 0, got {excerpt(repr(retries), 80)}"
        )
    timeout = options.timeout_s
    if timeout is not None and not (is_amount(timeout) and timeout > 0):
        raise UserError(
            f"{owner}: timeout_s must be a positive number of seconds, "
            f"got {excerpt(repr(timeout), 80)}"
        )
    if not isinstance(options.remote, bool):
        raise UserError(
            f"{owner}: remote must be True or False, got {excerpt(repr(options.remote), 80)}"
        )
    check_is_enabled(owner, options.is_enabled)
    check_on_recovery(owner, options.on_recovery, retries)


def check_on_recovery(owner: str, on_recovery: Any, max_retries: int | None) -> None:
    """Check a tool's ``on_recovery`` (an ``"ask"`` tool's task is never retried by Ray: a
    retry would run a call whose first run may have had its effect).

    Raises:
        UserError: it is not ``"rerun"`` or ``"ask"``, or ``"ask"`` comes with retries.
    """
    if on_recovery not in ("rerun", "ask"):
        raise UserError(
            f'{owner}: on_recovery must be "rerun" or "ask", got {excerpt(repr(on_recovery), 80)}'
        )
    if on_recovery == "ask" and max_retries:
        raise UserError(
            f'{owner}: on_recovery="ask" runs a call at most once, so max_retries must be 0 '
            f"or None, got {max_retries!r}"
        )


def is_amount(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a finite number >= 0 (not a bool)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def check_resources(owner: str, resources: object) -> None:
    """Check a tool's ``resources``: None, or a mapping of names to amounts (not CPU or GPU).

    Raises:
        UserError: it is something else, naming its owner (the tool).
    """
    if resources is None:
        return
    if not isinstance(resources, Mapping):
        raise UserError(
            f"{owner}: resources must be a mapping of resource names to amounts, "
            f"got {excerpt(repr(resources), 80)}"
        )
    for key, amount in resources.items():
        if key in ("CPU", "GPU"):
            raise UserError(f"{owner}: resources: use num_cpus and num_gpus, not {key!r}")
        if not isinstance(key, str) or not is_amount(amount):
            raise UserError(
                f"{owner}: resources must map names (str) to numbers >= 0, "
                f"got {excerpt(repr(key), 80)}: {excerpt(repr(amount), 80)}"
            )


def is_function(value: object) -> bool:
    """Whether ``value`` can be called as a callback: a function, a method, a callable object
    (not a class, which would only build an instance)."""
    return callable(value) and not isinstance(value, type)


def check_needs_approval(name: str, value: object) -> None:
    """Check a tool's ``needs_approval``: a bool or a predicate.

    Raises:
        UserError: it is something else, naming the tool.
    """
    if isinstance(value, bool) or is_function(value):
        return
    raise UserError(
        f"tool {name!r}: needs_approval must be True, False or a function "
        f"(ctx, arguments) -> bool, got {excerpt(repr(value), 80)}"
    )


def check_is_enabled(owner: str, value: object) -> None:
    """Check an ``is_enabled``: a bool or a predicate.

    Raises:
        UserError: it is something else, naming its owner (a tool or a handoff).
    """
    if isinstance(value, bool) or is_function(value):
        return
    raise UserError(
        f"{owner}: is_enabled must be True, False or a function (ctx, agent) -> bool, "
        f"got {excerpt(repr(value), 80)}"
    )


def check_tool_name(name: str) -> None:
    if not valid_tool_name(name):
        shown = excerpt(str(name), 80)
        raise UserError(f"tool name {shown!r} is invalid: use 1-64 letters, digits, '_' or '-'")


def valid_tool_name(name: object) -> bool:
    """Whether ``name`` is a tool name models accept (:data:`TOOL_NAME`)."""
    return isinstance(name, str) and TOOL_NAME.fullmatch(name) is not None


def parameters_problem(schema: object) -> str | None:
    """Why ``schema`` cannot be a tool's parameters, or None when it can.

    The parameters must be a JSON schema of an object, valid under JSON Schema 2020-12 (the
    dialect arguments are checked with) and under the dialect its ``$schema`` names, with
    patterns that compile, and with every ``$ref`` pointing inside the schema and resolving:
    a reference to a URL is never fetched. Checking a model's arguments against such a schema
    raises nothing, however deep or odd the arguments, and takes bounded time (patterns are
    matched within :data:`~raygents.core.schema.PATTERN_BUDGET_S`; see
    :func:`~raygents.core.schema.unbounded_patterns` for what that refuses).
    """
    if not isinstance(schema, dict):
        return f"they are a {type(schema).__name__}, not a JSON schema object"
    kind = schema.get("type")
    if kind != "object":
        return f"their type is {excerpt(repr(kind), 80)}, not 'object'"
    try:
        return _schema_problem(schema)
    except RecursionError:
        return "the schema is nested too deeply"
    except Exception as exc:
        return f"the schema cannot be checked ({type(exc).__name__}: {excerpt(str(exc))})"


def _schema_problem(schema: dict[str, Any]) -> str | None:
    import jsonschema  # (on first use, as in raygents.core.schema)
    import referencing
    import referencing.exceptions
    import referencing.jsonschema
    from jsonschema.validators import validator_for

    default = jsonschema.Draft202012Validator
    dialects: dict[Any, None] = dict.fromkeys((default, validator_for(schema, default=default)))
    for dialect in dialects:
        try:
            dialect.check_schema(schema)
        except jsonschema.SchemaError as exc:
            where = "/" + "/".join(str(p) for p in exc.absolute_path)
            return f"{excerpt(exc.message)} (at {excerpt(where, 80)})"
    resource = referencing.jsonschema.DRAFT202012.create_resource(schema)
    resolver = referencing.Registry().with_resource("", resource).resolver()
    for ref in _refs(schema):
        if not ref.startswith("#"):
            return f"$ref {excerpt(ref, 80)!r} points outside the schema (it is never fetched)"
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            return f"$ref {excerpt(ref, 80)!r} does not resolve"
    return unbounded_patterns(schema)


def _refs(schema: dict[str, Any]) -> Iterator[str]:
    """The ``$ref`` and ``$dynamicRef`` strings of a schema (walked without recursion).

    Values of data keywords (``enum``, ``default``, ...) are walked too: telling them from
    subschemas would need the schema's structure, and a false find only leaves a tool out."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                    yield value
                else:
                    stack.append(value)
