"""Messages, tool calls, usage, and the request and response exchanged with a model."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from raygents.core.parts import Part, TextPart, chat_part, join_text, to_parts
from raygents.core.pricing import Price
from raygents.core.toolcall import clean_text
from raygents.errors import UserError

__all__ = [
    "FinishReason",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "ReasoningItem",
    "Role",
    "ToolCall",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "to_messages",
]

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolResult(BaseModel):
    """What a tool call returns to the model. ``is_error`` is for hooks and events only.

    ``content`` may be a list of parts (text, :class:`~raygents.ImagePart`,
    :class:`~raygents.FilePart`, or OpenAI-style dicts): ``parts`` then holds them all, in
    order, and ``content`` their text.
    """

    model_config = ConfigDict(frozen=True)

    content: str
    is_error: bool = False
    parts: tuple[Part, ...] = ()
    """The result's parts, where it has others than text (an image a tool made, say)."""

    _clean = field_validator("content")(clean_text)

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        data = _split_parts(data)
        if isinstance(data, dict) and data.get("content") is None and data.get("parts"):
            data = {**data, "content": ""}  # (an image alone: a result's text is never None)
        return data

    def __init__(self, content: str | Sequence[Any], is_error: bool = False, **data: Any) -> None:
        super().__init__(content=content, is_error=is_error, **data)


class ToolCall(_Frozen):
    """One tool call chosen by the model."""

    id: str
    """The call id; tool messages answer it through ``tool_call_id``."""
    name: str
    """The tool's name."""
    arguments: str = "{}"
    """The arguments as a JSON text, as the model produced them (lone surrogates replaced)."""

    _clean = field_validator("id", "name", "arguments")(clean_text)

    def __init__(self, id: str, name: str, arguments: str = "{}", **data: Any) -> None:
        BaseModel.__init__(self, id=id, name=name, arguments=arguments, **data)


class Usage(_Frozen):
    """Token counts of one or more model calls."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    """Model calls counted in this usage (a run counts each of its own and its children's)."""
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those the provider served from its prompt cache (when it says)."""
    reasoning_tokens: int = 0
    """Of ``output_tokens``, those a reasoning model spent thinking (when the provider says)."""
    cost_usd: float | None = None
    """What the calls cost in US dollars, where a price is known (``init(prices=)``,
    ``ModelSettings(price=)``); None where none of them had a price. A sum counts the calls
    that had one."""

    def __init__(self, input_tokens: int = 0, output_tokens: int = 0, **data: Any) -> None:
        BaseModel.__init__(self, input_tokens=input_tokens, output_tokens=output_tokens, **data)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            requests=self.requests + other.requests,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cost_usd=_add_cost(self.cost_usd, other.cost_usd),
        )

    @property
    def total_tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens

    def at_price(self, price: Price | None) -> Usage:
        """This usage of one call with its cost at ``price``, unless the provider already
        said what it cost (or no price is known)."""
        if price is None or self.cost_usd is not None:
            return self
        cost = price.cost(self.input_tokens, self.output_tokens, self.cached_input_tokens)
        return self.model_copy(update={"cost_usd": cost})


def _add_cost(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else a + b


class ReasoningItem(_Frozen):
    """A reasoning model's thinking, as its API returned it, kept so that the next turn can
    send it back and the model keeps its chain of thought across turns, handoffs and a resume.

    The payload is opaque: raygents stores and checkpoints it as plain JSON and never reads
    it; only the adapter of the API that produced it sends it back (for the Responses API,
    the ``reasoning`` output item with its encrypted content), and every other adapter leaves
    it out of its requests.
    """

    api: str
    """The API whose item this is, e.g. ``"openai.responses"``; other adapters skip it."""
    data: dict[str, Any]
    """The item as the API sent it, with what its adapter needs to send it back in place (the
    Responses adapter adds the type and id of the output item that followed it); plain JSON."""

    @field_validator("data")
    @classmethod
    def _plain_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        # It is checkpointed and sent back to the model: refuse what could not be, here and
        # not at a checkpoint write in the middle of a run.
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"a reasoning item's data must be plain JSON ({exc})") from None
        return value


class Message(_Frozen):
    """One conversation message.

    Text that cannot be encoded as UTF-8 (lone surrogates, as ``os.listdir`` gives for a
    file name that is not UTF-8) is stored with U+FFFD in their place, so that checkpoints,
    sessions and model providers only ever see valid text.
    """

    role: Role
    content: str | None = None
    """The text of the message; ``None`` for an assistant message that only calls tools."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls of an assistant message."""
    tool_call_id: str | None = None
    """For a tool message: the id of the call it answers."""
    reasoning: tuple[ReasoningItem, ...] = ()
    """For an assistant message: the reasoning items the model produced before it, sent back
    by the adapter of the same API on later turns (see :class:`ReasoningItem`)."""
    summary: bool = False
    """This message is a summary that compaction wrote in place of earlier messages (see
    :class:`raygents.Compaction`); the earlier records of the run still hold those."""
    parts: tuple[Part, ...] = ()
    """The message's content as parts (text, images, files), in order, where it has others
    than text; ``content`` is then their text. Give a list as ``content`` to make them."""

    _clean = field_validator("content", "tool_call_id")(clean_text)

    @model_validator(mode="before")
    @classmethod
    def _split(cls, data: Any) -> Any:
        return _split_parts(data)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Messages without reasoning that are not summaries dump as they did before those
        fields existed (sessions and records written then, and readers of that age, stay as
        they are)."""
        data = handler(self)
        if isinstance(data, dict):
            if not self.summary:
                data.pop("summary", None)
            if not self.reasoning:
                data.pop("reasoning", None)
            if not self.parts:
                data.pop("parts", None)
        return data

    def __init__(
        self,
        role: Role,
        content: str | Sequence[Any] | None = None,
        tool_calls: Iterable[ToolCall] = (),
        tool_call_id: str | None = None,
        **data: Any,
    ) -> None:
        BaseModel.__init__(
            self,
            role=role,
            content=content,
            tool_calls=tuple(tool_calls),
            tool_call_id=tool_call_id,
            **data,
        )

    @property
    def text(self) -> str:
        """The message's text, or ``""`` when it has none."""
        return self.content or ""

    def to_openai(self) -> dict[str, Any]:
        """The message as a Chat Completions message dict (its reasoning items left out: Chat
        Completions has no place for them). A message of parts has them as its content (a
        part kept in the store, as raygents' own dump of it)."""
        content = [chat_part(p) for p in self.parts] if self.parts else self.content
        out: dict[str, Any] = {"role": self.role, "content": content}
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> Message:
        """Build a message from a Chat Completions message dict."""
        calls = []
        for raw in data.get("tool_calls") or ():
            fn = raw.get("function") or {}
            args = fn.get("arguments", "{}")
            if not isinstance(args, str):
                args = json.dumps(args)
            calls.append(ToolCall(str(raw.get("id", "")), str(fn.get("name", "")), args))
        content = data.get("content")
        return cls(
            data["role"],
            content,
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
        )


def _split_parts(data: Any) -> Any:
    """Constructor data with a list ``content`` made into ``parts`` and their text: parts
    that are all text become plain text; others are kept, never dropped.

    Raises:
        UserError: a part is of a type raygents does not carry, or is malformed.
    """
    if not isinstance(data, dict):
        return data
    content, given = data.get("content"), data.get("parts")
    if isinstance(content, list | tuple):
        parts = to_parts(content)
    elif given:
        parts = to_parts(given)
        if isinstance(content, str) and content and content != join_text(parts):
            parts = (TextPart(content), *parts)  # (a caption given beside the parts)
    else:
        return data
    text = join_text(parts)
    if all(isinstance(p, TextPart) for p in parts):
        return {**data, "content": text, "parts": ()}
    return {**data, "content": text or None, "parts": parts}


class ToolSpec(_Frozen):
    """What a model sees of a tool: its name, description and JSON-schema parameters."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class ModelSettingsFields:
    """The settings of a model call, declared once: :class:`raygents.ModelSettings` (what an
    agent is given) and :class:`ModelSettingsData` (what a request carries) are both made of
    these fields."""

    temperature: float | None = None
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    max_tokens: int | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    extra: dict[str, Any] | None = None
    price: Price | None = None
    """What the agent's model charges (wins over ``init(prices=)`` for its model's name);
    raygents' own, never sent to the provider."""


