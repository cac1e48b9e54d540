"""The Model protocol, model settings, how a model name becomes a model, and the size caps a
model's answer is held to."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from raygents.core.messages import (
    ModelRequest,
    ModelResponse,
    ModelSettingsData,
    ModelSettingsFields,
)
from raygents.core.pricing import Price
from raygents.errors import PayloadTooLarge, UserError

__all__ = ["Model", "ModelSettings", "StreamingModel", "check_response", "resolve_model"]


@runtime_checkable
class Model(Protocol):
    """A language model: one async call per turn.

    A model may also define ``stream(request)``, an async iterator that yields text deltas
    (``str``) and ends with the complete :class:`ModelResponse`, and ``count_tokens(request)``,
    the input tokens a request would take (see :mod:`raygents.models.tokens` for how requests
    are counted without it).
    """

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """Answer one turn."""
        ...


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model that can stream its answer."""

    def stream(self, request: ModelRequest) -> AsyncIterator[str | ModelResponse]:
        """Yield text deltas, then the complete response."""
        ...


@dataclass(frozen=True)
class ModelSettings(ModelSettingsFields):
    """Sampling and tool-choice settings forwarded to the model.

    ``parallel_tool_calls`` is only a hint to the provider: raygents runs every tool call of a
    turn in parallel either way. ``extra`` is merged into the provider request as is.
    ``price`` is what the model charges (for ``Usage.cost_usd`` and ``max_cost_usd``); it
    is never sent. The fields are those of
    :class:`~raygents.core.messages.ModelSettingsFields`.
    """

    def __post_init__(self) -> None:
        if self.price is not None and not isinstance(self.price, Price):
            raise UserError(
                f"ModelSettings price must be a Price(input_per_mtok=, output_per_mtok=) or "
                f"None, got {type(self.price).__name__}"
            )

    def to_data(self) -> ModelSettingsData:
        """The settings as plain request data."""
        return ModelSettingsData(**self.__dict__)


RESPONSES_PREFIX = "responses:"
"""A model name that starts with it is served through the Responses API."""
CHAT_PREFIX = "chat:"
"""A model name that starts with it is served through Chat Completions (the default)."""


def resolve_model(model: str | Model | None) -> Model:
    """Turn an agent's ``model`` option into a model, reading the environment for names.

    A name is served through Chat Completions by
    :class:`~raygents.models.openai.OpenAIChatModel`, unless it starts with ``responses:``
    (``"responses:gpt-5"``): then through the Responses API by
    :class:`~raygents.models.responses.OpenAIResponsesModel`. ``chat:`` says Chat Completions
    explicitly. ``None`` means ``$RAYGENTS_MODEL`` (default ``gpt-4o-mini``), which may carry
    a prefix too.

    Raises:
        UserError: the name is empty after its prefix.
    """
    if model is not None and not isinstance(model, str):
        return model
    name = model or os.environ.get("RAYGENTS_MODEL") or "gpt-4o-mini"
    if name.startswith(RESPONSES_PREFIX):
        from raygents.models.responses import OpenAIResponsesModel

        return OpenAIResponsesModel(_unprefixed(name, RESPONSES_PREFIX))
    from raygents.models.openai import OpenAIChatModel

    if name.startswith(CHAT_PREFIX):
        return OpenAIChatModel(_unprefixed(name, CHAT_PREFIX))
    return OpenAIChatModel(name)


def _unprefixed(name: str, prefix: str) -> str:
    rest = name[len(prefix) :]
    if not rest:
        raise UserError(f"model name {name!r} has no model after {prefix!r}, e.g. '{prefix}gpt-5'")
    return rest


def check_response(response: ModelResponse, agent_name: str) -> ModelResponse:
    """``response``, once its text, its reasoning items and each tool call's arguments are
    checked against ``MAX_PAYLOAD_BYTES`` (``"model output"``, ``"tool arguments"``), before
    the answer goes anywhere: into events, hooks, a checkpoint or a tool task.

    Raises:
        PayloadTooLarge: the text, the reasoning items, or the arguments of a call, are over
            their cap.
    """
    message = response.message
    PayloadTooLarge.check("model output", message.text, what=f"of agent {agent_name!r}")
    if message.reasoning:
        # they go back to the model on every later turn, and into checkpoints and sessions
        items = json.dumps([item.data for item in message.reasoning])
        PayloadTooLarge.check("model output", items, what=f"(reasoning) of agent {agent_name!r}")
    for call in message.tool_calls:
        what = f"of call {call.id[:64]!r} to tool {call.name[:64]!r}"
        PayloadTooLarge.check("tool arguments", call.arguments, what=what)
    return response
