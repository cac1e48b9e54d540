"""The agent an actor serves, and what the actor keeps of it (swapped whole by an adoption)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raygents.agents.agent import Agent
from raygents.core.context import RunContext
from raygents.core.envelope import RunState
from raygents.models.base import Model, resolve_model
from raygents.runtime.actor.compactor import Compactor
from raygents.runtime.actor.inputs import RunInputs
from raygents.runtime.actor.stops import Emit, Stops, send_event
from raygents.runtime.actor.toolbox import Toolbox
from raygents.runtime.actor.toolcalls import ToolCalls
from raygents.runtime.actor.writer import RecordWriter
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.drive import SuspendToken

__all__ = ["Binding"]


class Binding:
    """Agent ``agent_name`` of ``graph`` (snapshot ``graph_fp``), with its toolbox, the stops
    and tool calls of its runs, their inputs and its compactor. Building one changes nothing
    outside it: an actor swaps it in only once it is built in full.

    Args:
        graph: the agent graph by name.
        agent_name: the agent served.
        graph_fp: the fingerprint of the graph snapshot.
        directory: the actor's directory.
        writer: the actor's record writer.
        children: the suspend tokens of a run's agent-as-tool children, by run.
    """

    def __init__(
        self,
        graph: dict[str, Agent],
        agent_name: str,
        graph_fp: str,
        directory: Directory,
        writer: RecordWriter,
        children: Callable[[str], dict[str, SuspendToken] | None],
    ) -> None:
        self.graph = graph
        self.agent = agent = graph[agent_name]
        self.graph_fp = graph_fp
        self._model: Model | None = None
        self.toolbox = Toolbox(agent)
        self.stops = Stops(agent)
        self.stops.writer = writer
        self.calls = ToolCalls(agent, self.toolbox, directory, writer, self.event, children)
        self.inputs = RunInputs(agent_name, directory)
        self.compactor = Compactor(
            agent, self.model, directory.namespace, directory.cached_settings
        )

    def serves(self, graph_fp: str, agent_name: str) -> bool:
        return graph_fp == self.graph_fp and agent_name == self.agent.name

    def model(self) -> Model:
        """The agent's model, resolved in this process on first use."""
        if self._model is None:
            self._model = resolve_model(self.agent.model)
        return self._model

    def context(self, state: RunState, context: Any) -> RunContext:
        """The run context the agent's hooks and tools see."""
        return RunContext(state.run_id, self.agent.name, context, state.turns, state.usage)

    def event(self, emit: Emit, state: RunState, kind: Any, **fields: Any) -> None:
        """Send one of a run's events, from this agent."""
        send_event(emit, state, self.agent.name, kind, **fields)
