"""The Responses API's input items: a run's history as the API takes it back, each reasoning
item the API returned in its place."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from raygents.core.messages import Message, ReasoningItem, ToolCall, ToolSpec
from raygents.models.content import check_assistant, responses_content, responses_output
from raygents.models.endpoint import strict_parameters

__all__ = [
    "NEXT",
    "REASONING_API",
    "input_items",
    "tool_choice_param",
    "tool_param",
    "with_next",
]

REASONING_API = "openai.responses"
"""The ``api`` of the :class:`~raygents.core.messages.ReasoningItem` this adapter keeps."""
REASONING_FIELDS = ("type", "id", "summary", "encrypted_content")
"""The fields of a reasoning item sent back as input (its ``status`` is output only)."""
NEXT = "raygents:next"
"""The key, in a kept reasoning item, of the output item that followed it (its type and id):
the API wants each reasoning item sent back right before that item, with its id."""


def input_items(messages: tuple[Message, ...], model: str = "") -> Iterator[dict[str, Any]]:
    """The history as Responses input items; reasoning of other APIs is left out.

    Raises:
        UserError: a message holds a part the API does not take there (see
            :mod:`raygents.models.content`).
    """
    for message in messages:
        if message.role == "tool":
            yield {
                "type": "function_call_output",
                "call_id": message.tool_call_id or "",
                "output": responses_output(message, model),
            }
        elif message.role == "assistant":
            check_assistant(message, model)
            yield from _assistant_items(message)
        else:
            yield {"role": message.role, "content": responses_content(message, model)}


def _assistant_items(message: Message) -> Iterator[dict[str, Any]]:
    """An assistant message as the output items it came from: each reasoning item this API
    produced, right before the item that followed it (with that item's id, as the API sent
    both), then the rest of the message and its calls."""
    text = message.content or not message.tool_calls
    calls = {call.id: call for call in message.tool_calls}
    for item in message.reasoning:
        # Without its encrypted content a reasoning item can only be referenced by id, and
        # with store=False the provider kept nothing to reference.
        if item.api != REASONING_API or not item.data.get("encrypted_content"):
            continue
        yield {k: item.data[k] for k in REASONING_FIELDS if k in item.data}
        following = item.data.get(NEXT)
        if not isinstance(following, Mapping) or not following.get("id"):
            continue
        kind, ident = following.get("type"), str(following["id"])
        if kind == "message" and text:
            text = False
            yield {
                "type": "message",
                "role": "assistant",
                "id": ident,
                "status": "completed",
                "content": [{"type": "output_text", "text": message.text, "annotations": []}],
            }
        elif kind == "function_call" and following.get("call_id") in calls:
            yield _call_item(calls.pop(following["call_id"]), ident)
    if text:
        yield {"role": "assistant", "content": message.text}
    for call in calls.values():
        yield _call_item(call, None)


def _call_item(call: ToolCall, ident: str | None) -> dict[str, Any]:
    item = {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
    }
    if ident is not None:
        item["id"] = ident
    return item


def with_next(item: ReasoningItem, following: object) -> ReasoningItem:
    """``item`` with the type and id of the output item that followed it."""
    if not isinstance(following, Mapping) or following.get("type") not in (
        "message",
        "function_call",
    ):
        return item
    keys = ("type", "id", "call_id")
    shown = {k: following[k] for k in keys if isinstance(following.get(k), str)}
    return ReasoningItem(api=item.api, data={**item.data, NEXT: shown})


def tool_param(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": strict_parameters(tool),
        "strict": True,
    }


def tool_choice_param(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    """A tool choice in the Responses shape; the Chat Completions shape of a named tool
    (``{"type": "function", "function": {"name": ...}}``) is accepted too."""
    if isinstance(choice, dict) and isinstance(choice.get("function"), Mapping):
        return {"type": "function", "name": choice["function"].get("name")}
    return choice
