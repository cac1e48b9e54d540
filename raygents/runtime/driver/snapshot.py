"""Graph snapshots: the agent graph a run starts with, pickled for the actors that serve it.

A run's graph travels to the coordinator and its agent actors as cloudpickle bytes, and the
SHA-256 of those bytes is its fingerprint: a changed definition gets new actors, never the
old behaviour. The graph is written in the order of its agents' names, so that graphs of the
same agents started from different agents are one graph; each agent also gets the fingerprint
of its own definition (:mod:`~raygents.runtime.driver.definitions`), which decides whether its
older actors retire. Pickling costs most for functions and classes that travel by value (a script's
``__main__``, modules registered with ``register_pickle_by_value``): cloudpickle copies their
code and everything they reference at every start.

So each start first pickles a *key* of the graph, which writes everything the same way except
those functions and classes: for each, its identity and every attribute of it that can
change (a function's globals, defaults, closure and ``__dict__``; a class's bases and
namespace), with code objects, which never change, by identity. Two keys are equal only if
nothing that cloudpickle copies changed in between, and a key costs a third to a half of the
bytes (``docs/perf-log.md``). The snapshots of the last :data:`_KEPT` keys are
kept, each with the objects whose identities its key holds (so that no other object can take
such an identity meanwhile). A graph that the key cannot pickle is snapshotted in full, every
time.

The markers of the ``dataclasses`` module that a dataclass compares with ``is``
(``MISSING``, the default-factory marker) are pickled by reference in every process that
imports this module: copied with a class of ``__main__``, the copies would no longer mean "no
default" to ``dataclasses`` and pydantic, which would then reject the class in the actors.
"""

from __future__ import annotations

import abc
import copyreg
import dataclasses
import io
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ray import cloudpickle
from ray.cloudpickle import cloudpickle as _cloudpickle

from raygents.agents.agent import Agent, agent_graph
from raygents.agents.tools import FunctionTool
from raygents.core.annotations import resolve_annotations
from raygents.errors import UserError
from raygents.runtime.driver.canonical import canonical_digest
from raygents.runtime.driver.definitions import definitions

__all__ = ["known_agent", "snapshot"]

Snapshot = tuple[dict[str, Agent], bytes, str, dict[str, str]]
"""The graph by name, its pickle, its fingerprint and its agents' definition fingerprints."""

_KEPT = 32
_KNOWN = 4096  # functions and classes whose way of travelling is remembered, at most
_EMPTY_CELL = object()
_SINGLETON_TYPES = (type(None), type(Ellipsis), type(NotImplemented))
_BASE_GLOBALS = ("__package__", "__name__", "__path__", "__file__")

_cp: Any = _cloudpickle  # (the module's own functions, untyped)

_lock = threading.Lock()
_snapshots: OrderedDict[bytes, tuple[bytes, str, dict[str, str], list[Any]]] = OrderedDict()
_by_reference: dict[int, tuple[Any, bool]] = {}
_registry: frozenset[str] = frozenset()
_agents: weakref.WeakValueDictionary[str, Agent] = weakref.WeakValueDictionary()
"""The agents of the graphs this process started runs with, by name (the newest)."""


def _markers_by_reference() -> None:
    for name in ("MISSING", "_HAS_DEFAULT_FACTORY"):
        copyreg.pickle(type(getattr(dataclasses, name)), _global(name))


def _global(name: str) -> Callable[[object], str]:
    """A reduction to ``name``: pickle then writes the object as its module's global."""

    def reduce(_: object) -> str:
        return name

    return reduce


_markers_by_reference()


def snapshot(agent: Agent) -> Snapshot:
    """The graph ``agent`` starts, its cloudpickle bytes, its fingerprint and the fingerprints
    of its agents' definitions.

    Raises:
        UserError: two agents of the graph share a name, or the graph cannot be pickled.
    """
    graph = dict(sorted(agent_graph(agent).items()))
    _agents.update(graph)
    for each in graph.values():
        _resolve_types(each)
    try:
        key, kept = _key(graph)
    except Exception:  # (whatever the key cannot pickle, the full snapshot says why)
        return (graph, *_full(agent, graph))
    with _lock:
        found = _snapshots.get(key)
        if found is not None:
            _snapshots.move_to_end(key)
            return graph, found[0], found[1], found[2]
    blob, fp, defs = _full(agent, graph)
    with _lock:
        _snapshots[key] = (blob, fp, defs, kept)
        while len(_snapshots) > _KEPT:
            _snapshots.popitem(last=False)
    return graph, blob, fp, defs


