"""JSON schemas in OpenAI strict form, generated from Python types; validation against them, and
the parsing of a final output into its type."""

from __future__ import annotations

import copy
import functools
import inspect
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from raygents.errors import OutputValidationError, excerpt

__all__ = [
    "bounded_errors",
    "is_typed",
    "output_type_problem",
    "parse_json",
    "parse_output",
    "schema_errors",
    "strict_schema",
    "type_name",
    "type_schema",
    "unbounded_patterns",
]


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite a JSON schema for OpenAI strict mode.

    Every object lists all its properties as required (properties that were optional become
    nullable) and forbids additional properties. ``$defs`` references are inlined so the schema
    stands alone, unless a definition refers to itself (a recursive type, such as a tree
    node): then the definitions stay under ``$defs``, made strict too, and are referred to
    with ``$ref`` as strict mode allows; only a root that is a bare ``$ref`` is inlined (the
    root must be an object). The input is not changed.

    Raises:
        ValueError: the schema nests too deeply, or a ``$ref`` names no definition.
    """
    defs = schema.get("$defs", {})
    if not _recursive(defs):
        out: dict[str, Any] = _strict(copy.deepcopy(schema), defs, depth=0)
        out.pop("$defs", None)
        return out
    kept = {name: _strict(copy.deepcopy(d), defs, 0, inline=False) for name, d in defs.items()}
    root = {k: v for k, v in schema.items() if k != "$defs"}
    ref = root.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = _target(defs, ref)
        root = {**target, **{k: v for k, v in root.items() if k != "$ref"}}
    out = _strict(copy.deepcopy(root), defs, 0, inline=False)
    out["$defs"] = kept
    return out


def _target(defs: dict[str, Any], ref: str) -> dict[str, Any]:
    name = ref.removeprefix("#/$defs/")
    if name not in defs or not isinstance(defs[name], dict):
        raise ValueError(f"schema $ref {ref!r} names no definition under $defs")
    target: dict[str, Any] = defs[name]
    return target


def _recursive(defs: dict[str, Any]) -> bool:
    """Whether a definition of ``defs`` refers, directly or not, to itself."""
    refs = {name: set(_refs(d)) & set(defs) for name, d in defs.items()}
    for start in refs:
        seen: set[str] = set()
        todo = list(refs[start])
        while todo:
            name = todo.pop()
            if name == start:
                return True
            if name not in seen:
                seen.add(name)
                todo.extend(refs.get(name, ()))
    return False


def _refs(node: Any) -> list[str]:
    """The names of the definitions ``node`` refers to (``#/$defs/<name>``)."""
    found: list[str] = []
    todo = [node]
    while todo:
        item = todo.pop()
        if isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                found.append(ref.removeprefix("#/$defs/"))
            todo.extend(v for k, v in item.items() if k != "$ref")
    return found


def _strict(node: Any, defs: dict[str, Any], depth: int, *, inline: bool = True) -> Any:
    if depth > 64:
        raise ValueError("schema nests too deeply")
    if isinstance(node, list):
        return [_strict(item, defs, depth + 1, inline=inline) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if inline and isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = copy.deepcopy(_target(defs, ref))
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _strict({**target, **rest}, defs, depth + 1)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "default"):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {
                name: _strict(sub, defs, depth + 1, inline=inline) for name, sub in value.items()
            }
        else:
            out[key] = _strict(value, defs, depth + 1, inline=inline)
    node = out
    if node.get("type") == "object" or "properties" in node:
        props: dict[str, Any] = node.setdefault("properties", {})
        required = set(node.get("required", ()))
        for name, prop in props.items():
            if name not in required:
                props[name] = _nullable(prop)
        node["required"] = list(props)
        node.setdefault("additionalProperties", False)
    return node


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    if _accepts_null(prop):
        return prop
    kind = prop.get("type")
    enum = prop.get("enum")
    if isinstance(enum, list) and None not in enum:  # (an enum's values bind as well as its type)
        prop = {**prop, "enum": [*enum, None]}
    if isinstance(kind, str):
        return {**prop, "type": [kind, "null"]}
    if isinstance(kind, list):
        return {**prop, "type": [*kind, "null"]}
    return {"anyOf": [prop, {"type": "null"}]}


def _accepts_null(prop: dict[str, Any]) -> bool:
    kind = prop.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_accepts_null(alt) for alt in prop.get("anyOf", ()) if isinstance(alt, dict))


