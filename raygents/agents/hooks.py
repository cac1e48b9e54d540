"""Run hooks: callbacks that observe a run, per agent in its actor or per run in the driver
(where :mod:`~raygents.runtime.driver.hookrelay` delivers them)."""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any, Generic

from raygents.core.context import TContext

if TYPE_CHECKING:
    # Recursive data: hooks are given the agent they run for, and an agent holds its hooks.
    from raygents.agents.agent import Agent
    from raygents.core.context import RunContext
    from raygents.core.messages import Message, ModelRequest, ModelResponse, ToolCall, ToolResult

__all__ = ["AgentHooks", "RunHooks", "check_hooks", "fire", "wants_model_calls"]

log = logging.getLogger("raygents")


class RunHooks(Generic[TContext]):
    """Base class for hooks; override the methods you need (sync or async).

    Hooks are given two ways. Per agent (``Agent(hooks=...)``), they run inside that agent's
    actor while it is active (a copy of the object lives in each actor: state kept on it is
    that actor's), so after a handoff the target's hooks fire. Per run (``run(..., hooks=)``,
    ``start(..., hooks=)``), one object in the driver sees every agent of the run (handoff
    targets and agent-as-tool children included): its calls are made from the run's events,
    in order, and ``result()`` returns once they all ran. A run-level hook gets
    ``on_run_start``, ``on_agent_start``, ``on_tool_start``, ``on_tool_end``, ``on_handoff``,
    ``on_agent_end``, ``on_checkpoint`` and ``on_run_end``; the model-call hooks
    (``on_llm_start``, ``on_llm_end``), ``on_guardrail_tripped`` and ``on_restore`` run per
    agent only. Run-level hooks run on the driver's raygents event loop: keep sync ones quick.

    A hook that raises is logged with the run id and never breaks the run. Order within a
    turn: ``on_llm_start``, ``on_llm_end``, then per tool call ``on_tool_start`` /
    ``on_tool_end`` (always paired), then ``on_checkpoint`` (the record of a batch's results
    is written while the next model call runs: its
    ``on_checkpoint`` comes between that call's ``on_llm_start`` and ``on_llm_end``);
    ``on_handoff`` fires on the source agent; ``on_run_start`` when a run starts or resumes
    (``on_restore`` first on resume) and ``on_run_end`` whenever it stops; ``on_agent_start``
    each time the agent becomes active in a run (its start, a handoff to it, a resume), after
    ``on_run_start``. The context of ``on_llm_end`` counts the usage of the call it reports.
    """

    async def on_run_start(self, ctx: RunContext, agent: Agent, messages: list[Message]) -> None:
        """A run started (or resumed) on ``agent``."""

    async def on_run_end(
        self, ctx: RunContext, agent: Agent, output: str | None, error: BaseException | None
    ) -> None:
        """The run stopped: completed (``output``), failed, suspended or interrupted (``error``)."""

    async def on_agent_start(self, ctx: RunContext, agent: Agent) -> None:
        """``agent`` became active in the run: the run started on it, was handed to it, or
        resumed on it."""

    async def on_agent_end(self, ctx: RunContext, agent: Agent, output: str) -> None:
        """``agent`` produced the final output of its run or child run."""

    async def on_llm_start(self, ctx: RunContext, agent: Agent, request: ModelRequest) -> None:
        """A model call is about to start."""

    async def on_llm_end(self, ctx: RunContext, agent: Agent, response: ModelResponse) -> None:
        """A model call returned; ``ctx.usage`` includes its usage."""

    async def on_tool_start(self, ctx: RunContext, agent: Agent, call: ToolCall) -> None:
        """A tool call is about to run."""

    async def on_tool_end(
        self, ctx: RunContext, agent: Agent, call: ToolCall, result: ToolResult
    ) -> None:
        """A tool call finished (errors included, as error results)."""

    async def on_handoff(self, ctx: RunContext, source: Agent, target: Agent) -> None:
        """The run is handed from ``source`` to ``target``."""

    async def on_guardrail_tripped(
        self, ctx: RunContext, agent: Agent, guardrail: str, message: str
    ) -> None:
        """A guardrail tripped."""

    async def on_checkpoint(self, ctx: RunContext, agent: Agent, seq: int, status: str) -> None:
        """A checkpoint record was stored."""

    async def on_restore(self, ctx: RunContext, agent: Agent, seq: int) -> None:
        """The run was restored from checkpoint ``seq``."""


