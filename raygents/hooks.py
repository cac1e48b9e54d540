"""Run hooks: callbacks that observe a run from inside the agent actors."""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raygents.agent import Agent
    from raygents.messages import Message, ModelRequest, ModelResponse, ToolCall
    from raygents.tools import RunContext, ToolResult

__all__ = ["RunHooks", "fire"]

log = logging.getLogger("raygents")


class RunHooks:
    """Base class for hooks; override the methods you need (sync or async).

    Hooks are set per agent (``Agent(hooks=...)``) and run inside that agent's actor while it
    is active, so after a handoff the target's hooks fire. A hook that raises is logged with the
    run id and never breaks the run. Order within a turn: ``on_llm_start``, ``on_llm_end``, then
    per tool call ``on_tool_start`` / ``on_tool_end`` (always paired), then ``on_checkpoint``
    (the record of a batch's results is written while the next model call runs: its
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