def type_schema(tp: Any) -> dict[str, Any]:
    """The strict JSON schema of a Python type (a pydantic model, dataclass, or typing form).

    Non-object types are wrapped as ``{"value": <type>}``, because strict mode needs an object
    at the top; :func:`type_is_wrapped` tells callers to unwrap.
    """
    schema = TypeAdapter(tp).json_schema()
    if not type_is_wrapped(schema):
        return strict_schema(schema)
    wrapped = {
        "type": "object",
        "properties": {"value": schema},
        "required": ["value"],
        "$defs": schema.pop("$defs", {}),
    }
    return strict_schema(wrapped)


def output_type_problem(tp: Any) -> str | None:
    """Why ``tp`` cannot be an agent's ``output_type`` (its strict schema cannot be made), or
    None when it can (``None`` and ``str``, plain text, can). Types seen before are answered
    from a cache: a run's start checks its agents."""
    if tp is None or tp is str:
        return None
    try:
        return _output_type_problem(tp)
    except TypeError:  # (not hashable: not kept)
        return _output_type_problem.__wrapped__(tp)


@functools.lru_cache(maxsize=256)
def _output_type_problem(tp: Any) -> str | None:
    try:
        type_schema(tp)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"{excerpt(repr(tp), 80)} cannot be made into a JSON schema: {excerpt(first)}"
    return None


def type_is_wrapped(schema: dict[str, Any]) -> bool:
    """Whether the raw schema of a type is not an object and must be wrapped for strict mode."""
    if "$ref" in schema:
        return False
    return schema.get("type") != "object"


def type_name(tp: Any) -> str:
    """A schema name for a type: its lowercased name, or ``"output"``."""
    name = getattr(tp, "__name__", None)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        return "output"
    return name.lower()


PATTERN_BUDGET_S = 0.25
"""How long the patterns of a schema may take, in all, to match one value checked against it.
A model's output is hostile input, and a pattern that backtracks (``^(a|aa)+$``) would hold
the checking process for hours on a few dozen characters: past the budget the value is
refused (:func:`schema_errors` says so), the process goes on."""

_budget = threading.local()
"""The monotonic time at which this thread's current check runs out of pattern time."""

_VALIDATORS: dict[int, tuple[dict[str, Any], Any]] = {}
"""Validators of recently used schemas, by the schema's id (the entry keeps it alive)."""
_MAX_VALIDATORS = 256


def schema_errors(schema: dict[str, Any], value: Any) -> list[tuple[str, str]]:
    """Validate ``value`` against ``schema``; return ``(json pointer path, message)`` pairs.

    A tool's schema is validated against at every call, and building its validator costs more
    than the validation: the validators of the last schemas used are kept.
    """
    cached = _VALIDATORS.get(id(schema))
    if cached is not None and cached[0] is schema:
        validator = cached[1]
    else:
        import referencing

        # An empty registry: a $ref outside the schema is an error, never fetched.
        validator = _validator_class()(schema, registry=referencing.Registry())
        if len(_VALIDATORS) >= _MAX_VALIDATORS:
            _VALIDATORS.pop(next(iter(_VALIDATORS)), None)
        _VALIDATORS[id(schema)] = (schema, validator)
    out = []
    _budget.ends = time.monotonic() + PATTERN_BUDGET_S
    try:
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    finally:
        del _budget.ends
    for err in errors:
        path = "/" + "/".join(str(p) for p in err.absolute_path)
        out.append((path, err.message))
    return out


