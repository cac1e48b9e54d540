"""Agents (declarative specs) and the agent graph a run uses."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic

from raygents.agents.agent_tool import AgentTool, OutputExtractor
from raygents.agents.checks import check_needs_approval, check_options
from raygents.agents.guardrails import check_guardrails
from raygents.agents.handoffs import (
    Handoff,
    HandoffInputData,
    check_handoff,
    handoff,
    handoff_section,
)
from raygents.agents.hooks import check_hooks
from raygents.agents.tools import Tool
from raygents.agents.tooluse import (
    StopAtTools,
    ToolsToFinalOutput,
    ToolUseBehavior,
    check_stop_at_tools,
    check_tool_use_behavior,
)
from raygents.core.compaction import Compaction, CompactionPolicy, check_policy
from raygents.core.context import IsEnabled, NeedsApproval, RunContext, TContext
from raygents.core.corrections import DEFAULT_MAX_OUTPUT_RETRIES
from raygents.core.loop import DEFAULT_MAX_MODEL_CALLS, DEFAULT_MAX_TOOL_CALLS_PER_TURN
from raygents.core.schema import output_type_problem
from raygents.errors import UserError, excerpt
from raygents.ids import validate_agent_name
from raygents.models.base import Model, ModelSettings
from raygents.models.tokens import context_window as known_window

__all__ = [
    "Agent",
    "Handoff",
    "HandoffInputData",
    "StopAtTools",
    "ToolsToFinalOutput",
    "agent_graph",
    "handoff",
]


Instructions = str | Callable[[RunContext, "Agent"], Any]


class Agent(Generic[TContext]):
    """An agent: instructions, a model, tools and handoffs. Each agent runs as a Ray actor.

    Agents are declarative: building one starts nothing. A run snapshots the graph of agents it
    can reach (through handoffs and agent tools) when it starts. Assign ``agent.handoffs``
    after creating both agents to build handoff cycles.

    Args:
        name: the agent's name, unique within the graph a run uses: at most 128 characters,
            spaces and any letters allowed, no ``/`` or control characters.
        instructions: the system prompt, or a function ``(RunContext, Agent) -> str`` (sync or
            async) evaluated each time the agent becomes active.
        tools: tools, including other agents' ``as_tool()``.
        handoffs: agents or :func:`handoff` configs the model may transfer the conversation to.
        model: a model name (served by ``OpenAIChatModel``) or a :class:`Model`.
        output_type: a type the final output must match (strict JSON schema);
            ``result.final_output`` is then an instance of it, parsed in the driver. ``str``
            or ``None``: plain text.
        schema_on_every_call: with ``output_type`` and tools, send the schema with every model
            call and end the run with the first reply that has no tool calls (the OpenAI Agents
            SDK's way). By default such an agent explores with tools, then makes one more call
            with the schema enforced and tools off.
        tool_use_behavior: ``"run_llm_again"`` (default), ``"stop_on_first_tool"``,
            :class:`StopAtTools` (names of the agent's tools, checked when it is built but
            for its MCP servers'), or a function ``(ctx, results) -> final output or None``
            (see :data:`ToolsToFinalOutput`; sync or async, called in the agent actor after each
            batch).
        reset_tool_choice: drop a configured ``tool_choice`` once a tool ran, so it cannot loop.
        max_turns: model calls allowed while this agent is active.
        max_tool_depth: agent-as-tool nesting allowed when this agent is called as a tool.
        max_empty_output_retries: retries of empty structured output.
        max_output_retries: model replies with malformed output (tool arguments that are not
            a JSON object) answered with a correction in one run (default 3); the next one
            fails the run with ``ModelOutputError``. The value of the agent active when the
            malformed reply comes applies; the count is the run's.
        handoff_description: shown to agents that can hand off to this one.
        replicas: how many actors serve this agent (runs are spread over them).
        max_tool_calls_per_turn: tool calls of one model reply that are run (default 128);
            each call past it is answered with an error telling the model the cap.
        max_model_calls: model calls allowed in a run while this agent is active, those of its
            agent-as-tool runs included (default 1000; the smallest value among the agents
            active in the run applies). Each child run started by a batch gets an equal share
            of what is left; past the budget the run fails with ``MaxTurnsExceeded`` (a
            ``LimitExceeded`` whose ``limit`` is ``"max_model_calls"``).
        context_window: the model's context window in input tokens; None: the known window
            of the model's name (see :data:`raygents.models.tokens.CONTEXT_WINDOWS`), where
            there is one.
        compaction: how the history is kept within the window: :class:`Compaction`
            (summarise the older part), :class:`TrimToolOutputs` or :class:`TrimOldest`;
            None sends the whole history every turn.
    """

    def __init__(
        self,
        name: str,
        instructions: Instructions = "",
        *,
        tools: Sequence[Tool] = (),
        handoffs: Sequence[Agent | Handoff] = (),
        model: str | Model | None = None,
        model_settings: ModelSettings | None = None,
        mcp_servers: Sequence[Any] = (),
        input_guardrails: Sequence[Any] = (),
        output_guardrails: Sequence[Any] = (),
        approval: Any = None,
        session: Any = None,
        output_type: Any = None,
        schema_on_every_call: bool = False,
        tool_use_behavior: ToolUseBehavior = "run_llm_again",
        reset_tool_choice: bool = True,
        max_turns: int = 10,
        max_tool_depth: int = 16,
        max_empty_output_retries: int = 2,
        handoff_description: str | None = None,
        hooks: Any = None,
        replicas: int = 1,
        max_tool_calls_per_turn: int = DEFAULT_MAX_TOOL_CALLS_PER_TURN,
        max_model_calls: int = DEFAULT_MAX_MODEL_CALLS,
        max_output_retries: int = DEFAULT_MAX_OUTPUT_RETRIES,
        context_window: int | None = None,
        compaction: CompactionPolicy | None = None,
    ) -> None:
        self.name = name
        self.instructions = instructions
        self.tools = _listed(tools)
        self.handoffs = _listed(handoffs)
        self.model = model
        self.model_settings = model_settings or ModelSettings()
        self.mcp_servers = _listed(mcp_servers)
        self.input_guardrails = _listed(input_guardrails)
        self.output_guardrails = _listed(output_guardrails)
        self.approval = approval
        self.session = session
        self.output_type = output_type
        self.schema_on_every_call = schema_on_every_call
        self.tool_use_behavior = tool_use_behavior
        self.reset_tool_choice = reset_tool_choice
        self.max_turns = max_turns
        self.max_tool_depth = max_tool_depth
        self.max_empty_output_retries = max_empty_output_retries
        self.handoff_description = handoff_description
        self.hooks = hooks
        self.replicas = replicas
        self.max_tool_calls_per_turn = max_tool_calls_per_turn
        self.max_model_calls = max_model_calls
        self.max_output_retries = max_output_retries
        self.context_window = context_window
        self.compaction = compaction
        self.validate()

    def validate(self) -> None:
        """Check the options; raises :class:`UserError` naming the first bad one."""
        validate_agent_name(self.name)
        if not (isinstance(self.instructions, str) or callable(self.instructions)):
            raise UserError(f"agent {self.name!r}: instructions must be a str or a function")
        for field, low in (
            ("max_turns", 1),
            ("max_tool_depth", 1),
            ("replicas", 1),
            ("max_tool_calls_per_turn", 1),
            ("max_model_calls", 1),
            ("max_output_retries", 0),
            ("max_empty_output_retries", 0),
        ):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise UserError(
                    f"agent {self.name!r}: {field} must be an int >= {low}, got {value!r}"
                )
        for field in ("schema_on_every_call", "reset_tool_choice"):
            value = getattr(self, field)
            if not isinstance(value, bool):
                raise UserError(
                    f"agent {self.name!r}: {field} must be True or False, "
                    f"got {excerpt(repr(value), 80)}"
                )
        if not isinstance(self.handoff_description, str | None):
            raise UserError(
                f"agent {self.name!r}: handoff_description must be a str or None, "
                f"got {excerpt(repr(self.handoff_description), 80)}"
            )
        check_tool_use_behavior(f"agent {self.name!r}", self.tool_use_behavior)
        self._check_model()
        for field in _LISTS:
            value = getattr(self, field)
            if not isinstance(value, list):
                raise UserError(
                    f"agent {self.name!r}: {field} must be a list, got {excerpt(repr(value), 80)}"
                )
        self._check_parts()
        self._check_tools()
        self._check_handoffs()
        if isinstance(self.tool_use_behavior, StopAtTools):
            check_stop_at_tools(
                f"agent {self.name!r}",
                self.tool_use_behavior.tool_names,
                tools=[t.name for t in self.tools],
                handoffs={h.tool_name: h.agent.name for h in self.handoff_configs()},
                more_tools=bool(self.mcp_servers),
            )
        check_guardrails(f"agent {self.name!r}", self.input_guardrails, self.output_guardrails)
        self._check_context()

    def window(self) -> int | None:
        """The model's context window: ``context_window``, or the known one of its name."""
        if self.context_window is not None:
            return self.context_window
        name = self.model if isinstance(self.model, str) else getattr(self.model, "model", None)
        return known_window(name) if isinstance(name, str) else None

    def _check_context(self) -> None:
        window = self.context_window
        if window is not None and (
            not isinstance(window, int) or isinstance(window, bool) or window < 1
        ):
            raise UserError(
                f"agent {self.name!r}: context_window must be an int >= 1 or None, "
                f"got {window!r:.80}"
            )
        policy = self.compaction
        check_policy(f"agent {self.name!r}", policy)
        if not isinstance(policy, Compaction):
            return
        window = self.window()
        if policy.trigger_tokens is None and window is None and self.model is not None:
            raise UserError(
                f"agent {self.name!r}: Compaction() without trigger_tokens needs the model's "
                "context window, which is not known for its model: pass context_window= or "
                "Compaction(trigger_tokens=)"
            )
        if (
            policy.trigger_tokens is not None
            and window is not None
            and policy.trigger_tokens > window
        ):
            raise UserError(
                f"agent {self.name!r}: Compaction(trigger_tokens={policy.trigger_tokens}) is over "
                f"the model's context window ({window} tokens): requests would be refused "
                "before compaction starts; lower trigger_tokens"
            )
        summarizer = policy.summarizer
        if not (summarizer is None or isinstance(summarizer, Agent | Model)):
            raise UserError(
                f"agent {self.name!r}: Compaction(summarizer=) must be an Agent, a Model or "
                f"None, got {type(summarizer).__name__!r}"
            )

    def _check_model(self) -> None:
        model = self.model
        if not (model is None or isinstance(model, str | Model)):
            raise UserError(
                f"agent {self.name!r}: model must be a model name (str) or a Model (with async "
                f"respond(request)), got {excerpt(repr(model), 80)}"
            )
        if not isinstance(self.model_settings, ModelSettings):
            raise UserError(
                f"agent {self.name!r}: model_settings must be a ModelSettings, "
                f"got {excerpt(repr(self.model_settings), 80)}"
            )
        problem = output_type_problem(self.output_type)
        if problem is not None:
            raise UserError(f"agent {self.name!r}: output_type {problem}")

    def _check_parts(self) -> None:
        """The objects the agent's actor calls must have the methods it calls on them."""
        for server in self.mcp_servers:
            if not (_has(server, "list_tools") and isinstance(getattr(server, "name", None), str)):
                raise UserError(
                    f"agent {self.name!r}: mcp_servers must be MCP servers (MCPServerStdio, "
                    f"MCPServerStreamableHTTP), got {excerpt(repr(server), 80)}"
                )
        if not (self.approval is None or _has(self.approval, "needs")):
            raise UserError(
                f"agent {self.name!r}: approval must be an Approval(...) or None, "
                f"got {excerpt(repr(self.approval), 80)}"
            )
        if not (
            self.session is None or (_has(self.session, "load") and _has(self.session, "save"))
        ):
            raise UserError(
                f"agent {self.name!r}: session must be a Session (with load(session_id) and "
                f"save(session_id, messages)) or None, got {excerpt(repr(self.session), 80)}"
            )
        check_hooks(f"agent {self.name!r}", self.hooks)

    def _check_tools(self) -> None:
        for t in self.tools:
            if not isinstance(t, Tool):
                raise UserError(
                    f"agent {self.name!r}: tools must be Tool objects (use @tool or "
                    f"agent.as_tool()), got {t!r}"
                )
            check_needs_approval(t.name, t.needs_approval)
            check_options(f"tool {t.name!r}", t.options())

    def _check_handoffs(self) -> None:
        """Each handoff, and the names of the tools and handoff tools the model is offered
        (the agent actor refuses a name used twice; its MCP servers' tools it checks alone)."""
        owners: dict[str, str] = {}
        for h in self.handoffs:
            if not isinstance(h, Agent | Handoff):
                raise UserError(f"agent {self.name!r}: handoffs must be Agents or handoff(...)")
            if isinstance(h, Handoff):
                check_handoff(h)
            config = h if isinstance(h, Handoff) else handoff(h)
            self._claim_name(owners, config.tool_name, f"the handoff to {config.agent.name!r}")
        for t in self.tools:
            self._claim_name(owners, t.name, "the agent's tools")

    def _claim_name(self, owners: dict[str, str], name: str, owner: str) -> None:
        known = owners.get(name)
        if known is None:
            owners[name] = owner
            return
        used = "used twice" if known == owner else f"used by {known} and by {owner}"
        raise UserError(f"agent {self.name!r}: tool name {name!r} is {used}; rename one of them")

    def handoff_configs(self) -> list[Handoff]:
        """The handoffs as :class:`Handoff` configs (plain agents get the defaults)."""
        return [h if isinstance(h, Handoff) else handoff(h) for h in self.handoffs]

    def clone(self, **changes: Any) -> Agent:
        """A copy with ``changes`` applied; lists are copied, the original is unchanged."""
        new = copy.copy(self)
        for field in _LISTS:
            setattr(new, field, _listed(getattr(self, field)))
        for key, value in changes.items():
            if key not in self.__dict__:
                raise UserError(f"Agent.clone() got an unknown option {key!r}")
            setattr(new, key, list(value) if isinstance(value, tuple) else value)
        new.validate()
        return new

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        *,
        tool_name: str | None = None,
        tool_description: str | None = None,
        custom_output_extractor: OutputExtractor | None = None,
        is_enabled: IsEnabled = True,
        needs_approval: NeedsApproval = False,
    ) -> Tool:
        """This agent as a tool taking ``{input: string}``; each call is a child run.

        Args:
            name: the tool's name (``tool_name`` is the same, by the OpenAI Agents SDK's name).
            description: the tool's description (or ``tool_description``).
            custom_output_extractor: ``(RunResult) -> str`` (sync or async), called in the
                caller's actor with the child run's result; what it returns is the tool's
                result (by default, the child's final output text).
            is_enabled: whether the model is offered the tool: a bool, or a predicate
                ``(ctx, agent) -> bool`` asked each time the calling agent becomes active.
            needs_approval: as for :func:`~raygents.agents.tools.tool`: ``True``, or a
                predicate ``(ctx, arguments) -> bool``; a call that needs approval interrupts
                the run before the child run starts.
        """
        for given, alias, what in (
            (name, tool_name, "name"),
            (description, tool_description, "description"),
        ):
            if given is not None and alias is not None and given != alias:
                raise UserError(f"as_tool() got both {what}= and tool_{what}=; pass one")
        return AgentTool(
            self,
            name if name is not None else tool_name,
            description if description is not None else tool_description,
            output_extractor=custom_output_extractor,
            is_enabled=is_enabled,
            needs_approval=needs_approval,
        )

    async def system_prompt(
        self, ctx: RunContext, handoffs: Sequence[Handoff] | None = None
    ) -> str:
        """The instructions (evaluated if dynamic) plus the section on ``handoffs`` (by
        default, all of the agent's)."""
        instructions = self.instructions
        if callable(instructions):
            value = instructions(ctx, self)
            instructions = await value if inspect.isawaitable(value) else value
            if not isinstance(instructions, str):
                raise UserError(f"agent {self.name!r}: the instructions function must return str")
        offered = self.handoff_configs() if handoffs is None else handoffs
        return instructions + handoff_section(offered)

    def __repr__(self) -> str:
        return f"Agent({self.name!r})"


_LISTS = ("tools", "handoffs", "mcp_servers", "input_guardrails", "output_guardrails")
"""The options that are lists (copied by ``clone``)."""


def _listed(value: Any) -> Any:
    """A list option as a new list; a value that is not a collection of items (a single tool,
    a string) as it is, for :meth:`Agent.validate` to refuse."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        return value
    return list(value)


def _has(value: object, method: str) -> bool:
    return callable(getattr(value, method, None))


def agent_graph(start: Agent) -> dict[str, Agent]:
    """Every agent reachable from ``start`` through handoffs and agent tools, by name.

    Raises:
        UserError: two different agents in the graph share a name.
    """
    graph: dict[str, Agent] = {}
    pending = [start]
    while pending:
        agent = pending.pop()
        if not isinstance(agent, Agent):
            raise UserError(f"expected an Agent, got {type(agent).__name__!r}")
        known = graph.get(agent.name)
        if known is agent:
            continue
        if known is not None:
            raise UserError(
                f"two different agents are named {agent.name!r} in the graph of "
                f"{start.name!r}; give each agent a unique name"
            )
        agent.validate()
        graph[agent.name] = agent
        pending.extend(h.agent for h in agent.handoff_configs())
        pending.extend(t.agent for t in agent.tools if isinstance(t, AgentTool))
    return graph
