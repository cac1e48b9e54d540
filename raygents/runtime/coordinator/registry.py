"""The agent actor registry: the coordinator's agent graphs, the actors serving each agent, and
their beats."""

from __future__ import annotations

import asyncio
import os
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray

from raygents.errors import RaygentsError
from raygents.runtime.actor.actor import EARLY_S, AgentActor
from raygents.runtime.link.handles import actor_key
from raygents.runtime.link.liveness import Beats

if TYPE_CHECKING:
    from raygents.core.envelope import SuspendRequest

__all__ = ["ActorRegistry"]

_MAX_CONCURRENCY = 10_000
_FLUSH_S = 3.0
"""How long stopping the agent actors waits for their spans to be exported."""
_RETIRED_KEPT = 10_000
"""How many retired actors' ids are kept (a caller whose cached handle names an older one
recovers its run as from a lost actor)."""
_ASKED_KEPT = 10_000
"""How many runs' suspend requests are kept for the actors created after them, at most."""
_ADOPT_AFTER = 0.25
"""An actor idle for this share of ``idle_actor_s`` may take another agent (see
:meth:`ActorRegistry.lookup`)."""
_ADOPT_ASKS = 2
"""How many idle actors one lookup asks, at most, before it starts a new one."""
_ADOPT_WAIT_S = 2.0
"""How long a lookup waits for an idle actor's answer."""


@dataclass
class _Graph:
    blob: bytes
    replicas: dict[str, int]
    definitions: dict[str, str]
    """The definition fingerprint of each agent (none known: each is a new definition)."""


