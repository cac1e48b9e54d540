"""raygents namespaces of the test session: the session's own, and those a test module keeps up
for its tests (:class:`Namespaces`), switched between without removing them."""

from __future__ import annotations

import os
import pathlib
from typing import Any, ClassVar

IDLE_ACTOR_S = 4.0
"""How long an agent actor of the session's raygents stays with no run (the default keeps it 10
minutes). Tests define agents by the hundred; an actor idle for a quarter of this serves the
next agent that has none instead of a new process starting (one start costs about 0.9 CPU-s
here), and an idle Ray actor still takes 0.7% of a core (its main thread wakes every 10 ms to
check for signals). ``tests/agents tests/core tests/hostile`` used 118.3 and 118.6 CPU-s at 4 s
against 129.6 and 127.3 at 8 s (docs/perf-log.md, findings 72, 75 and 77)."""


def session_raygents() -> None:
    """Bring up the session's raygents on the session's Ray instance (a no-op when it is up;
    one a module keeps, see :class:`Namespaces`, is left up for its next test)."""
    import raygents
    from raygents.runtime.driver import client

    runtime = client._runtime
    if runtime is not None and runtime.namespace in Namespaces.kept:
        park()
    raygents.init(store="memory://", idle_actor_s=IDLE_ACTOR_S)


def park() -> None:
    """Shut this process's raygents down, leaving its namespace's coordinator and agent actors
    up: the next ``init`` of that namespace finds them by name, as a second driver would. A
    handle to the coordinator stays in :attr:`Namespaces.parked`: Ray removes an actor that is
    not detached once no handle to it is left, named or not."""
    import raygents
    from raygents.runtime.driver import client

    runtime = client._runtime
    if runtime is not None:
        runtime.created = False  # (only the runtime that created it removes it)
        Namespaces.parked[runtime.namespace] = runtime.coordinator
    raygents.shutdown()


class Namespaces:
    """Namespaces of raygents a test module keeps up for its tests, one per set of ``init``
    arguments (its tests' runs share the namespace's coordinator, store and idle agent
    actors, instead of a coordinator and actors each), removed after the module. A test
    takes one with the :func:`module_raygents` fixture (:func:`rt` then leaves it up)."""

    kept: ClassVar[set[str]] = set()
    """The namespaces kept up in this process."""
    parked: ClassVar[dict[str, Any]] = {}
    """A handle to the coordinator of each namespace kept up while another one is in use."""

    def __init__(self, prefix: str, root: pathlib.Path) -> None:
        self.prefix = prefix
        self.root = root
        self.made: dict[str, str] = {}

    def file_store(self, name: str = "ckpt", **settings: Any) -> str:
        """:meth:`use` of namespace ``name`` over a ``file://`` store of its own (in a folder
        of the module's); returns the store's URL."""
        url = f"file://{self.root / name}"
        self.use(name, store=url, **settings)
        return url

    def use(self, name: str, **settings: Any) -> str:
        """raygents up on this module's namespace ``name`` (made with ``settings`` on first
        use; a kept namespace that was up is left up); returns the namespace."""
        import raygents
        from raygents.runtime.driver import client

        namespace = self.made.setdefault(name, f"{self.prefix}-{name}-{os.urandom(3).hex()}")
        runtime = client._runtime
        if runtime is not None and runtime.namespace == namespace:
            return namespace
        if runtime is not None and runtime.namespace in Namespaces.kept:
            park()
        else:
            raygents.shutdown()  # (the session's, as a test with its own namespace does)
        raygents.init(namespace=namespace, idle_actor_s=IDLE_ACTOR_S, **settings)
        Namespaces.kept.add(namespace)
        return namespace

    def close(self) -> None:
        """Remove the module's namespaces: their agent actors and coordinators."""
        import contextlib

        import ray

        import raygents
        from raygents.runtime.driver import client
        from raygents.runtime.link.coordinator_client import COORDINATOR_NAME

        coordinators = []  # (a handle each before the last other one goes: see park)
        for namespace in self.made.values():
            with contextlib.suppress(ValueError):  # (a test removed it)
                coordinators.append(ray.get_actor(COORDINATOR_NAME, namespace=namespace))
        runtime = client._runtime
        if runtime is not None and runtime.namespace in self.made.values():
            raygents.shutdown()
        for namespace in self.made.values():
            Namespaces.kept.discard(namespace)
            Namespaces.parked.pop(namespace, None)
        for coordinator in coordinators:
            with contextlib.suppress(ray.exceptions.RayActorError):  # (shutdown removed it)
                ray.get(coordinator.stop_agents.remote(), timeout=30)
            ray.kill(coordinator, no_restart=True)
