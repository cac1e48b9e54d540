"""A model computed by a function, and builders of model replies: for offline runs (the demo)
and for tests (:mod:`raygents.testing` re-exports them)."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from raygents.core.messages import Message, ModelRequest, ModelResponse, ToolCall, Usage
from raygents.errors import ModelError

__all__ = ["FunctionModel", "apply_step", "call", "calls", "stream_text", "text"]

_ids = itertools.count(1)


def text(content: str, *, input_tokens: int = 10, output_tokens: int = 5) -> ModelResponse:
    """A model reply that ends the turn with ``content``."""
    return ModelResponse(Message("assistant", content), "stop", Usage(input_tokens, output_tokens))


def call(
    name: str, arguments: dict[str, Any] | str | None = None, *, id: str | None = None
) -> ToolCall:
    """A tool call; ``arguments`` as a dict (serialised to JSON) or a raw JSON string."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall(id or f"call_{next(_ids)}", name, args)


def calls(
    *items: ToolCall | tuple[str, dict[str, Any]], input_tokens: int = 10, output_tokens: int = 5
) -> ModelResponse:
    """A model reply asking for the given tool calls (``finish_reason="tool_calls"``)."""
    out = [c if isinstance(c, ToolCall) else call(c[0], c[1]) for c in items]
    return ModelResponse(
        Message("assistant", None, tool_calls=out), "tool_calls", Usage(input_tokens, output_tokens)
    )


async def apply_step(step: Any, request: ModelRequest) -> ModelResponse:
    if isinstance(step, BaseException):
        raise step
    if callable(step) and not isinstance(step, ModelResponse):
        step = step(request)
        if inspect.isawaitable(step):
            step = await step
    if not isinstance(step, ModelResponse):
        raise ModelError(f"a scripted step produced {type(step).__name__!r}, not a ModelResponse")
    return step


async def stream_text(response: ModelResponse) -> AsyncIterator[str | ModelResponse]:
    content = response.message.content or ""
    for piece in _pieces(content):
        yield piece
        await asyncio.sleep(0)
    yield response


def _pieces(content: str) -> list[str]:
    words = content.split(" ")
    return [w if i == len(words) - 1 else w + " " for i, w in enumerate(words)] if content else []


class FunctionModel:
    """A model computed by ``fn(request) -> ModelResponse`` (sync or async)."""

    def __init__(
        self,
        fn: Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]],
        *,
        latency_s: float = 0.0,
    ) -> None:
        if not callable(fn):
            raise TypeError("FunctionModel needs a function")
        self.fn = fn
        self.latency_s = latency_s

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """Reply with ``fn(request)``."""
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return await apply_step(self.fn, request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[str | ModelResponse]:
        """Reply with ``fn(request)``, its text streamed word by word."""
        response = await self.respond(request)
        async for item in stream_text(response):
            yield item