class ModelSettingsData(_Frozen, ModelSettingsFields):
    """Plain-data copy of :class:`raygents.ModelSettings` as sent in a request: the same
    fields (pydantic takes them from the dataclass base), checked.

    Type checkers see the fields as attributes but not as arguments of the constructor
    (pydantic's mypy plugin reads only pydantic bases): typed code builds one with
    ``ModelSettings(...).to_data()``.
    """


class ModelRequest(_Frozen):
    """Everything a model needs for one turn."""

    agent_name: str
    system: str = ""
    """The system prompt; empty means no system message is sent."""
    messages: tuple[Message, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    response_format: dict[str, Any] | None = None
    """``{"name": ..., "schema": ...}`` for strict JSON output, or ``None`` for free text."""
    settings: ModelSettingsData = Field(default_factory=ModelSettingsData)
    stream: bool = False
    """Whether the run asked for streamed model output."""


class ModelResponse(_Frozen):
    """A model's answer for one turn."""

    message: Message
    finish_reason: FinishReason = "stop"
    usage: Usage = Field(default_factory=Usage)

    def __init__(
        self,
        message: Message,
        finish_reason: FinishReason = "stop",
        usage: Usage | None = None,
        **data: Any,
    ) -> None:
        BaseModel.__init__(
            self, message=message, finish_reason=finish_reason, usage=usage or Usage(), **data
        )


def to_messages(value: str | Sequence[Message | Mapping[str, Any]]) -> tuple[Message, ...]:
    """Normalise a run input (a string, or messages and OpenAI-style dicts) to messages; a
    dict's ``"reasoning"`` and ``"summary"`` (as ``RunResult.to_input_list`` writes them) are
    kept."""
    if isinstance(value, str):
        return (Message("user", value),)
    out = []
    for index, item in enumerate(value):
        if isinstance(item, Message):
            out.append(item)
        elif isinstance(item, Mapping):
            message = _with_reasoning(Message.from_openai(item), item.get("reasoning"), index)
            out.append(_with_summary(message, item.get("summary", False), index))
        else:
            raise TypeError(f"input items must be Message or dict, got {type(item).__name__!r}")
    return tuple(out)


def _with_reasoning(message: Message, reasoning: Any, index: int) -> Message:
    """``message`` with the reasoning items of its input dict (None: none)."""
    if not reasoning:
        return message
    try:
        items = tuple(ReasoningItem.model_validate(item) for item in reasoning)
    except (ValidationError, TypeError) as exc:
        raise UserError(
            f"input item #{index}: 'reasoning' must be a list of reasoning items as "
            f"RunResult.to_input_list writes them ({exc})"
        ) from None
    return message.model_copy(update={"reasoning": items})


def _with_summary(message: Message, summary: Any, index: int) -> Message:
    """``message`` marked as a compaction summary where its input dict says so."""
    if type(summary) is not bool:
        raise UserError(
            f"input item #{index}: 'summary' must be true or false (a compaction summary, as "
            f"RunResult.to_input_list writes it), got {type(summary).__name__}"
        )
    return message.model_copy(update={"summary": True}) if summary else message
