"""Messages of parts (text, images, files) as the OpenAI adapters send them: what each API
takes where, and a clear refusal of what it does not (a part is never dropped)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from raygents.core.messages import Message
from raygents.core.parts import FilePart, ImagePart, Part, TextPart, data_url
from raygents.errors import UserError

__all__ = ["chat_message", "check_assistant", "responses_content", "responses_output"]


def chat_message(message: Message, model: str) -> dict[str, Any]:
    """A message as Chat Completions takes it: parts in user messages only.

    Raises:
        UserError: a part other than text is in a system, assistant or tool message (a tool
            result with an image needs the Responses API), or its bytes were not loaded.
    """
    for part in _others(message):
        _check_loaded(part, model)
        if message.role != "user":
            raise UserError(_refusal(message, part, model, "Chat Completions"))
    return message.to_openai()


def responses_content(message: Message, model: str) -> str | list[dict[str, Any]]:
    """The content of a system or user message as Responses input: text, or its parts.

    Raises:
        UserError: a part other than text is in a system message, or was not loaded.
    """
    if not message.parts:
        return message.text
    for part in _others(message):
        _check_loaded(part, model)
        if message.role != "user":
            raise UserError(_refusal(message, part, model, "the Responses API"))
    return [_input_part(p) for p in message.parts]


def responses_output(message: Message, model: str) -> str | list[dict[str, Any]]:
    """A tool message's content as a Responses ``function_call_output``'s output: text, or
    its parts (the API takes images and files in tool results).

    Raises:
        UserError: a part's bytes were not loaded.
    """
    if not message.parts:
        return message.text
    for part in _others(message):
        _check_loaded(part, model)
    return [_input_part(p) for p in message.parts]


def check_assistant(message: Message, model: str) -> None:
    """Raises: UserError: an assistant message carries a part other than text (neither API
    takes one back from the assistant)."""
    for part in _others(message):
        raise UserError(_refusal(message, part, model, "the Responses API"))


def _others(message: Message) -> Iterator[ImagePart | FilePart]:
    return (p for p in message.parts if not isinstance(p, TextPart))


def _input_part(part: Part) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ImagePart):
        url = part.url if part.url is not None else data_url(part)
        return {"type": "input_image", "image_url": url, "detail": part.detail or "auto"}
    if part.file_id is not None:
        return {"type": "input_file", "file_id": part.file_id}
    return {"type": "input_file", "filename": part.filename, "file_data": data_url(part)}


def _check_loaded(part: ImagePart | FilePart, model: str) -> None:
    if part.blob is not None:
        raise UserError(
            f"model {model!r} was given a {part.kind} part whose bytes are kept in the store "
            f"({part.blob}) and were not loaded: runs load them before each model call; a "
            "request built by hand needs the bytes inline (data=)"
        )


def _refusal(message: Message, part: ImagePart | FilePart, model: str, api: str) -> str:
    where = (
        f"the result of tool call {message.tool_call_id!r}"
        if message.role == "tool"
        else f"a {message.role} message"
    )
    advice = (
        "use OpenAIResponsesModel, which takes images and files in tool results"
        if message.role == "tool"
        else "put images and files in user messages"
    )
    return (
        f"model {model!r} ({api}) cannot take the {part.kind} part in {where}: {api} takes "
        f"images and files in user messages only; {advice}"
    )
