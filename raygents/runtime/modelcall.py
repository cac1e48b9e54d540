"""Model calls from an agent actor: a request answered, streamed or not, checked."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from raygents.errors import ModelError, RaygentsError
from raygents.messages import ModelRequest, ModelResponse
from raygents.models.base import Model, check_response

__all__ = ["call_model"]


async def call_model(
    model: Model,
    agent_name: str,
    request: ModelRequest,
    on_delta: Callable[[str], None] | None,
) -> ModelResponse:
    """The model's checked answer to ``request``, streamed (each text delta to ``on_delta``)
    when ``on_delta`` is given and the model streams. Whatever the provider raises comes back
    as a ``ModelError``."""
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
