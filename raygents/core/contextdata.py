"""The run context as plain data: what checkpoints keep of it, and the writes made to it.

A run's context is one value that the caller, tools, hooks and callbacks share. Every process
that runs part of the run holds its own copy, so the run's state carries the context as plain
data (:class:`StoredContext`: JSON-like values, and the name of the context's class when it is
a dataclass or a pydantic model); each process revives its copy from it, and what it writes goes
back into the state as plain data, or, for a tool task, as a list of writes (:func:`diff`)
applied where the run is (:func:`apply`). Nothing here pickles: a context that is not plain
data is refused (:func:`store`), unless the caller marks it :class:`NotDurable`.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

from raygents.errors import UserError, excerpt

__all__ = [
    "NotDurable",
    "StoredContext",
    "apply",
    "assign",
    "capture",
    "diff",
    "equal",
    "revive",
    "store",
    "to_plain",
]

Write = list[Any]
"""One write: ``["set", path, value]``, ``["del", path]`` or ``["add", path, items]`` (items
appended to a list), ``path`` a list of dict keys from the context's root."""

_INT64 = (-(2**63), 2**64 - 1)


class NotDurable:
    """A run context kept out of checkpoints, for a value that is not plain data (a client,
    a lock, a connection pool).

    ``run(agent, input, context=NotDurable(value))`` gives ``value`` to tools, hooks and
    callbacks as ``ctx.context``. It travels to each process by pickle, as it is; it is not
    kept in the run's checkpoints (``resume`` needs it passed again), and the writes of tool
    tasks to it are not carried back. Writes made in an agent's actor (hooks, callbacks,
    ``remote=False`` tools) are seen by what runs after them in that actor.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"NotDurable({self.value!r})"


class StoredContext(BaseModel):
    """A durable run context as the run's state (and its checkpoints) hold it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data: Any = None
    """The context as plain data: None, bools, numbers, strings, lists and dicts with string
    keys."""
    type: str | None = None
    """``"module:qualname"`` of the context's class when it is a dataclass or a pydantic
    model (revived into one where that class is known); None for plain data."""


def store(value: Any) -> StoredContext | None:
    """``value`` as the run's state keeps it; None for no context.

    Raises:
        UserError: ``value`` is not plain data, nor a dataclass or pydantic model whose fields
            are, or it does not come back the same from its plain form.
    """
    if value is None:
        return None
    if isinstance(value, NotDurable):
        raise UserError("a NotDurable context has no stored form")
    data = to_plain(value)
    cls = type(value)
    return StoredContext(data=data, type=type_name(cls) if _is_model(cls) else None)


def capture(stored: StoredContext | None, live: Any) -> StoredContext | None:
    """``stored`` with the data of ``live`` (the context object as a process left it): the
    same object when nothing changed; None stays None (no context, or a ``NotDurable`` one).

    Raises:
        UserError: ``live`` is no longer plain data (see :func:`to_plain`).
    """
    if stored is None:
        return None
    if stored.type is None and equal(live, stored.data):  # (then it is plain data: no copy)
        return stored
    data = to_plain(live, check=False)
    if equal(data, stored.data):
        return stored
    return stored.model_copy(update={"data": data})


def to_plain(value: Any, *, check: bool = True) -> Any:
    """``value`` as plain data (see :class:`StoredContext`); ``check``: also that a model
    comes back the same from it (done when a run starts; a step of the run skips it).

    Raises:
        UserError: it is not plain data, nor a dataclass or pydantic model of plain fields.
    """
    cls = type(value)
    if not _is_model(cls):
        problem = _not_plain(value, "context")
        if problem is not None:
            raise _refused(value, problem)
        return _copy(value)
    try:
        adapter = _adapter(cls)
        data = adapter.dump_python(value, mode="json")
        back = adapter.dump_python(adapter.validate_python(data), mode="json") if check else data
    except Exception as exc:
        raise _refused(value, f"{type(exc).__name__}: {excerpt(str(exc), 300)}") from None
    problem = _not_plain(data, "context")
    if problem is None and not equal(back, data):
        problem = "it does not come back the same from its plain form"
    if problem is not None:
        raise _refused(value, problem)
    return data


def revive(stored: StoredContext | None, like: Any = None) -> Any:
    """The context object of ``stored``: an instance of ``like``'s class when ``like`` (a
    copy the process holds, maybe older) is a dataclass or pydantic model, else of the class
    ``stored`` names when this process has it; else the plain data (a copy)."""
    if stored is None:
        return like
    cls = type(like) if like is not None and _is_model(type(like)) else _find(stored.type)
    if cls is None:
        return _copy(stored.data)
    if like is not None and type(like) is cls and _same(like, stored.data):
        return like
    return _adapter(cls).validate_python(stored.data)


