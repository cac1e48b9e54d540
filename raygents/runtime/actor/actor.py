"""AgentActor: serves one agent to every run that reaches it, driving the pure loop."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

import ray

from raygents.agents.agent import Agent
from raygents.core.envelope import Envelope, Outcome, RunState, SuspendRequest
from raygents.errors import CANCEL
from raygents.records import checkpoint
from raygents.runtime.actor.activation import Activation, Active, Host
from raygents.runtime.actor.binding import Binding
from raygents.runtime.actor.idle import Idleness, holds, quiet, retiring, watch
from raygents.runtime.actor.outbox import Outboxes, Relay
from raygents.runtime.actor.stops import Emit
from raygents.runtime.actor.writer import RecordWriter
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.drive import SuspendToken
from raygents.runtime.link.liveness import Beater, watch_coordinator
from raygents.runtime.link.mailbox import RETIRED
from raygents.runtime.link.process import tune_collector
from raygents.telemetry import logs, tracing

__all__ = ["EARLY_S", "AgentActor"]

log = logging.getLogger("raygents")
_exit_actor: Any = ray.actor.exit_actor

_RETIRE_GRACE_S = 2.0  # how long a retired actor stays idle before it exits
EARLY_S = 60.0
"""How long a suspend request for a run not on the actor is kept (the run may be on its way)."""


class AgentActor:
    """Runs one agent of one graph snapshot. Wrapped with ``ray.remote`` where it is created.

    Args:
        graph: the agent graph by name, or its cloudpickled bytes.
        agent_name: the agent this actor serves.
        graph_fp: the fingerprint of the graph snapshot.
        namespace: the raygents namespace (to find the coordinator).
        coordinator: the coordinator's handle (found by name in ``namespace`` if None).
        definitions: the definition fingerprints of the graph's agents (to register the
            graph again with a restarted coordinator).
    """

    bound: Binding
    """The agent this actor serves, and what it keeps of it (another one after :meth:`adopt`)."""

    def __init__(
        self,
        graph: dict[str, Agent] | bytes,
        agent_name: str,
        graph_fp: str,
        namespace: str,
        coordinator: Any = None,
        definitions: dict[str, str] | None = None,
    ) -> None:
        self.namespace = namespace
        self.directory = Directory(namespace, coordinator)
        self.writer = RecordWriter(self.directory, self._checkpointed)
        self._bind(graph, agent_name, graph_fp, definitions)
        self._active: dict[str, Active] = {}
        self._early: dict[str, tuple[str, float, int | None]] = {}
        """Requests for runs not here: ``(cause, when, epoch)`` by run id (see :meth:`suspend`)."""
        self._incarnation = uuid.uuid4().hex
        """Tells this incarnation of the actor from the next one, should Ray restart it."""
        self._outboxes = Outboxes()
        self._runs: set[asyncio.Future[Outcome]] = set()
        """The tasks of the runs here (the event loop keeps only weak references to tasks)."""
        self._beater: Beater | None = None
        self._host = Host(self.writer, self.directory, self._active, self._beats)
        self._watch: asyncio.Future[None] | None = None
        self.idleness = Idleness(self._busy)
        self._idle_watch: asyncio.Future[None] | None = None
        self.retiring = False
        """It was idle for ``idle_actor_s`` and is leaving: it takes no run any more."""
        self._leaving = False
        """It was told to retire: it takes no other agent (see :meth:`adopt`)."""
        tune_collector()
        logs.setup()

    def _bind(
        self,
        graph: dict[str, Agent] | bytes,
        agent_name: str,
        graph_fp: str,
        definitions: dict[str, str] | None,
    ) -> None:
        """Serve agent ``agent_name`` of graph ``graph_fp`` (see :meth:`__init__`), built
        from its definition first (nothing changes if that raises)."""
        blob = None
        if isinstance(graph, bytes):
            from ray import cloudpickle

            blob, graph = graph, cloudpickle.loads(graph)
        assert isinstance(graph, dict)
        bound = Binding(graph, agent_name, graph_fp, self.directory, self.writer, self._children)
        if blob is not None:
            replicas = {n: a.replicas for n, a in graph.items()}
            self.directory.graphs.clear()  # (an adopted graph replaces the one before)
            self.directory.graphs[graph_fp] = (blob, replicas, definitions)
        self.directory.owner = f"agent:{agent_name}@{graph_fp[:8]}:{os.getpid()}"
        self.bound = bound

    async def _checkpointed(
        self, state: RunState, status: checkpoint.Status, emit: Emit | None
    ) -> None:
        """A record was written (the writer's report, to the agent served now)."""
        await self.bound.stops.checkpointed(state, status, emit)

    # --- public actor methods -----------------------------------------------------------
    async def start(self, envelopes: list[Envelope], caller: str) -> str:
        """Take runs and drive each until it completes, fails, suspends or hands off.

        Returns this actor's incarnation as soon as the runs are here, or ``RETIRED`` (and
        takes none of them) once the actor retires for idleness, or when a run is not for the
        agent it serves now (its caller's handle is older than an :meth:`adopt`). A run's
        events and then its outcome go to ``caller``'s outbox, which :meth:`take` empties (see
        :class:`~raygents.runtime.actor.outbox.Relay`): those of a run that does not stream in one
        list per take, which may wait there a moment for company; a streamed run's in small
        batches, its last ones with its outcome (``(batch, outcome)``).
        """
        if self.retiring or not all(self._serves(envelope) for envelope in envelopes):
            return RETIRED
        if self._idle_watch is None:
            self._idle_watch = asyncio.ensure_future(self._watch_idleness())
        for envelope in envelopes:
            self._accept(envelope, caller)
        return self._incarnation

    def _serves(self, envelope: Envelope) -> bool:
        return self.bound.serves(envelope.graph_fp, envelope.state.agent_name)

    def adopt(
        self,
        graph: bytes,
        agent_name: str,
        graph_fp: str,
        definitions: dict[str, str] | None,
        idle_s: float,
    ) -> bool:
        """Serve agent ``agent_name`` of graph ``graph_fp`` from now on, instead of the agent
        it serves, if this actor has held nothing a caller needs for ``idle_s`` (and is not
        leaving, and its agent keeps no connections to MCP servers). The coordinator asks
        this of an idle actor before it starts a new process for an agent.

        A caller that still holds this actor's handle for the agent it served before is
        refused (:meth:`start` answers ``RETIRED``) and asks the coordinator again. Returns
        whether the actor took the agent: not if the definition cannot be loaded here (a new
        actor then reports why).
        """
        if self.retiring or self._leaving or self.bound.agent.mcp_servers:
            return False
        if self._busy() or self.idleness.idle_for() < idle_s:
            return False
        try:
            self._bind(graph, agent_name, graph_fp, definitions)
        except Exception:
            log.info("agent %r cannot be loaded by an idle actor", agent_name, exc_info=True)
            return False
        self.idleness.touch()
        log.info("an idle actor now serves agent %r (graph %s)", agent_name, graph_fp[:8])
        return True

    def _accept(self, envelope: Envelope, caller: str) -> None:
        run_id = envelope.state.run_id
        token = SuspendToken(run_id)
        early = self._early.pop(run_id, None)
        if early is not None and early[2] is not None and envelope.state.epoch > early[2]:
            early = None  # (asked of an earlier dispatch: this one came after it)
        cause = envelope.suspend_cause or (early[0] if early else None)
        if cause:
            token.request(cause)
        self._active[run_id] = Active(token)  # before any await: suspend() may come next
        relay = Relay(self._outboxes.get(caller), envelope)
        task = asyncio.ensure_future(self._run(envelope, token, relay.emit))
        self._runs.add(task)
        task.add_done_callback(relay.done)
        task.add_done_callback(self._runs.discard)
        task.add_done_callback(lambda _: self.idleness.touch())
        self.idleness.touch()

    async def take(self, caller: str, wait_s: float, known: str | None = None) -> tuple[str, bytes]:
        """What ``caller``'s runs sent since its last take, as ``(run_id, item)`` pairs packed
        in bytes (:func:`~raygents.runtime.link.mailbox.unpack` reads them).

        Waits up to ``wait_s`` for something that must go (see
        :class:`~raygents.runtime.actor.outbox.Outbox`), unless the caller last saw another
        incarnation (``known``) of this actor. Also returns this actor's incarnation, so the
        caller notices a restart.
        """
        wait = known in (None, self._incarnation)
        return self._incarnation, await self._outboxes.take(caller, wait_s, wait)

    async def suspend(self, requests: Sequence[SuspendRequest]) -> None:
        """Ask runs, ``(run_id, cause[, epoch])``, to suspend at their next safe point.

        A run not here yet is remembered for a minute: it may be on its way. With the epoch
        of the dispatch the request was made for, it then holds only for that dispatch: a
        request that arrives after the run left (it suspended here) does not suspend the
        run's next dispatch (its resume) when it comes.
        """
        for run_id, cause, *rest in requests:
            active = self._active.get(run_id)
            if active is None:
                now = time.monotonic()
                self._early = {k: v for k, v in self._early.items() if now - v[1] < EARLY_S}
                self._early[run_id] = (cause, now, rest[0] if rest else None)
                continue
            active.token.request(cause)
            for child in list(active.children.values()):
                child.request(cause)
            if cause == CANCEL and active.drive is not None:
                active.drive.cancel()  # (its tool tasks are cancelled through Ray)
            elif active.waiting_call is not None:
                active.waiting_call.cancel()

    async def retire(
        self, grace_s: float = _RETIRE_GRACE_S, serving: tuple[str, str] | None = None
    ) -> None:
        """Exit once no run has been active here for ``grace_s`` and their callers took what
        they sent (a newer definition of the agent took over, or the actor was idle), with
        its reports to the coordinator acknowledged. The grace lets runs already on their
        way here arrive: a start may reach a new actor after its retire. A retire meant for
        the actor ``serving`` an agent, ``(graph_fp, agent_name)``, is ignored by one that
        serves another now (it took another agent, see :meth:`adopt`)."""
        if serving is not None and not self.bound.serves(*serving):
            return
        self._leaving = True
        await quiet(lambda: bool(self._active), self._outboxes, grace_s)
        await self.writer.reports.settled()
        tracing.flush()
        _exit_actor()

    def _busy(self) -> bool:
        return holds(self._active, self._outboxes, self._early, EARLY_S)

    async def _watch_idleness(self) -> None:
        """Once idle for the namespace's ``idle_actor_s`` (if set, and in a Ray actor), take
        no run, have the coordinator stop handing this actor out, then exit (in an actor
        call: Ray exits an async actor only from one)."""
        me = ray.get_runtime_context().get_actor_id()
        idle_s = None if me is None else (await self.directory.settings()).idle_actor_s
        if me is not None and idle_s is not None:
            await watch(self.idleness, idle_s)
            self.retiring = True
            bound = self.bound
            await retiring(self.directory.client, bound.graph_fp, bound.agent.name, me, idle_s)
            ray.get_runtime_context().current_actor.retire.remote(_RETIRE_GRACE_S)

    def ping(self) -> int:
        """Liveness check; returns the actor's process id."""
        return os.getpid()

    async def flush_spans(self) -> None:
        """Export the spans this actor holds (before it is stopped)."""
        await asyncio.to_thread(tracing.flush, 2.0)

    # --- what runs use of the actor ----------------------------------------------------
    async def resolve_tools(self) -> None:
        """Collect the agent's tools (see :meth:`Toolbox.resolve_tools`)."""
        await self.bound.toolbox.resolve_tools()

    def _beats(self) -> None:
        if self._beater is None:
            self._beater = self._start_beats()

    def _start_beats(self) -> Beater | None:
        """Beat to the coordinator while runs are here (see :mod:`~raygents.runtime.link.liveness`);
        not outside a Ray actor (an actor built directly, in tests)."""
        actor_id = ray.get_runtime_context().get_actor_id()
        if actor_id is None:
            return None
        client = self.directory.client
        every = self.directory.cached_settings().recovery.heartbeat_s
        self._watch = asyncio.ensure_future(watch_coordinator(client, every, self.bound.agent.name))
        return Beater(
            asyncio.get_running_loop(),
            lambda lag: client.beat(actor_id, lag),
            every,
            lambda: bool(self._active),
        ).start()

    def _children(self, run_id: str) -> dict[str, SuspendToken] | None:
        active = self._active.get(run_id)
        return active.children if active is not None else None

    # --- driving one activation ---------------------------------------------------------
    async def _run(self, envelope: Envelope, token: SuspendToken, emit: Emit) -> Outcome:
        return await Activation(self.bound, self._host, envelope, token, emit).run()