class ActorRegistry:
    """Creates agent actors on first use, retires those of older graph definitions, drops
    those that retire when idle, and replaces unresponsive ones.

    Args:
        namespace: the Ray namespace of the actors.
        detached: the actors are detached and named by what they serve, so a restarted
            coordinator finds its predecessor's.
        actor_options: Ray options for every agent actor, over the defaults.
        idle_actor_s: how long an agent actor stays with no run before it retires (None:
            it stays); an actor idle for a quarter of it may take another agent instead
            of a new process starting for that agent (see :meth:`lookup`).
    """

    def __init__(
        self,
        namespace: str,
        *,
        detached: bool = False,
        actor_options: dict[str, Any] | None = None,
        idle_actor_s: float | None = None,
    ) -> None:
        self.namespace = namespace
        self.detached = detached
        self.actor_options = dict(actor_options or {})
        self.adopt_after_s = None if idle_actor_s is None else idle_actor_s * _ADOPT_AFTER
        me = ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None
        self.incarnation = (me or os.urandom(8).hex())[:16]
        """Tells this coordinator's (non-detached) agent actors from those of another one; its
        actor id, which its restarts keep."""
        self.graphs: dict[str, _Graph] = {}
        self.actors: dict[tuple[str, str], list[Any]] = {}
        self.beats = Beats()
        self._retired: OrderedDict[str, None] = OrderedDict()
        """The ids of actors that retired, newest last."""
        self._renamed: set[tuple[str, str]] = set()
        """Agents an actor of which retired: their next actors get new names (a retiring
        actor may still hold its name a moment)."""
        self._asked: OrderedDict[str, tuple[SuspendRequest, float]] = OrderedDict()
        """The newest suspend request passed on for each run, and when (``time.monotonic``),
        for :data:`EARLY_S`."""
        self._bound: dict[str, tuple[tuple[str, str], float]] = {}
        """What each actor serves, ``(graph_fp, name)`` by actor id, and since when
        (``time.monotonic``)."""
        self._looking = asyncio.Lock()
        """One lookup at a time asks idle actors (see :meth:`lookup`)."""
        self._late: set[asyncio.Future[None]] = set()
        """Adoptions answered too late, waited for (see :func:`_let_go`)."""

    def register_graph(
        self,
        graph_fp: str,
        blob: bytes,
        replicas: dict[str, int],
        definitions: dict[str, str] | None = None,
    ) -> None:
        """Remember a graph snapshot; the actors of other graphs whose agent it defines
        differently retire (those of an agent it defines the same way keep serving their
        graphs: a chat loop that starts each turn on the last agent of the one before
        changes the graph, not its agents)."""
        if graph_fp in self.graphs:
            return
        defined = dict(definitions or {})
        self.graphs[graph_fp] = _Graph(blob, dict(replicas), defined)
        for (fp, name), handles in list(self.actors.items()):
            if fp == graph_fp or name not in replicas:
                continue
            before = self.graphs[fp].definitions.get(name) if fp in self.graphs else None
            if before is not None and before == defined.get(name):
                continue
            for handle in handles:
                handle.retire.remote(serving=(fp, name))
                self._forget(actor_key(handle))
            del self.actors[(fp, name)]
            self._renamed.add((fp, name))

    def asked(self, requests: Sequence[SuspendRequest]) -> None:
        """Suspend requests passed on to every actor there is: each actor created in the
        next :data:`EARLY_S` gets them too. The run may be on its way to an agent that has
        no actor yet (a handoff, or a run an actor refused as it retired), and no process
        told the run itself (a suspend or cancel from another driver or the HTTP API)."""
        now = time.monotonic()
        for request in requests:
            self._asked.pop(request[0], None)
            self._asked[request[0]] = (request, now)
        while self._asked and (
            len(self._asked) > _ASKED_KEPT or now - next(iter(self._asked.values()))[1] > EARLY_S
        ):
            self._asked.popitem(last=False)

    async def lookup(self, graph_fp: str, name: str) -> list[Any]:
        """The actors serving ``name`` in ``graph_fp``, as :meth:`agent_actors` gives them,
        but an actor that has been idle for a while takes the agent before a new one starts.

        Agent actors are processes (half a second and 50 MB each to start); an application
        or a notebook that defines agents as it goes would otherwise start one per
        definition and keep the idle ones until ``idle_actor_s``. An actor idle for a
        quarter of that serves the next agent that has none instead (only actors that have
        not beaten for as long are asked; each decides for itself, see ``AgentActor.adopt``).
        """
        key = (graph_fp, name)
        graph = self.graphs.get(graph_fp)
        if graph is None or self.adopt_after_s is None:
            return self.agent_actors(graph_fp, name)
        count = graph.replicas.get(name, 1)
        if len(self.actors.get(key, [])) >= count:
            return self.actors[key]
        async with self._looking:
            while len(self.actors.get(key, [])) < count:
                adopted = await self._adopted(graph, graph_fp, name, self.adopt_after_s)
                if adopted is None:
                    break
                if self._superseded(graph_fp, name):  # (a newer definition came meanwhile)
                    adopted.retire.remote(serving=key)  # (once this run is done)
                    self._forget(actor_key(adopted))
                    return [adopted]
                self.actors[key] = [*self.actors.get(key, []), adopted]
        return self.agent_actors(graph_fp, name)

    async def _adopted(self, graph: _Graph, graph_fp: str, name: str, idle_s: float) -> Any:
        """An idle actor of another agent that took agent ``name`` of ``graph_fp``, or None."""
        now = time.monotonic()
        candidates = []
        for key, handles in self.actors.items():
            if key == (graph_fp, name):
                continue
            for handle in handles:
                actor_id = actor_key(handle)
                since = self._bound.get(actor_id, (key, now))[1]
                beat = self.beats.of(actor_id)
                if now - since >= idle_s and (beat is None or beat[0] >= idle_s):
                    candidates.append((since, actor_id, key, handle))
        candidates.sort(key=lambda c: c[0])
        for _, actor_id, key, handle in candidates[:_ADOPT_ASKS]:
            ref = handle.adopt.remote(graph.blob, name, graph_fp, graph.definitions, idle_s)
            try:
                took = await asyncio.wait_for(_answer(ref), _ADOPT_WAIT_S)
            except (asyncio.TimeoutError, ray.exceptions.RayError):
                late = asyncio.ensure_future(_let_go(ref, handle, (graph_fp, name)))
                self._late.add(late)
                late.add_done_callback(self._late.discard)
                continue
            if not took:  # (busy since: asked again once it may have been idle as long)
                self._bound[actor_id] = (key, time.monotonic())
                continue
            kept = [h for h in self.actors.get(key, []) if actor_key(h) != actor_id]
            if kept:
                self.actors[key] = kept
            else:
                self.actors.pop(key, None)
            self._renamed.add(key)  # (its name now names an actor that serves another agent)
            self._retired.pop(actor_id, None)
            self._bound[actor_id] = ((graph_fp, name), time.monotonic())
            return handle
        return None

    def _superseded(self, graph_fp: str, name: str) -> bool:
        """Whether a graph registered after ``graph_fp`` defines agent ``name`` otherwise
        (its actors retire once their runs are done, see :meth:`register_graph`)."""
        graphs = list(self.graphs)
        if graph_fp not in self.graphs:
            return False
        before = self.graphs[graph_fp].definitions.get(name)
        for later in graphs[graphs.index(graph_fp) + 1 :]:
            graph = self.graphs[later]
            if name in graph.replicas and (before is None or graph.definitions.get(name) != before):
                return True
        return False

    def agent_actors(self, graph_fp: str, name: str) -> list[Any]:
        """The actors serving ``name`` in ``graph_fp``, created on first use (and again for
        those that retired)."""
        key = (graph_fp, name)
        handles = self.actors.get(key, [])
        graph = self.graphs.get(graph_fp)
        if graph is None:
            if handles:
                return handles
            raise RaygentsError(f"unknown agent graph {graph_fp!r}; start or resume the run again")
        count = graph.replicas.get(name, 1)
        if len(handles) < count:
            renamed = key in self._renamed
            handles = handles + [
                self._create(graph, graph_fp, name, f"r{os.urandom(3).hex()}" if renamed else i)
                for i in range(len(handles), count)
            ]
            self.actors[key] = handles
        return handles

    def retiring(self, graph_fp: str, name: str, actor_id: str) -> None:
        """Stop handing out an actor that retires; the next lookup creates a fresh one. An
        actor that serves another agent now (a caller's handle was older than its
        ``adopt``) keeps serving that one."""
        bound = self._bound.get(actor_id)
        if bound is not None and bound[0] != (graph_fp, name):
            return
        self._forget(actor_id)
        self._renamed.add((graph_fp, name))  # (known here or not: it may hold its name)
        handles = self.actors.get((graph_fp, name))
        if handles is None:
            return
        kept = [h for h in handles if actor_key(h) != actor_id]
        if len(kept) == len(handles):
            return  # (told already, by the actor or by a caller it refused)
        if kept:
            self.actors[(graph_fp, name)] = kept
        else:
            del self.actors[(graph_fp, name)]

    def retired(self, actor_id: str) -> bool:
        """Whether actor ``actor_id`` retired (one of the last :data:`_RETIRED_KEPT`)."""
        return actor_id in self._retired

    def _forget(self, actor_id: str) -> None:
        """An actor retires: its beats go, its id is remembered."""
        self.beats.forget(actor_id)
        self._bound.pop(actor_id, None)
        self._retired[actor_id] = None
        self._retired.move_to_end(actor_id)
        while len(self._retired) > _RETIRED_KEPT:
            self._retired.popitem(last=False)

    def replace_actor(self, graph_fp: str, name: str, stale: Any) -> None:
        """Stop handing out an unresponsive actor; the next lookup creates a fresh one."""
        handles = self.actors.get((graph_fp, name))
        if handles is None:
            return
        stale_id = actor_key(stale)
        fresh = [h for h in handles if actor_key(h) != stale_id]
        if len(fresh) == len(handles):
            return  # already replaced by an earlier report of the same actor
        self.beats.forget(stale_id)
        self._bound.pop(stale_id, None)
        graph = self.graphs.get(graph_fp)
        if graph is not None:
            fresh.append(self._create(graph, graph_fp, name, f"r{os.urandom(3).hex()}"))
        self.actors[(graph_fp, name)] = fresh

    async def stop_all(self) -> None:
        """Stop every agent actor this coordinator knows (it is going away for good), once
        each has exported the spans it holds (``ray.kill`` runs no exit handler), or after
        :data:`_FLUSH_S`."""
        handles = [handle for known in self.actors.values() for handle in known]
        if handles:
            flushed = [asyncio.ensure_future(h.flush_spans.remote()) for h in handles]
            await asyncio.wait(flushed, timeout=_FLUSH_S)
        for handle in handles:
            ray.kill(handle, no_restart=True)
        self.actors.clear()
        self._bound.clear()

    def _create(self, graph: _Graph, graph_fp: str, name: str, index: int | str) -> Any:
        """A new agent actor, told the suspend requests of the last :data:`EARLY_S`."""
        handle = self._create_actor(graph, graph_fp, name, index)
        self._bound[actor_key(handle)] = ((graph_fp, name), time.monotonic())
        self._tell_asked(handle)
        return handle

    def _create_actor(self, graph: _Graph, graph_fp: str, name: str, index: int | str) -> Any:
        label = f"agent:{name}@{graph_fp[:8]}" + (f"#{index}" if index else "")
        # Detached, so that runs keep going while the coordinator restarts (an agent actor
        # stops itself once its coordinator is gone for good, see AgentActor), and named, so
        # that a restarted coordinator finds them. In detached mode a coordinator created
        # again finds its predecessor's; otherwise the name carries the coordinator's id and
        # never meets a stopping actor of an earlier coordinator. A replacement's name is new.
        options: dict[str, Any] = {
            "namespace": self.namespace,
            "num_cpus": 0,
            "max_concurrency": _MAX_CONCURRENCY,
            "max_restarts": -1,
            "lifetime": "detached",
            "get_if_exists": True,
            "name": label if self.detached else f"{label}~{self.incarnation}",
        }
        options.update(self.actor_options)
        remote_cls = ray.remote(AgentActor).options(**options)
        me = ray.get_runtime_context().current_actor
        return remote_cls.remote(graph.blob, name, graph_fp, self.namespace, me, graph.definitions)

    def _tell_asked(self, handle: Any) -> None:
        """Send a new actor the suspend requests of the last :data:`EARLY_S` (see
        :meth:`asked`)."""
        now = time.monotonic()
        recent = [request for request, at in self._asked.values() if now - at <= EARLY_S]
        if recent:
            handle.suspend.remote(recent)


async def _answer(ref: Any) -> bool:
    return bool(await ref)


async def _let_go(ref: Any, handle: Any, serving: tuple[str, str]) -> None:
    """An actor answered an adoption too late (or not at all): if it took the agent, it
    retires, since no lookup hands it out."""
    try:
        took = await ref
    except ray.exceptions.RayError:
        return
    if took:
        handle.retire.remote(serving=serving)