class AgentHooks(Generic[TContext]):
    """The OpenAI Agents SDK's per-agent hooks, with its names and argument order, for
    ``Agent(hooks=)``; override the methods you need (sync or async). They run in the agent's
    actor, as :class:`RunHooks` given to an agent do.

    ``on_start`` / ``on_end`` are :class:`RunHooks`' ``on_agent_start`` / ``on_agent_end``;
    ``on_handoff(ctx, agent, source)`` fires on the hooks of the agent handing off, ``agent``
    being the one it hands to (the SDK's order: :class:`RunHooks`' ``on_handoff`` takes
    ``(ctx, source, target)``); ``on_llm_start`` gets the system prompt and the input as
    Chat Completions dicts.
    """

    async def on_start(self, ctx: RunContext, agent: Agent) -> None:
        """``agent`` became active in the run."""

    async def on_end(self, ctx: RunContext, agent: Agent, output: Any) -> None:
        """``agent`` produced the final output (typed, as the result holds it)."""

    async def on_handoff(self, ctx: RunContext, agent: Agent, source: Agent) -> None:
        """``source`` (this hooks' agent) hands the run to ``agent``."""

    async def on_tool_start(self, ctx: RunContext, agent: Agent, call: ToolCall) -> None:
        """A tool call is about to run."""

    async def on_tool_end(
        self, ctx: RunContext, agent: Agent, call: ToolCall, result: ToolResult
    ) -> None:
        """A tool call finished."""

    async def on_llm_start(
        self, ctx: RunContext, agent: Agent, system_prompt: str | None, input_items: list[Any]
    ) -> None:
        """A model call is about to start."""

    async def on_llm_end(self, ctx: RunContext, agent: Agent, response: ModelResponse) -> None:
        """A model call returned; ``ctx.usage`` includes its usage."""


_AGENT_HOOKS = {"on_agent_start": "on_start", "on_agent_end": "on_end"}
""":class:`RunHooks` names whose :class:`AgentHooks` method has another name."""


async def fire(hooks: Any, method: str, ctx: RunContext, *args: Any) -> None:
    """Call ``hooks.<method>(ctx, *args)`` if there are hooks; log and swallow its errors.
    An :class:`AgentHooks` gets the call under its own name, with its arguments."""
    if hooks is None:
        return
    for hook in hooks if isinstance(hooks, list | tuple) else (hooks,):
        name, given = method, args
        if isinstance(hook, AgentHooks):
            name, given = _AGENT_HOOKS.get(method, method), _agent_args(method, args)
        fn = getattr(hook, name, None)
        if fn is None:
            continue
        if name == "on_llm_start" and not isinstance(hook, AgentHooks) and _takes_sdk_input(fn):
            given = _agent_args(name, args)
        try:
            result = fn(ctx, *given)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("hook %s.%s failed in run %s", type(hook).__name__, name, ctx.run_id)


def _agent_args(method: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A hook call's arguments in the SDK's order and shape."""
    if method == "on_handoff":
        source, target = args
        return target, source
    if method == "on_llm_start":
        agent, request = args
        input_items = [m.to_openai() for m in request.messages]
        return agent, request.system or None, input_items
    return args


def _takes_sdk_input(fn: Any) -> bool:
    """Whether an ``on_llm_start`` takes the SDK's ``(ctx, agent, system_prompt,
    input_items)`` rather than ``(ctx, agent, request)``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 4


def wants_model_calls(hooks: Any) -> bool:
    """Whether run-level ``hooks`` have model-call hooks of their own (the run then sends
    the events that carry them)."""
    plain = {getattr(base, name) for base in (RunHooks, AgentHooks) for name in _MODEL_CALL_HOOKS}
    for hook in hooks if isinstance(hooks, list | tuple) else [] if hooks is None else [hooks]:
        for name in _MODEL_CALL_HOOKS:
            fn = getattr(hook, name, None)
            if callable(fn) and getattr(fn, "__func__", fn) not in plain:
                return True
    return False


_MODEL_CALL_HOOKS = ("on_llm_start", "on_llm_end")


_METHODS = tuple(name for name in vars(RunHooks) if name.startswith("on_"))
"""What a hooks object may have: a hook fires only where it has one of these methods."""


def check_hooks(owner: str, hooks: object) -> None:
    """Check hooks as an agent or a run takes them: a :class:`RunHooks` (any object with some
    of its ``on_...`` methods), a list of them, or None.

    Raises:
        UserError: one is not (no hook of it would ever fire), naming ``owner``.
    """
    from raygents.errors import UserError, excerpt

    for hook in hooks if isinstance(hooks, list | tuple) else [] if hooks is None else [hooks]:
        if isinstance(hook, AgentHooks):
            continue
        if not any(callable(getattr(hook, method, None)) for method in _METHODS):
            raise UserError(
                f"{owner}: hooks must be a RunHooks or an AgentHooks (an object with some of "
                f"their on_... methods), a list of them, or None, got {excerpt(repr(hook), 80)}"
            )
        problem = _sdk_agent_hooks(hook)
        if problem:
            raise UserError(
                f"{owner}: {type(hook).__name__} {problem}, as the OpenAI Agents SDK's "
                "AgentHooks do; a RunHooks would not call it so: subclass rg.AgentHooks (the "
                "SDK's names and argument order), or use RunHooks' on_agent_start, on_agent_end "
                "and on_handoff(ctx, source, target)"
            )


def _sdk_agent_hooks(hook: object) -> str:
    """What marks a hooks object that is not an :class:`AgentHooks` as written for the SDK's
    ``AgentHooks`` (whose calls it would miss, or get with their arguments swapped), if
    anything."""
    names = [name for name in ("on_start", "on_end") if callable(getattr(hook, name, None))]
    if names:
        return f"has {' and '.join(names)}"
    handoff = getattr(hook, "on_handoff", None)
    try:
        params = list(inspect.signature(handoff).parameters) if callable(handoff) else []
    except (TypeError, ValueError):
        params = []
    if params[1:3] == ["agent", "source"]:
        return "takes on_handoff(ctx, agent, source)"
    return ""
