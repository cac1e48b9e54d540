"""Agent definitions: a fingerprint per agent of a graph, so that a graph started from another
agent keeps the actors of the agents it shares with the graphs before it.

An actor holds the graph it was made for and serves the runs of that graph; a graph from
another start agent, or with other agents in it, gets its own actors, and the actors of an
agent retire only when its *definition* changes: its own pickle, other agents written by name
and tools by the digest of their own pickle (:class:`_DefinitionPickler`; agents often share
tools), together with the pickles of the agents it reaches (handoffs, agent tools, anything of
it that holds an agent), since it acts on what it holds of them (a handoff's description, an
agent tool's schema). Only a graph's first start in a process pays for it: about 0.3 ms for
two agents and 5 ms for thirty with five tools each, several times the graph's own pickle.
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

from ray.cloudpickle import cloudpickle as _cloudpickle

from raygents.agents.agent import Agent
from raygents.agents.tools import Tool
from raygents.runtime.driver.canonical import canonical_digest

__all__ = ["definitions"]

_cp: Any = _cloudpickle  # (the module's own classes, untyped)


def definitions(graph: dict[str, Agent]) -> dict[str, str]:
    """The definition fingerprint of each agent of ``graph``, by name.

    Raises:
        Exception: an agent cannot be pickled (the graph's own snapshot says why first).
    """
    shared: dict[int, tuple[str, set[str]]] = {}
    own: dict[str, str] = {}
    reaches: dict[str, set[str]] = {}
    for name, agent in graph.items():
        pickler = _DefinitionPickler(agent, shared)
        own[name] = pickler.digest(agent)
        reaches[name] = pickler.reached
    return {name: _closure_fp(name, own, reaches) for name in graph}


def _closure_fp(name: str, own: dict[str, str], reaches: dict[str, set[str]]) -> str:
    seen = {name}
    pending = [name]
    while pending:
        for other in reaches.get(pending.pop(), ()):
            if other not in seen:
                seen.add(other)
                pending.append(other)
    digest = hashlib.sha256()
    for other in sorted(seen):
        digest.update(f"{other}\0{own.get(other, '')}\0".encode())
    return digest.hexdigest()[:16]


class _DefinitionPickler(_cp.Pickler):  # type: ignore[misc]
    """cloudpickle's pickler writing every agent but ``root`` as its name (and noting it),
    and each tool as the digest of its own pickle, made once per graph (``shared``): agents
    often share their tools."""

    def __init__(self, root: Any, shared: dict[int, tuple[str, set[str]]]) -> None:
        self.buffer = io.BytesIO()
        super().__init__(self.buffer)
        self.root = root
        self.shared = shared
        self.reached: set[str] = set()

    def digest(self, obj: Any) -> str:
        self.dump(obj)
        return canonical_digest(self.buffer.getvalue())

    def persistent_id(self, obj: Any) -> str | None:
        if obj is self.root:
            return None
        if isinstance(obj, Agent):
            self.reached.add(obj.name)
            return f"agent:{obj.name}"
        if isinstance(obj, Tool):
            found = self.shared.get(id(obj))
            if found is None:
                tool = _DefinitionPickler(obj, self.shared)
                found = self.shared[id(obj)] = (tool.digest(obj), tool.reached)
            self.reached |= found[1]
            return f"tool:{found[0]}"
        return None