def assign(target: Any, value: Any) -> Any:
    """Make ``target`` hold what ``value`` holds, in place where its type allows (a dict, a
    list, a dataclass or pydantic model not frozen, of one type); returns the object that
    holds it now (``target``, else ``value``)."""
    if target is value:
        return target
    if isinstance(target, dict) and isinstance(value, dict):
        target.clear()
        target.update(value)
        return target
    if isinstance(target, list) and isinstance(value, list):
        target[:] = value
        return target
    if type(target) is type(value) and _is_model(type(value)) and not _frozen(target):
        try:
            vars(target).update(vars(value))
        except TypeError:  # (slots)
            return value
        if isinstance(value, BaseModel):
            object.__setattr__(target, "__pydantic_fields_set__", value.model_fields_set)
        return target
    return value


def diff(before: Any, after: Any, path: tuple[str, ...] = ()) -> list[Write]:
    """The writes that make plain data ``before`` into ``after``: per dict key, appends to a
    list that grew, else the new value."""
    if isinstance(before, dict) and isinstance(after, dict):
        writes: list[Write] = []
        for key, value in after.items():
            if key in before:
                writes.extend(diff(before[key], value, (*path, key)))
            else:
                writes.append(["set", [*path, key], value])
        writes.extend(["del", [*path, key]] for key in before if key not in after)
        return writes
    if (
        isinstance(before, list)
        and isinstance(after, list)
        and len(after) > len(before)
        and equal(after[: len(before)], before)
    ):
        return [["add", list(path), after[len(before) :]]]
    return [] if equal(before, after) else [["set", list(path), after]]


def _copy(data: Any) -> Any:
    """A copy of plain data (its dicts and lists new; ``copy.deepcopy`` is several times
    slower)."""
    if type(data) is dict:
        return {k: _copy(v) for k, v in data.items()}
    if type(data) is list:
        return [_copy(v) for v in data]
    return data


def equal(a: Any, b: Any) -> bool:
    """Whether plain data ``a`` and ``b`` are the same, types included (``1`` is not
    ``True``, nor ``1.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def apply(data: Any, writes: list[Write]) -> Any:
    """``data`` with ``writes`` applied in order (``data`` itself is not changed)."""
    for write in writes:
        kind, path = write[0], list(write[1])
        data = _apply(data, kind, path, write[2] if len(write) > 2 else None)
    return data


def _apply(data: Any, kind: str, path: list[str], value: Any) -> Any:
    if not path:
        if kind == "add":
            return [*data, *value] if isinstance(data, list) else list(value)
        return _copy(value) if kind == "set" else None
    head, rest = path[0], path[1:]
    node = dict(data) if isinstance(data, dict) else {}  # (a set that replaced it stands)
    if kind == "del" and not rest:
        node.pop(head, None)
        return node
    node[head] = _apply(node.get(head), kind, rest, value)
    return node


def type_name(cls: type) -> str:
    """Where a class is found: ``"module:qualname"``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _find(name: str | None) -> type | None:
    """The class ``name`` names, where this process has its module (already imported, or
    importable); None otherwise."""
    if not name or ":" not in name:
        return None
    module_name, _, qualname = name.partition(":")
    module = sys.modules.get(module_name)
    if module is None and module_name != "__main__":
        try:
            module = importlib.import_module(module_name)
        except Exception:
            return None
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found if isinstance(found, type) and _is_model(found) else None


def _same(value: Any, data: Any) -> bool:
    try:
        return equal(_adapter(type(value)).dump_python(value, mode="json"), data)
    except Exception:
        return False


def _is_model(cls: type) -> bool:
    return dataclasses.is_dataclass(cls) or (isinstance(cls, type) and issubclass(cls, BaseModel))


def _frozen(value: Any) -> bool:
    if isinstance(value, BaseModel):
        return bool(value.model_config.get("frozen"))
    params = getattr(type(value), "__dataclass_params__", None)
    return bool(getattr(params, "frozen", False))


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def _not_plain(value: Any, where: str, depth: int = 0) -> str | None:
    """Why ``value`` is not plain data (naming the first place that is not), or None."""
    if depth > 64:
        return f"{where} is nested more than 64 levels deep"
    if value is None or isinstance(value, (bool, str)):
        return None
    if isinstance(value, int):
        if type(value) is not int or not _INT64[0] <= value <= _INT64[1]:
            return f"{where} is an integer out of the 64-bit range"
        return None
    if type(value) is float:
        return None
    if type(value) is list:
        items = [(item, f"{where}[{i}]") for i, item in enumerate(value)]
    elif type(value) is dict:
        bad = next((k for k in value if not isinstance(k, str)), None)
        if bad is not None:
            return f"{where} has a key that is not a string: {excerpt(repr(bad), 60)}"
        items = [(item, f"{where}[{key!r}]") for key, item in value.items()]
    else:
        return f"{where} is a {type(value).__name__}"
    for item, place in items:
        problem = _not_plain(item, place, depth + 1)
        if problem is not None:
            return problem
    return None


def _refused(value: Any, problem: str) -> UserError:
    return UserError(
        f"the run context ({type(value).__name__}) cannot be stored as plain data: {problem}. "
        "A run keeps its context in its checkpoints: use None, bools, numbers, strings, lists "
        "and dicts with string keys, or a dataclass or pydantic model whose fields are such "
        "values; or pass context=raygents.NotDurable(value) to keep it out of checkpoints "
        "(resume then needs it again, and tool tasks' writes to it are not carried back)"
    )
