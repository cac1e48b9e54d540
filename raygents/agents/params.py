"""A function's parameters as a tool's arguments: their strict JSON schema, the pydantic model
that parses them, and their descriptions from the docstring."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, create_model

from raygents.core.schema import strict_schema

__all__ = [
    "ArgFields",
    "args_model",
    "function_name",
    "function_parameters",
    "parse_docstring",
    "parsed_arguments",
    "signature",
]

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-argument descriptions.

    The description is the text before the first section header (``Args:``, ``Returns:``...).
    """
    if not doc:
        return "", {}
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in inspect.cleandoc(doc).splitlines():
        if _SECTION.match(line) and not line.startswith((" ", "\t")):
            section = "args" if _ARGS_HEADER.match(line) else "other"
            current = None
            continue
        if section is None:
            summary.append(line)
        elif section == "args":
            m = _ARG_LINE.match(line)
            if m and len(line) - len(line.lstrip()) <= 4:
                current = m.group(1).lstrip("*")
                args[current] = m.group(3).strip()
            elif current and line.strip():
                args[current] = f"{args[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), args


ArgFields = dict[str, tuple[Any, Any, "str | None"]]
"""A function's arguments as :func:`args_model` takes them: name to (annotation, default or
``...``, description)."""


def args_model(name: str, fields: ArgFields) -> type[BaseModel]:
    """The pydantic model that parses arguments described by ``fields``.

    Its fields are named ``arg0``, ``arg1``... with the arguments' names as aliases (what its
    schema shows and what it parses): an argument may then be named like an attribute of
    pydantic's ``BaseModel`` (``schema``, ``json``, ``model_config``...) or start with ``_``.
    :func:`parsed_arguments` gives the parsed values by the arguments' names.
    """
    from pydantic import Field

    specs = {
        f"arg{i}": (a, Field(default, alias=n, description=doc))
        for i, (n, (a, default, doc)) in enumerate(fields.items())
    }
    return create_model(name, **specs)  # type: ignore[call-overload,no-any-return]


def parsed_arguments(parsed: BaseModel) -> dict[str, Any]:
    """The values of an :func:`args_model` instance, by the arguments' names."""
    fields = type(parsed).model_fields
    return {field.alias or key: getattr(parsed, key) for key, field in fields.items()}


def function_parameters(
    fn: Callable[..., Any], *, skip_first: bool
) -> tuple[dict[str, Any], type[BaseModel], ArgFields, dict[str, str]]:
    """Build the strict parameters schema and a pydantic model for a function's arguments.

    Args:
        fn: the function.
        skip_first: leave out the first parameter (the tool context).

    Returns:
        The strict schema, the pydantic model that parses arguments (``args_model(f"{name}_args",
        fields)``), its fields, and the description taken from the docstring (under key ``""``)
        with the per-argument descriptions.
    """
    name = function_name(fn) or "tool"
    description, arg_docs = parse_docstring(_unwrapped(fn).__doc__)
    fields: ArgFields = {}
    params = list(signature(fn).parameters.values())[1 if skip_first else 0 :]
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {name!r} cannot take *args or **kwargs ({p.name!r})")
        annotation = Any if p.annotation is inspect.Parameter.empty else p.annotation
        if isinstance(annotation, str):
            raise TypeError(
                f"cannot resolve the annotation {annotation!r} of parameter {p.name!r}: a type "
                "named in a string annotation (or under `from __future__ import annotations`) "
                "must be importable from the function's module, not local to a function"
            )
        default = ... if p.default is inspect.Parameter.empty else p.default
        annotation, default, described = _explicit_field(annotation, default)
        fields[p.name] = (annotation, default, described or arg_docs.get(p.name))
    model = args_model(f"{name}_args", fields)
    schema = strict_schema(model.model_json_schema())
    for name, prop in schema.get("properties", {}).items():
        if prop.get("description") is None:
            prop.pop("description", None)
        _ = name
    return schema, model, fields, {"": description, **arg_docs}


def signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``fn``'s signature, with string annotations evaluated where they can be (those that
    cannot stay strings). Partials and callable objects give the parameters a call takes."""
    try:
        return inspect.signature(fn, eval_str=True)
    except Exception:  # (one that cannot: evaluate the others one by one)
        pass
    sig = inspect.signature(fn)
    target = _unwrapped(fn)
    namespace = getattr(target, "__globals__", None)
    if namespace is None:
        call = vars(type(target)).get("__call__")  # (a callable object: its method's module)
        namespace = getattr(call, "__globals__", {})
    params = [
        p.replace(annotation=_evaluated(p.annotation, namespace)) for p in sig.parameters.values()
    ]
    return sig.replace(parameters=params)


def _evaluated(annotation: Any, namespace: dict[str, Any]) -> Any:
    """A string annotation evaluated in ``namespace`` (as ``inspect.signature(eval_str=True)``
    does), or left a string when it cannot be."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, namespace)  # (as eval_str=True does)
    except Exception:
        return annotation


def function_name(fn: Callable[..., Any]) -> str | None:
    """``fn``'s ``__name__`` (a partial's function's), or None when it has none."""
    name = getattr(_unwrapped(fn), "__name__", None)
    return name if isinstance(name, str) else None


def _unwrapped(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function a (nested) ``functools.partial`` calls, or ``fn``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def _explicit_field(annotation: Any, default: Any) -> tuple[Any, Any, str | None]:
    """An argument's annotation, default and description as its signature states them:
    ``Annotated[T, "text"]`` and ``Field(description=...)`` (as annotation metadata or as the
    default) describe it, ahead of the docstring; a ``Field`` default gives its default and
    keeps its constraints."""
    from pydantic.fields import FieldInfo
    from pydantic_core import PydanticUndefined

    description: str | None = None
    if get_origin(annotation) is Annotated:
        for item in get_args(annotation)[1:]:
            if isinstance(item, str):
                description = item
            elif isinstance(item, FieldInfo) and item.description:
                description = item.description
    if isinstance(default, FieldInfo):
        info = default
        description = info.description or description
        default = ... if info.default is PydanticUndefined else info.default
        if info.default_factory is not None:
            default = info.default_factory()  # type: ignore[call-arg]
        if info.metadata:  # (its constraints: ge, max_length...)
            annotation = Annotated[(annotation, *info.metadata)]
    return annotation, default, description
