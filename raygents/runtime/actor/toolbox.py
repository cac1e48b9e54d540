"""Toolbox: one agent as the loop sees it from its actor: its tools, its handoffs, its view."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from raygents.agents.agent import Agent
from raygents.agents.guardrails import bind_output_type
from raygents.agents.handoffs import Handoff, HandoffInputData
from raygents.agents.tools import Tool, to_tool_result
from raygents.agents.tooluse import StopAtTools
from raygents.core import loop
from raygents.core.context import RunContext, is_enabled
from raygents.core.envelope import RunState
from raygents.core.messages import Message, ToolCall, ToolResult, ToolSpec
from raygents.core.schema import is_typed, type_name, type_schema
from raygents.errors import RaygentsError, UserError

__all__ = ["Toolbox"]

_HANDOFF_PARAMS = {
    "type": "object",
    "properties": {},
    "required": [],
    "additionalProperties": False,
}


class Toolbox:
    """The tools and the view of one agent, resolved in its actor's process."""

    def __init__(self, agent: Agent) -> None:
        # The output guardrails of a typed agent get its type (the actor's copy of the agent).
        agent.output_guardrails = bind_output_type(agent.output_guardrails, agent.output_type)
        self.agent = agent
        self._tools: dict[str, Tool] | None = None
        self._static_view: loop.AgentView | None = None

    def tools(self) -> dict[str, Tool]:
        """The agent's tools by name (handoff tools are not included)."""
        assert self._tools is not None, "resolve_tools() must run first"
        return self._tools

    async def resolve_tools(self) -> None:
        """Collect the agent's tools, its MCP servers' tools and its handoff tools.

        MCP servers connect on first use and keep their connection for the actor's life;
        their tool lists are cached until ``reset_cache()``. A name used twice fails the run.
        """
        sources: list[tuple[str, Tool]] = [("the agent's tools", t) for t in self.agent.tools]
        for server in self.agent.mcp_servers:
            for t in await server.list_tools():
                sources.append((f"MCP server {server.name!r}", t))
        owners: dict[str, str] = {}
        for h in self.agent.handoff_configs():
            owners[h.tool_name] = f"the handoff to {h.agent.name!r}"
        for owner, t in sources:
            if t.name in owners:
                raise UserError(
                    f"agent {self.agent.name!r}: tool name {t.name!r} is used by {owners[t.name]} "
                    f"and by {owner}; rename one of them"
                )
            owners[t.name] = owner
        tools = {t.name: t for _, t in sources}
        if self._tools is None or set(tools) != set(self._tools):
            self._tools = tools
            self._static_view = None

    def base_view(self) -> loop.AgentView:
        """The parts of the agent's view that are the same for every run (built once per
        set of tools); a tool the model cannot be offered raises ``UserError`` here."""
        if self._static_view is None:
            agent = self.agent
            handoffs = agent.handoff_configs()
            specs = [t.spec() for t in self.tools().values()]
            specs += [
                ToolSpec(
                    name=h.tool_name, description=h.tool_description, parameters=_HANDOFF_PARAMS
                )
                for h in handoffs
            ]
            output_schema = None
            if is_typed(agent.output_type):
                output_schema = {
                    "name": type_name(agent.output_type),
                    "schema": type_schema(agent.output_type),
                }
            behavior = agent.tool_use_behavior
            self._static_view = loop.AgentView(
                name=agent.name,
                tools=tuple(specs),
                handoffs={h.tool_name: h.agent.name for h in handoffs},
                output_schema=output_schema,
                schema_on_every_call=bool(agent.schema_on_every_call),
                settings=agent.model_settings.to_data(),
                tool_use_behavior=_static_behavior(behavior),
                reset_tool_choice=agent.reset_tool_choice,
                max_turns=agent.max_turns,
                max_empty_output_retries=agent.max_empty_output_retries,
                max_output_retries=agent.max_output_retries,
                max_tool_calls_per_turn=agent.max_tool_calls_per_turn,
                max_model_calls=agent.max_model_calls,
            )
        return self._static_view

    async def view(self, state: RunState, ctx: RunContext) -> loop.AgentView:
        """The agent's view for one activation of a run: its system prompt, its schema, the
        tools and handoffs enabled now, and its ``tool_use_behavior`` function."""
        base = self.base_view()
        handoffs = self.agent.handoff_configs()
        changes: dict[str, Any] = {}
        off = await self._disabled(ctx, handoffs)
        if off:
            handoffs = [h for h in handoffs if h.tool_name not in off]
            changes["tools"] = tuple(t for t in base.tools if t.name not in off)
            changes["handoffs"] = {k: v for k, v in base.handoffs.items() if k not in off}
        changes["system"] = await self.agent.system_prompt(ctx, handoffs)
        if state.response_format is not None:
            changes["output_schema"] = state.response_format
        return dataclasses.replace(base, **changes)

    async def decided(
        self,
        view: loop.AgentView,
        state: RunState,
        context: Any,
        batch: loop.RunTools,
        results: Sequence[ToolResult],
    ) -> loop.AgentView:
        """The view with which the loop takes a batch's results: a ``tool_use_behavior``
        function (sync or async) is asked here, and the loop gets its answer."""
        behavior = self.agent.tool_use_behavior
        if not callable(behavior) or isinstance(behavior, StopAtTools):
            return view
        ran = loop.executed(batch, results)
        if not ran:
            return view
        final = await _decide_final(behavior, self.agent.name, context, state, ran)

        def decide(state: RunState, results: Sequence[tuple[ToolCall, ToolResult]]) -> str | None:
            return final

        return dataclasses.replace(view, tool_use_behavior=decide)

    async def _disabled(self, ctx: RunContext, handoffs: list[Handoff]) -> set[str]:
        """The names of the tools and handoff tools whose ``is_enabled`` is off now."""
        switches = [(f"tool {t.name!r}", t.name, t.is_enabled) for t in self.tools().values()]
        switches += [(f"handoff to {h.agent.name!r}", h.tool_name, h.is_enabled) for h in handoffs]
        off = set()
        for owner, name, value in switches:
            if value is not True and not await is_enabled(owner, value, ctx, self.agent):
                off.add(name)
        return off

    # --- handoffs -----------------------------------------------------------------------
    def _handoff_config(self, target: str) -> Handoff:
        return next(h for h in self.agent.handoff_configs() if h.agent.name == target)

    async def on_handoff(self, state: RunState, target: str, ctx: RunContext) -> None:
        """Run the handoff's ``on_handoff`` callback, if it has one."""
        callback = self._handoff_config(target).on_handoff
        if callback is None:
            return
        try:
            result = callback(ctx)
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                await result
        except Exception as exc:
            raise RaygentsError(
                f"cannot execute handoff callback for {target!r}: {exc}", run_id=state.run_id
            ) from None

    def handoff(self, state: RunState, target: str) -> RunState:
        """The run's state handed to ``target`` (its history as the handoff's
        ``input_filter`` rewrites it, if it has one)."""
        config = self._handoff_config(target)
        if config.input_filter is None:
            return loop.apply_handoff(state, target)
        data = HandoffInputData(
            state.messages[: state.input_len], state.messages[state.input_len :]
        )
        try:
            messages = list(config.input_filter(data))
        except Exception as exc:
            raise RaygentsError(
                f"handoff input_filter for {target!r} failed: {exc}", run_id=state.run_id
            ) from None
        if not all(isinstance(m, Message) for m in messages):
            raise UserError(f"handoff input_filter for {target!r} must return Message objects")
        return loop.apply_handoff(state, target, messages)


def _static_behavior(behavior: Any) -> Any:
    """The behaviour as plain data for the view built once (a function's comes per run)."""
    if isinstance(behavior, str):
        return behavior
    if isinstance(behavior, StopAtTools):
        return behavior.tool_names
    return "run_llm_again"


async def _decide_final(
    fn: Callable[..., Any],
    agent: str,
    context: Any,
    state: RunState,
    results: Sequence[tuple[ToolCall, ToolResult]],
) -> str | None:
    """Ask a ``tool_use_behavior`` function (sync or async) about a batch's results: the
    final output text, or None; its error is the run's."""
    ctx = RunContext(state.run_id, agent, context, state.turns, state.usage)
    try:
        value = fn(ctx, list(results))
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:
        raise RaygentsError(
            f"agent {agent!r}: its tool_use_behavior function raised {type(exc).__name__}: {exc}",
            run_id=state.run_id,
        ) from None
    if value is None:
        return None
    return value if isinstance(value, str) else to_tool_result(value).content