@functools.cache
def _validator_class() -> Any:
    """JSON Schema 2020-12, with every pattern matched in bounded time (see
    :data:`PATTERN_BUDGET_S`): ``pattern``, ``patternProperties`` and ``additionalProperties``
    (which matches ``patternProperties``) match with the ``regex`` module and a timeout.
    (``unevaluatedProperties`` next to ``patternProperties`` would match with ``re``: tools
    with such parameters are refused, see :func:`unbounded_patterns`.)"""
    import jsonschema  # (on first use: Ray workers that only run tools never need it)

    keywords = {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    }
    validators: Any = jsonschema.validators  # (its extend() is untyped)
    return validators.extend(jsonschema.Draft202012Validator, keywords)


class _Spent(TimeoutError):
    """The check's pattern time ran out before this match: the match that used it up was
    refused already, and so is the value."""


def _search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``.

    Raises:
        TimeoutError: the check's pattern time ran out during this match (``_Spent``: before).
    """
    import regex

    left = getattr(_budget, "ends", time.monotonic() + PATTERN_BUDGET_S) - time.monotonic()
    if left <= 0:
        raise _Spent
    try:
        return regex.search(pattern, text, timeout=left) is not None
    except TimeoutError:
        if hasattr(_budget, "ends"):  # spent (its timer may stop a moment early): the
            _budget.ends = 0.0  # matches after this one are refused with it
        raise


def _too_slow(pattern: str, what: str = "the value") -> Any:
    from jsonschema.exceptions import ValidationError

    return ValidationError(
        f"{what} took more than {PATTERN_BUDGET_S} s to match the pattern "
        f"{excerpt(pattern, 80)!r}, and is refused: send a shorter or simpler one"
    )


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "string"):
        return
    try:
        if not _search(pattern, instance):
            yield ValidationError(f"{excerpt(instance)!r} does not match {excerpt(pattern, 80)!r}")
    except _Spent:
        return
    except TimeoutError:
        yield _too_slow(pattern)


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            try:
                matches = _search(pattern, key)
            except _Spent:
                return
            except TimeoutError:
                yield _too_slow(pattern, f"the property name {excerpt(key, 40)!r}")
                return
            if matches:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    named, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = []
    for key in instance:
        try:
            if key not in named and not any(_search(p, key) for p in patterns):
                extras.append(key)
        except _Spent:
            return
        except TimeoutError:
            yield ValidationError(
                f"the property name {excerpt(key, 40)!r} took more than {PATTERN_BUDGET_S} s "
                "to match the patterns of patternProperties, and is refused: send a shorter "
                "or simpler one"
            )
            return
    if validator.is_type(additional, "object"):
        for key in extras:
            yield from validator.descend(instance[key], additional, path=key)
    elif additional is False and extras:
        shown = ", ".join(repr(excerpt(key, 40)) for key in extras[:5])
        more = f" and {len(extras) - 5} more" if len(extras) > 5 else ""
        yield ValidationError(f"additional properties are not allowed ({shown}{more} unexpected)")


def unbounded_patterns(schema: Any) -> str | None:
    """Why checking values against ``schema`` could take unbounded time, or None.

    ``unevaluatedProperties`` next to ``patternProperties`` (anywhere in the schema) matches
    the patterns outside raygents' bounded matcher; and a pattern the ``regex`` module cannot
    compile could not be matched at all. Data keywords (``enum``, ``default``, ...) are walked
    too, as by :func:`raygents.agents.checks.parameters_problem`'s walk of ``$ref``.
    """
    import regex

    stack: list[Any] = [schema]
    unevaluated = with_patterns = False
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        unevaluated = unevaluated or "unevaluatedProperties" in node
        found = node.get("patternProperties")
        keys = list(found) if isinstance(found, dict) else []
        with_patterns = with_patterns or bool(keys)
        pattern = node.get("pattern")
        for text in [*keys, *([pattern] if isinstance(pattern, str) else [])]:
            try:
                regex.compile(text)
            except Exception as exc:
                return f"the pattern {excerpt(text, 80)!r} cannot be used: {excerpt(str(exc))}"
        stack.extend(node.values())
    if unevaluated and with_patterns:
        return (
            "unevaluatedProperties next to patternProperties is not supported (raygents "
            "matches patterns against a model's output in bounded time, and cannot there)"
        )
    return None


def parse_json(text: str) -> Any:
    """Parse strict JSON: no ``NaN`` or ``Infinity``, no repeated keys in an object.

    Raises:
        ValueError: the text is not such JSON, with a short reason; also for nesting too
            deep to parse.
    """
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_repeats)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {excerpt(key, 40)!r} appears more than once")
            seen.add(key)
    return out


def bounded_errors(schema: dict[str, Any], value: Any) -> list[tuple[str, str]]:
    """:func:`schema_errors` with each message cut to an excerpt (messages quote values)."""
    try:
        errors = schema_errors(schema, value)
    except RecursionError:
        return [("/", "value nested too deeply to validate")]
    except Exception as exc:  # a schema that cannot check anything (an unknown type, a bad regex)
        why = f"{type(exc).__name__}: {excerpt(str(exc))}"
        return [("/", f"the tool's schema cannot check arguments: {why}")]
    return [(excerpt(path), excerpt(msg)) for path, msg in errors]


def drop_defaulted_nulls(value: Any, schema: dict[str, Any]) -> Any:
    """Remove ``null`` values of optional properties, so their Python defaults apply.

    Strict mode makes every property required and optional ones nullable, so a model sends
    ``null`` where it means "use the default". ``schema`` is the type's own (non-strict) schema.
    """
    try:
        return _drop(value, schema, schema.get("$defs", {}), 0)
    except RecursionError:  # (a value nested deeper than Python recurses: validation says so)
        return value


def _drop(value: Any, node: dict[str, Any], defs: dict[str, Any], hops: int) -> Any:
    """``hops`` counts schema steps that do not go into the value (``$ref``, ``anyOf``): a
    recursive type's schema is followed as deep as the value goes, a loop of bare
    references is not followed for ever."""
    if hops > 64 or not isinstance(node, dict):
        return value
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _drop(value, defs.get(ref.split("/")[-1], {}), defs, hops + 1)
    for key in ("anyOf", "oneOf"):
        if key in node and value is not None:
            for alt in node[key]:
                if isinstance(alt, dict) and (
                    "$ref" in alt or alt.get("type") in ("object", "array")
                ):
                    return _drop(value, alt, defs, hops + 1)
    if isinstance(value, dict) and "properties" in node:
        required = set(node.get("required", ()))
        props = node["properties"]
        return {
            k: _drop(v, props.get(k, {}), defs, 0)
            for k, v in value.items()
            if not (v is None and k not in required and k in props)
        }
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_drop(v, node["items"], defs, 0) for v in value]
    return value


def is_typed(output_type: Any) -> bool:
    """Whether ``output_type`` asks for a parsed final output (not None and not ``str``)."""
    return output_type is not None and output_type is not str


def parse_tool_output(text: str, return_type: Any) -> Any:
    """A tool's result text as the value its function returned, typed as it declares
    (``return_type``): the text itself for an undeclared, ``str`` or ``Any`` return type, or
    when the text does not validate as the type (a tool's error, say)."""
    if return_type in (None, str, Any, inspect.Parameter.empty) or isinstance(return_type, str):
        return text
    try:
        return TypeAdapter(return_type).validate_json(text)
    except Exception:  # (not that type: the text is what the tool returned)
        return text


def parse_output(text: str, output_type: Any, *, run_id: str | None = None) -> Any:
    """Parse the structured output ``text`` into ``output_type`` (``text`` for an untyped
    agent).

    Raises:
        OutputValidationError: the text is not JSON, or does not match, with the failing paths.
    """
    if not is_typed(output_type):
        return text
    adapter: TypeAdapter[Any] = TypeAdapter(output_type)
    try:
        value = json.loads(text)
        raw = adapter.json_schema()
        if type_is_wrapped(raw):
            value = value["value"]
        return adapter.validate_python(drop_defaulted_nulls(value, raw))
    except PydanticValidationError as exc:
        errors = [("/" + "/".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
        raise OutputValidationError(
            f"output does not match {output_type!r}: {errors}", run_id=run_id, errors=errors
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise OutputValidationError(
            f"output is not valid JSON for {output_type!r}: {exc}",
            run_id=run_id,
            errors=[("/", str(exc))],
        ) from None
