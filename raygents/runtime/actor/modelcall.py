"""Model calls from an agent actor: a request answered, streamed or not, checked."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from raygents.core.messages import ModelRequest, ModelResponse
from raygents.errors import ModelError, RaygentsError
from raygents.models.base import Model, check_response
from raygents.runtime.actor import gates
from raygents.telemetry import metrics, tracing

__all__ = ["call_model"]


async def call_model(
    model: Model,
    agent_name: str,
    request: ModelRequest,
    on_delta: Callable[[str], None] | None,
    *,
    namespace: str | None = None,
    on_turn: Callable[[], None] | None = None,
) -> ModelResponse:
    """The model's checked answer to ``request``, streamed (each text delta to ``on_delta``)
    when ``on_delta`` is given and the model streams. Whatever the provider raises comes back
    as a ``ModelError``.

    Where the namespace limits the model's rate (``init(rate_limits=)``), the call first waits
    for its turn at the namespace's limiter (a wait, not a failure; cancelling the call ends
    it), and its usage corrects the limiter's token estimate afterwards; a call that fails
    reports no usage and gives its estimate back (a request the provider refuses, too large
    for its context say, must not hold every agent of the namespace back). A cancelled call
    keeps its estimate: the provider may have worked on it. ``namespace`` is the
    agent actor's (None: no limits apply). ``on_turn`` is called as the call goes out."""
    name = model_name(model)
    gate = await gates.gate(namespace) if name is not None else None
    limited = False
    if gate is not None and name is not None:
        estimate = estimate_tokens(request)
        limited = await gate.acquire(name, estimate)
    if on_turn is not None:
        on_turn()
    if not limited:
        return await _timed(model, agent_name, request, on_delta)
    assert gate is not None and name is not None
    try:
        response = await _timed(model, agent_name, request, on_delta)
    except Exception:
        gate.settle(name, estimate, 0)
        raise
    gate.settle(name, estimate, response.usage.input_tokens + response.usage.output_tokens)
    return response


async def _timed(
    model: Model,
    agent_name: str,
    request: ModelRequest,
    on_delta: Callable[[str], None] | None,
) -> ModelResponse:
    """:func:`_call`, its latency and tokens recorded in raygents' metrics."""
    label = model_name(model) or type(model).__name__
    started = time.perf_counter()
    try:
        response = await _call(model, agent_name, request, on_delta)
    except Exception:
        metrics.model_call(agent_name, label, time.perf_counter() - started, None)
        raise
    metrics.model_call(agent_name, label, time.perf_counter() - started, response.usage)
    return response


def model_name(model: Model) -> str | None:
    """The name a model is rate-limited by: its ``model`` attribute (the provider's model
    name, as :class:`~raygents.models.openai.OpenAIChatModel` has), or None."""
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else None


def estimate_tokens(request: ModelRequest) -> int:
    """A rough token count of a call before it goes: its text at four characters a token,
    plus the answer's cap when the request sets one."""
    chars = len(request.system or "") + sum(len(m.text or "") for m in request.messages)
    return chars // 4 + 1 + (request.settings.max_tokens or 0)


async def _call(
    model: Model,
    agent_name: str,
    request: ModelRequest,
    on_delta: Callable[[str], None] | None,
) -> ModelResponse:
    with tracing.chat_span(model, agent_name) as span:
        response = await _answered(model, agent_name, request, on_delta)
        tracing.chat_done(span, response)
    return response


async def _answered(
    model: Model,
    agent_name: str,
    request: ModelRequest,
    on_delta: Callable[[str], None] | None,
) -> ModelResponse:
    streamer = getattr(model, "stream", None)
    try:
        if on_delta is not None and streamer is not None:
            response = await _streamed(streamer(request), agent_name, on_delta)
        else:
            response = await model.respond(request)
    except RaygentsError:
        raise
    except Exception as exc:  # provider errors must not escape as foreign exceptions
        raise ModelError(
            f"cannot call model for agent {agent_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(response, ModelResponse):
        raise ModelError(
            f"model of agent {agent_name!r} returned {type(response).__name__!r}, not ModelResponse"
        )
    return check_response(response, agent_name)


async def _streamed(
    chunks: AsyncIterator[Any], agent_name: str, on_delta: Callable[[str], None]
) -> ModelResponse:
    final = None
    async for chunk in chunks:
        if isinstance(chunk, str):
            if chunk:
                on_delta(chunk)
        elif isinstance(chunk, ModelResponse):
            final = chunk
    if final is None:
        raise ModelError(f"the streaming model of agent {agent_name!r} ended without a response")
    return final