def known_agent(name: str) -> Agent | None:
    """The agent named ``name`` in the newest graph this process started a run with (and
    still uses), if any: an attached run's result is typed by its ``output_type``."""
    return _agents.get(name)


def _resolve_types(agent: Agent) -> None:
    """Resolve the string annotations of the types the agent declares, here where they
    resolve (see :mod:`~raygents.core.annotations`)."""
    resolve_annotations(agent.output_type)
    for each in agent.tools:
        if isinstance(each, FunctionTool):
            for kind in each.argument_types():
                resolve_annotations(kind)


def _full(agent: Agent, graph: dict[str, Agent]) -> tuple[bytes, str, dict[str, str]]:
    try:
        blob: bytes = cloudpickle.dumps(graph)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise UserError(f"agent graph of {agent.name!r} cannot be pickled for Ray: {exc}") from None
    return blob, canonical_digest(blob)[:16], definitions(graph)


def _key(graph: dict[str, Agent]) -> tuple[bytes, list[Any]]:
    _check_registry()
    buffer = io.BytesIO()
    kept: list[Any] = []
    _KeyPickler(buffer, kept).dump(graph)
    return buffer.getvalue(), kept


def _check_registry() -> None:
    """Forget which objects travel by reference once the modules registered by value change."""
    global _registry
    registry = frozenset(_cp.list_registry_pickle_by_value())
    if registry != _registry:
        with _lock:
            _by_reference.clear()
            _registry = registry


def _travels_by_reference(obj: Any) -> bool:
    found = _by_reference.get(id(obj))
    if found is None or found[0] is not obj:
        if len(_by_reference) >= _KNOWN:  # (functions made afresh for every run)
            _by_reference.clear()
        found = _by_reference[id(obj)] = (obj, _cp._should_pickle_by_reference(obj))
    return found[1]


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _EMPTY_CELL


class _KeyPickler(_cp.Pickler):  # type: ignore[misc]
    """cloudpickle's pickler, but for the functions, classes and code objects that it copies by
    value: those it writes as their identity and what can change of them (see the module's
    docstring). Its bytes are a key, never loaded."""

    def __init__(self, file: io.BytesIO, kept: list[Any]) -> None:
        # A plain dict: the C pickler looks types up in cloudpickle's ChainMap in Python code.
        self.dispatch_table = dict(_cp.Pickler.dispatch_table)
        super().__init__(file)
        self.kept = kept

    def _identity(self, obj: Any) -> tuple[Any, ...]:
        self.kept.append(obj)
        return (id(obj),)

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is types.CodeType:
            return id, self._identity(obj)
        if kind is types.FunctionType:
            if _travels_by_reference(obj):
                return NotImplemented
            return id, self._identity(obj), _function_state(obj)
        if issubclass(kind, type):
            if obj in _SINGLETON_TYPES or obj in _cp._BUILTIN_TYPE_NAMES:
                return _cp._class_reduce(obj)
            if _travels_by_reference(obj):
                return NotImplemented
            return id, self._identity(obj), _class_state(obj)
        return NotImplemented


def _function_state(fn: types.FunctionType) -> tuple[Any, ...]:
    names = _cp._extract_code_globals(fn.__code__)
    scope = fn.__globals__
    closure = None if fn.__closure__ is None else tuple(_cell(c) for c in fn.__closure__)
    return (
        fn.__code__,
        fn.__name__,
        fn.__qualname__,
        fn.__module__,
        fn.__doc__,
        fn.__annotations__,
        fn.__defaults__,
        fn.__kwdefaults__,
        closure,
        {name: scope[name] for name in names if name in scope},
        tuple(scope.get(name) for name in _BASE_GLOBALS),
        fn.__dict__,
    )


def _class_state(cls: type) -> tuple[Any, ...]:
    namespace = {
        name: value
        for name, value in cls.__dict__.items()
        if name not in ("__weakref__", "__dict__", "_abc_impl")
    }
    if "_abc_impl" in cls.__dict__:  # the subclasses registered with it, as cloudpickle keeps
        namespace["_abc_impl"] = [ref() for ref in abc._get_dump(cls)[0]]  # type: ignore[attr-defined]
    return (type(cls), cls.__name__, cls.__qualname__, cls.__module__, cls.__bases__, namespace)
