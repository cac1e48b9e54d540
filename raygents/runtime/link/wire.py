"""Values passed between raygents' processes as bytes, pickled by raygents rather than by Ray.

Ray pickles the arguments and return values of its calls with cloudpickle, whose pickler runs
Python code for every object that is not a builtin, and serialises each argument of a call
separately. The standard pickler does raygents' own types with less CPU, and a call with one
``bytes`` argument (or return value) costs Ray the least (see ``docs/perf-log.md``).

What the standard pickler would only name, for the other process to import, but that
cloudpickle copies by value goes through cloudpickle, as Ray would send it: classes and
functions of ``__main__`` and of modules registered with
``ray.cloudpickle.register_pickle_by_value``, and whatever the standard pickler refuses
(classes made at run time).
"""

from __future__ import annotations

import pickle
from typing import Any

from ray import cloudpickle

__all__ = ["dumps", "loads"]

_MAIN = b"__main__"


def dumps(value: Any) -> bytes:
    """``value`` as bytes for :func:`loads`."""
    try:
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return _cloudpickled(value)
    # A name in the stream may be data rather than a reference: cloudpickle then, needlessly.
    if _MAIN in blob or any(name in blob for name in _by_value()):
        return _cloudpickled(value)
    return blob


def loads(blob: bytes) -> Any:
    """The value :func:`dumps` made ``blob`` of."""
    return pickle.loads(blob)


def _cloudpickled(value: Any) -> bytes:
    blob: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)  # type: ignore[no-untyped-call]
    return blob


def _by_value() -> list[bytes]:
    """The modules registered to be pickled by value (their submodules too, by prefix)."""
    registry = cloudpickle.cloudpickle.list_registry_pickle_by_value()  # type: ignore[no-untyped-call]
    return [name.encode() for name in registry]
