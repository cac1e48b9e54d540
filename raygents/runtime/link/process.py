"""Settings of the processes raygents owns: the coordinator and the agent actors.

Python's cyclic garbage collector is tuned for short scripts. An agent actor holds hundreds of
concurrent runs whose objects live for seconds, so most of them outlive the young generations
and pile up in the oldest, and each full collection scans every object of the process: the
tens of thousands that Ray and the imports left behind at start as well. Fewer, later
collections cut that cost several times over (measured in ``docs/perf-log.md``).
"""

from __future__ import annotations

import gc

import ray

__all__ = ["GC_FIRST_THRESHOLD", "tune_collector"]

GC_FIRST_THRESHOLD = 20_000
"""Allocations of container objects (less deallocations) between two collections of the
youngest generation; Python's default is 700."""


def tune_collector() -> None:
    """Collect garbage less often, and never scan what the process holds by now.

    For the end of a long-lived actor's ``__init__``: :func:`gc.freeze` moves every object
    tracked so far (modules, Ray's state, the agent graph) out of all later collections. They
    are never collected, which costs nothing for objects that live as long as the process. A
    disabled collector is left as it is, and so is every process but a Ray actor's (a driver's,
    or a test's that builds the class itself); a first threshold already higher is kept.
    """
    if not gc.isenabled() or not ray.is_initialized():
        return
    if ray.get_runtime_context().get_actor_id() is None:
        return
    gc.freeze()
    first, second, third = gc.get_threshold()
    if first < GC_FIRST_THRESHOLD:
        gc.set_threshold(GC_FIRST_THRESHOLD, second, third)
