"""Run-level hooks, delivered in the driver in event order."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from raygents.agents.agent import Agent
from raygents.agents.hooks import fire
from raygents.agents.tooluse import final_value
from raygents.core.context import RunContext
from raygents.core.events import RunEvent
from raygents.core.messages import Message, ToolCall, ToolResult, Usage

__all__ = ["HookRelay"]


class HookRelay:
    """Delivers a run's events to its run-level hooks, in the driver, one call at a time in
    event order (on the loop that emits the events)."""

    def __init__(self, hooks: Any, graph: Mapping[str, Agent], context: Any) -> None:
        self._hooks = list(hooks) if isinstance(hooks, Sequence) else [hooks]
        self._graph = graph
        self._context = context
        self._calls: deque[tuple[str, RunContext, tuple[Any, ...]]] = deque()
        self._pump: asyncio.Task[None] | None = None

    def run_started(self, run_id: str, agent: Agent, messages: Sequence[Message]) -> None:
        """Queue ``on_run_start``, from the caller's thread before the run starts: the run's
        first event (or its end) runs it, on the runtime's loop."""
        self._calls.append(("on_run_start", self._ctx(run_id, agent.name), (agent, list(messages))))

    def run_ended(
        self, run_id: str, agent_name: str, output: Any, error: BaseException | None
    ) -> None:
        """Queue ``on_run_end`` with the run's final output or its error."""
        agent = self._graph.get(agent_name)
        if agent is not None:
            self._queue("on_run_end", self._ctx(run_id, agent_name), agent, output, error)

    def event(self, event: RunEvent) -> None:
        """Queue the hook call an event stands for, if any."""
        agent = self._graph.get(event.agent_name)
        if agent is None:
            return
        ctx = self._ctx(event.run_id, event.agent_name, event)
        match event.type:
            case "agent_start" | "agent_end" | "handoff" | "checkpoint":
                args = self._args(event)
                if args is not None:
                    self._queue(f"on_{event.type}", ctx, agent, *args)
            case "llm_start" | "llm_end":
                reported = event.request if event.type == "llm_start" else event.response
                if reported is not None:
                    self._queue(f"on_{event.type}", ctx, agent, reported)
            case "tool_start" | "tool_end":
                call = ToolCall(event.call_id or "", event.tool_name or "", event.arguments or "{}")
                result = ToolResult(event.result or "", bool(event.is_error))
                args = (call,) if event.type == "tool_start" else (call, result)
                self._queue(f"on_{event.type}", ctx, agent, *args)
            case _:  # model text, recovery and the run's end (see run_ended)
                pass

    def _args(self, event: RunEvent) -> tuple[Any, ...] | None:
        match event.type:
            case "agent_end":
                agent = self._graph[event.agent_name]
                return (final_value(agent, event.output or "", event.tool_name),)
            case "handoff":
                target = self._graph.get(event.to_agent or "")
                return None if target is None else (target,)
            case "checkpoint":
                data = event.data or {}
                return (data.get("seq"), data.get("status"))
            case _:
                return ()

    def _ctx(self, run_id: str, agent_name: str, event: RunEvent | None = None) -> RunContext:
        turns = event.turns if event is not None and event.turns is not None else 0
        usage = event.usage if event is not None and event.usage is not None else Usage()
        return RunContext(run_id, agent_name, self._context, turns, usage)

    def _queue(self, method: str, ctx: RunContext, *args: Any) -> None:
        """Queue a call and make sure the pump runs (on the loop that emits the events)."""
        self._calls.append((method, ctx, args))
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._calls:
            method, ctx, args = self._calls.popleft()
            await fire(self._hooks, method, ctx, *args)

    async def drain(self) -> None:
        """Wait until every queued call ran."""
        while self._calls or (self._pump is not None and not self._pump.done()):
            if self._pump is None or self._pump.done():
                self._pump = asyncio.get_running_loop().create_task(self._run())
            await asyncio.shield(self._pump)
