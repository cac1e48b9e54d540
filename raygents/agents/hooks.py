"""Run hooks: callbacks that observe a run, per agent in its actor or per run in the driver
(where :mod:`~raygents.runtime.driver.hookrelay` delivers them)."""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Recursive data: hooks are given the agent they run for, and an agent holds its hooks.
    from raygents.agents.agent import Agent
    from raygents.core.context import RunContext
    from raygents.core.messages import Message, ModelRequest, ModelResponse, ToolCall, ToolResult

__all__ = ["RunHooks", "check_hooks", "fire"]

log = logging.getLogger("raygents")


class RunHooks:
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


async def fire(hooks: Any, method: str, ctx: RunContext, *args: Any) -> None:
    """Call ``hooks.<method>(ctx, *args)`` if there are hooks; log and swallow its errors."""
    if hooks is None:
        return
    for hook in hooks if isinstance(hooks, list | tuple) else (hooks,):
        fn = getattr(hook, method, None)
        if fn is None:
            continue
        try:
            result = fn(ctx, *args)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("hook %s.%s failed in run %s", type(hook).__name__, method, ctx.run_id)


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
        if not any(callable(getattr(hook, method, None)) for method in _METHODS):
            raise UserError(
                f"{owner}: hooks must be a RunHooks (an object with some of its on_... "
                f"methods), a list of them, or None, got {excerpt(repr(hook), 80)}"
            )
