"""Token counts of requests before they go, and the context windows of known models.

A request is counted by the first of: the model's own ``count_tokens(request)``; tiktoken's
encoding for the model's family, where ``raygents[tokens]`` is installed and the encoding can
be loaded; else :func:`estimate`, four characters a token plus a few tokens a message. A
run's count is then corrected by what the provider said the last request took (see
:func:`request_tokens`).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from raygents.core.compaction import Counter
from raygents.core.messages import Message, ModelRequest

__all__ = [
    "CONTEXT_WINDOWS",
    "PER_PART",
    "context_window",
    "counter",
    "estimate",
    "request_tokens",
]

log = logging.getLogger("raygents")

_PER_MESSAGE = 4
"""Tokens a message costs besides its text (its role and separators), as OpenAI counts."""
PER_PART = 765
"""Tokens an image or file part is counted as (what OpenAI charges for a 1024x1024 image in
high detail); its bytes are never counted as text."""

CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o1-mini", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("claude", 200_000),
    ("gemini-1.5-pro", 2_097_152),
    ("gemini", 1_048_576),
    ("llama-3.1", 128_000),
    ("llama-3.2", 128_000),
    ("llama-3.3", 128_000),
    ("mistral-large", 128_000),
    ("qwen2.5", 32_768),
)
"""Known context windows (input tokens) by model-name prefix, the most specific first; a
provider prefix (``"openai/"``) is ignored."""


def context_window(model_name: str | None) -> int | None:
    """The context window of a known model name, or None."""
    if not model_name:
        return None
    name = model_name.rsplit("/", 1)[-1].lower()
    return next((size for prefix, size in CONTEXT_WINDOWS if name.startswith(prefix)), None)


def estimate(messages: Sequence[Message], system: str = "", tools: Sequence[Any] = ()) -> int:
    """The documented estimate: four characters a token (text, tool call names and arguments,
    tool schemas), plus ``_PER_MESSAGE`` tokens a message and :data:`PER_PART` an image or
    file."""
    chars = len(system) + sum(_chars(m) for m in messages)
    chars += sum(len(json.dumps(t.model_dump(mode="json"))) for t in tools)
    return chars // 4 + _PER_MESSAGE * (len(messages) + (1 if system else 0))


def _chars(message: Message) -> int:
    chars = len(message.text) + sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
    return chars + 4 * PER_PART * _others(message)


def _others(message: Message) -> int:
    return sum(1 for p in message.parts if p.kind != "text")


def _counted(message: Message) -> str:
    """A message as tiktoken counts it: its Chat Completions dict with text in place of its
    parts (an image's base64 is not text a model reads)."""
    if not message.parts:
        return json.dumps(message.to_openai())
    return json.dumps(message.model_copy(update={"parts": ()}).to_openai())


@functools.lru_cache(maxsize=16)
def _encoding(model_name: str) -> Any:
    """tiktoken's encoding for the model, or None (not installed, not a model tiktoken knows,
    or its encoding file cannot be loaded: no network, say)."""
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        return tiktoken.encoding_for_model(model_name.rsplit("/", 1)[-1])
    except Exception as exc:  # an unknown model, or an encoding that cannot be fetched
        log.debug("no tiktoken encoding for %r: %s", model_name, exc)
        return None


def counter(model: Any, model_name: str | None) -> Callable[[ModelRequest], int]:
    """How requests to ``model`` are counted (see the module's docstring)."""
    own = getattr(model, "count_tokens", None)
    if callable(own):
        return lambda request: int(own(request))
    encoding = _encoding(model_name) if model_name else None
    if encoding is None:
        return lambda r: estimate(r.messages, r.system, r.tools)

    def tiktoken_count(request: ModelRequest) -> int:
        texts = [request.system, *(_counted(m) for m in request.messages)]
        texts += [json.dumps(t.model_dump(mode="json")) for t in request.tools]
        parts = PER_PART * sum(_others(m) for m in request.messages)
        return parts + sum(len(encoding.encode(t, disallowed_special=())) for t in texts if t)

    return tiktoken_count


def request_tokens(
    count: Callable[[ModelRequest], int],
    request: ModelRequest,
    observed: tuple[int, int] | None,
) -> int:
    """The input tokens of ``request``: counted, or, where the provider said what the run's
    last request took (``observed``: its input tokens and how many messages it had) and the
    history still begins with those messages, that plus the count of the messages since."""
    if observed is None or observed[1] > len(request.messages):
        return count(request)
    tokens, length = observed
    new = request.messages[length:]
    empty = request.model_copy(update={"messages": (), "system": "", "tools": ()})
    added = count(empty.model_copy(update={"messages": new})) - count(empty) if new else 0
    return tokens + added


def messages_counter(count: Callable[[ModelRequest], int], request: ModelRequest) -> Counter:
    """A :data:`~raygents.core.compaction.Counter` for histories sent as ``request``'s."""
    return lambda messages: count(request.model_copy(update={"messages": tuple(messages)}))
