"""Values passed between raygents' processes as bytes, pickled by raygents rather than by Ray.

Ray pickles the arguments and return values of its calls with cloudpickle, whose pickler runs
Python code for every object that is not a builtin, and serialises each argument of a call
separately. The standard pickler does raygents' own types at about half the CPU, and a call
with one ``bytes`` argument (or return value) costs Ray the least: about 0.15 ms less per tool
task submitted here than a tool context and its arguments as two arguments.
"""

from __future__ import annotations

import pickle
from typing import Any

from ray import cloudpickle

__all__ = ["dumps", "loads"]


def dumps(value: Any) -> bytes:
    """``value`` as bytes for :func:`loads`: the standard pickler, or cloudpickle for what it
    refuses (a class or function defined in ``__main__``, or made at run time)."""
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        blob: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)  # type: ignore[no-untyped-call]
        return blob


def loads(blob: bytes) -> Any:
    """The value :func:`dumps` made ``blob`` of."""
    return pickle.loads(blob)
