"""Compactor: applies an agent's compaction policy to a run's history before a model call."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from typing_extensions import assert_never

from raygents.agents.agent import Agent
from raygents.core import compaction as policies
from raygents.core.envelope import RunState
from raygents.core.messages import Message, ModelRequest, Usage
from raygents.models.base import Model, ModelSettings, resolve_model
from raygents.models.tokens import counter, messages_counter, request_tokens
from raygents.runtime.actor import spending
from raygents.runtime.actor.modelcall import call_model, model_name
from raygents.runtime.link.settings import Settings

__all__ = ["Compacted", "Compactor"]


@dataclass(frozen=True)
class Compacted:
    """What one compaction did (the ``compacted`` event's data)."""

    policy: str
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    summarized: int = 0
    """Messages the summary stands for (``Compaction`` only)."""
    duration_s: float = 0.0

    def data(self) -> dict[str, Any]:
        """As the event's ``data``."""
        return dict(self.__dict__)


class Compactor:
    """Keeps the histories of one agent's runs within its policy.

    Args:
        agent: the agent (its ``compaction``, ``context_window`` and model).
        model: resolves the agent's model in this process.
        namespace: the actor's namespace (the summariser's calls wait at its rate limiter
            and are told to its budget keeper).
        settings: the namespace's settings as last fetched (prices and tenant budgets).
    """

    def __init__(
        self, agent: Agent, model: Any, namespace: str, settings: Callable[[], Settings]
    ) -> None:
        self.agent = agent
        self._model = model
        self.namespace = namespace
        self._settings = settings
        self._summarizer: tuple[Model, str | None, Any] | None = None

    def tokens(self, state: RunState, request: ModelRequest) -> int:
        """The input tokens ``request`` would take (corrected by the run's last call)."""
        model = self._model()
        observed = None
        if state.prompt_tokens is not None and not callable(getattr(model, "count_tokens", None)):
            observed = (state.prompt_tokens, state.prompt_len)
        return request_tokens(counter(model, model_name(model)), request, observed)

    async def compact(
        self, state: RunState, request: ModelRequest
    ) -> tuple[RunState, Compacted | None]:
        """The run's state with its history compacted if its policy says so now, and what
        was done (None: nothing). The summariser's call is a model call of the run: it is
        priced and counted in the run's usage, asks the tenant's budget first and is told to
        it after (see :mod:`~raygents.runtime.actor.spending`).

        Raises:
            UserError: the run has a budget in dollars and the summariser's model no price.
            UsageLimitExceeded: the run's tenant reached its daily budget.
        """
        policy = self.agent.compaction
        if policy is None:
            return state, None
        started = time.perf_counter()
        before = self.tokens(state, request)
        count = messages_counter(counter(self._model(), model_name(self._model())), request)
        summarized = 0
        match policy:
            case policies.TrimToolOutputs(max_chars=chars, keep_last_turns=keep):
                messages = policies.trim_tool_outputs(state.messages, chars, keep)
            case policies.TrimOldest(max_tokens=limit):
                if before <= limit:
                    return state, None
                messages = policies.trim_oldest(state.messages, limit, count)
            case policies.Compaction():
                if before <= self._trigger(policy):
                    return state, None
                split = policies.split_for_summary(state.messages, policy.keep_last_turns)
                if split is None:
                    return state, None
                system, older, kept = split
                summary, usage = await self._summarize(state, older, policy)
                state = state.evolve(usage=state.usage + usage + Usage(requests=1))
                messages, summarized = policies.compacted(system, summary, kept), len(older)
            case _:
                assert_never(policy)
        if messages == state.messages:
            return state, None
        state = rewrite(state, messages)
        after = count(messages) + before - count(request.messages)
        done = Compacted(
            type(policy).__name__,
            before,
            max(after, 0),
            len(request.messages),
            len(messages),
            summarized,
            round(time.perf_counter() - started, 6),
        )
        return state, done

    def _trigger(self, policy: policies.Compaction) -> int:
        if policy.trigger_tokens is not None:
            return policy.trigger_tokens
        window = self.agent.window()
        if window is None:
            from raygents.errors import UserError

            raise UserError(
                f"agent {self.agent.name!r}: Compaction() without trigger_tokens needs the "
                "model's context window: pass context_window= or Compaction(trigger_tokens=)"
            )
        return window * 4 // 5

    async def _summarize(
        self, state: RunState, older: tuple[Message, ...], policy: policies.Compaction
    ) -> tuple[str, Usage]:
        model, instructions, settings = self._summarizer_for(policy)
        request = policies.summary_request(self.agent.name, older, instructions)
        if settings is not None:
            request = request.model_copy(update={"settings": settings})
        name, namespace = model_name(model), self.namespace
        await spending.before_call(self._settings(), namespace, state, request, name)
        response = await call_model(model, self.agent.name, request, None, namespace=namespace)
        response = spending.priced(self._settings(), namespace, state, request, response, name)
        return response.message.text, response.usage

    def _summarizer_for(self, policy: policies.Compaction) -> tuple[Model, str | None, Any]:
        """The summariser's model, instructions and settings, resolved once."""
        if self._summarizer is None:
            chosen = policy.summarizer
            if isinstance(chosen, Agent):
                own = chosen.instructions if isinstance(chosen.instructions, str) else ""
                self._summarizer = (
                    resolve_model(chosen.model),
                    own or policy.instructions,
                    chosen.model_settings.to_data(),
                )
            elif chosen is not None:
                self._summarizer = (chosen, policy.instructions, None)
            else:  # (the agent's own model, at the agent's price)
                price = self.agent.model_settings.price
                priced = None if price is None else ModelSettings(price=price).to_data()
                self._summarizer = (self._model(), policy.instructions, priced)
        return self._summarizer


def rewrite(state: RunState, messages: tuple[Message, ...]) -> RunState:
    """``state`` with a compacted history: its next record keeps only the messages before
    the first one that changed (a summary at the start: a full record; a trimmed tool result:
    a delta from it), the provider's last count no longer applies, and a session saves the
    compaction as one (see :func:`~raygents.core.compaction.summary_span`): the part of the
    history it loaded that the new first messages stand for, unless an ``input_filter``
    rewrote the history before (then the session's conversation is replaced)."""
    same = next(
        (i for i, (a, b) in enumerate(zip(state.messages, messages, strict=False)) if a != b),
        min(len(state.messages), len(messages)),
    )
    span = None
    if state.loaded_len is not None and (state.session_summary or not state.rewritten):
        before = state.session_summary or (0, 0)
        span = policies.summary_span(state.messages, messages, state.loaded_len, before)
    return state.evolve(
        messages=messages,
        recorded=min(state.recorded, same),
        input_len=min(state.input_len, len(messages)),
        rewritten=True,
        session_summary=span,
        prompt_tokens=None,
        prompt_len=0,
    )
