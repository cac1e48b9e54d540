"""String annotations of user types, resolved in the process that defines the types.

Under ``from __future__ import annotations`` a dataclass's field types are strings, which
pydantic evaluates in the class's module when it first builds a schema for it. A class of a
script's ``__main__`` travels to agent actors by value, and their ``__main__`` is another
module: ``Literal``, or another class of the script, named in a string there is unknown, and
the type is "not fully defined". So each type an agent declares (its ``output_type``, its
tools' parameter types) has its string annotations replaced by the types they name, here,
where they resolve, before the type travels.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import typing
import weakref
from typing import Any

__all__ = ["resolve_annotations"]

_done: weakref.WeakSet[type] = weakref.WeakSet()
"""Classes whose annotations are resolved (or could not be: their schema says why later)."""
_LIBRARIES = frozenset({"builtins", "typing", "typing_extensions", "abc", "enum", "pydantic"})
"""Packages whose classes (bases of user types) are left alone: they travel by reference."""


def resolve_annotations(tp: Any) -> None:
    """Replace the string annotations of ``tp`` and of the classes it names (fields of
    dataclasses, TypedDicts, NamedTuples and pydantic models, arguments of generic types) by
    the types they name. Annotations that do not resolve stay as they are."""
    pending = [tp]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        pending.extend(typing.get_args(item))
        if isinstance(item, type) and _users(item):
            pending.extend(_resolved_fields(item))


def _users(cls: type) -> bool:
    return str(getattr(cls, "__module__", "")).partition(".")[0] not in _LIBRARIES


def _resolved_fields(cls: type) -> list[Any]:
    """Resolve the string annotations ``cls`` declares (its bases' too) in place; the types
    of its fields, to look into next."""
    own = inspect.get_annotations(cls)
    if not own:
        return []
    if cls in _done:
        return list(own.values())
    with contextlib.suppress(TypeError):  # (a class without weak references: done each time)
        _done.add(cls)
    if not any(isinstance(value, str | typing.ForwardRef) for value in own.values()):
        return [*own.values(), *cls.__bases__]
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # (a name that does not resolve here either: left for the schema)
        return [*cls.__bases__]
    resolved = {name: hints.get(name, value) for name, value in own.items()}
    cls.__annotations__ = resolved
    if dataclasses.is_dataclass(cls):
        for field in dataclasses.fields(cls):
            if isinstance(field.type, str | typing.ForwardRef) and field.name in hints:
                field.type = hints[field.name]
    return [*resolved.values(), *cls.__bases__]
