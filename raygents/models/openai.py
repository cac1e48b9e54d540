"""The OpenAI Chat Completions adapter: requests out, responses back, provider errors translated.

The client, credentials and error translation it shares with the Responses adapter live in
``endpoint.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import openai

from raygents.core.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
)
from raygents.errors import ModelError
from raygents.models.content import chat_message
from raygents.models.endpoint import (
    OpenAIEndpoint,
    count,
    retry_after,
    strict_parameters,
    strict_schema,
    with_ids,
)

if TYPE_CHECKING:
    import httpx2
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.completion_usage import CompletionUsage

__all__ = ["OpenAIChatModel"]

_retry_after = retry_after  # the name tests and older imports know

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}
_SAMPLING_SETTINGS = ("temperature", "top_p", "frequency_penalty", "presence_penalty", "max_tokens")
_TOOL_SETTINGS = ("tool_choice", "parallel_tool_calls")


class OpenAIChatModel(OpenAIEndpoint):
    """A model served through the Chat Completions API by OpenAI or any compatible server.

    Construction is cheap and reads only the environment; the openai client is created on
    first use, once per event loop, and is never pickled, so the model can be sent to Ray
    actors. Transient failures (connection errors, timeouts, HTTP 408, 409, 429 and 5xx) are
    retried by the openai client with exponential backoff and jitter, honouring
    ``Retry-After`` (where the namespace rate-limits the model, each retry also waits for its
    turn at the limiter); whatever still fails is raised as :class:`~raygents.errors.ModelError`.

    Args:
        model: the model name sent to the server, e.g. ``"gpt-4o-mini"``.
        base_url: an OpenAI-compatible endpoint such as ``"http://localhost:8000/v1"``
            (vLLM, Ollama, LiteLLM, Ray Serve LLM). Defaults to ``$OPENAI_BASE_URL``, then
            to OpenAI itself.
        api_key: the API key. Defaults to ``$OPENAI_API_KEY``; with a ``base_url`` and no key,
            a placeholder is sent, since local servers need none. The key travels with the
            model when it is pickled, and never appears in its repr or in error messages.
            Neither do credentials in ``base_url`` (``user:password@``, and every query value
            but ``api-version``): they are shown as ``***``. The URL's query parameters are
            sent with every request.
        max_retries: how many times a transient failure is retried before giving up.
        timeout_s: the HTTP timeout of each attempt, in seconds; while streaming, of each read.
        http_client: an ``httpx2.AsyncClient`` (the transport the openai package uses) to send
            requests through, e.g. one with a mock transport in tests. It belongs to this
            process only: a pickled copy of the model leaves it behind and uses a default one.

    Raises:
        UserError: on invalid arguments. A missing key and base URL is reported on first use,
            not here.
    """

    api: ClassVar[str] = "Chat Completions"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 3,
        timeout_s: float = 60.0,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            max_retries=max_retries,
            timeout_s=timeout_s,
            http_client=http_client,
        )

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """Answer one turn with a single Chat Completions call.

        Raises:
            UserError: no API key and no base URL are configured.
            ModelError: the server failed after retries, refused, or answered with something
                raygents cannot use.
        """
        params = self._params(request)
        client = self._get_client()
        try:
            completion = await client.chat.completions.create(
                model=self.model, stream=False, **params
            )
        except openai.OpenAIError as err:
            # Not chained: the openai error holds the request (key included) and may echo the
            # key in its text; the translated message keeps everything a user needs.
            raise self._error(err) from None
        except ValueError as err:  # a body that says it is JSON and is not
            raise self._not_json(err) from None
        return self._parse_completion(completion)

    async def stream(self, request: ModelRequest) -> AsyncIterator[str | ModelResponse]:
        """Answer one turn as a stream: text deltas as they arrive, then the whole response.

        Tool calls are not yielded piecewise; they are in the final response.

        Raises:
            UserError: no API key and no base URL are configured.
            ModelError: as :meth:`respond`; a failure part-way through the stream is not
                retried, and a stream that ends without a finish reason is an error.
        """
        client = self._get_client()
        acc = _StreamAccumulator()
        try:
            chunks = await client.chat.completions.create(
                model=self.model,
                stream=True,
                stream_options={"include_usage": True},
                **self._params(request),
            )
            async with chunks:
                async for chunk in chunks:
                    delta = acc.add(chunk)
                    if delta:
                        yield delta
        except openai.OpenAIError as err:
            raise self._error(err) from None  # not chained, as in respond()
        except ValueError as err:  # malformed JSON in an SSE event
            raise self._invalid(f"sent a malformed stream event: {err}") from err
        yield self._finish(acc)

    # -- request and responses -------------------------------------------------------------

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        """The Chat Completions parameters of a request, besides ``model`` and ``stream``."""
        messages = [chat_message(m, self.model) for m in request.messages]
        if request.system:
            messages.insert(0, {"role": "system", "content": request.system})
        params: dict[str, Any] = {"messages": messages}
        settings = request.settings
        names = _SAMPLING_SETTINGS + (_TOOL_SETTINGS if request.tools else ())
        params.update(
            (name, getattr(settings, name)) for name in names if getattr(settings, name) is not None
        )
        if request.tools:
            params["tools"] = [_tool_param(t) for t in request.tools]
        if request.response_format is not None:
            params["response_format"] = _response_format_param(request.response_format)
        if settings.extra:
            params["extra_body"] = dict(settings.extra)
        return params

    def _parse_completion(self, completion: ChatCompletion) -> ModelResponse:
        choices = getattr(completion, "choices", None)
        if not choices:
            raise self._invalid("returned no choices")
        choice = choices[0]
        if getattr(choice, "message", None) is None:
            raise self._invalid("returned a choice without a message")
        data = self._text_parts(choice.message.to_dict(warnings=False))
        parsed = Message.from_openai({**data, "role": "assistant"})
        message = Message("assistant", parsed.content, tool_calls=with_ids(parsed.tool_calls))
        self._check_refusal(message, data.get("refusal"))
        reason = choice.finish_reason
        if reason is None:  # some compatible servers leave it out
            reason = "tool_calls" if message.tool_calls else "stop"
        usage = getattr(completion, "usage", None)
        return ModelResponse(message, self._finish_reason(reason), _usage(usage))

    def _text_parts(self, data: dict[str, Any]) -> dict[str, Any]:
        """The message with content parts (some servers send a list) joined into text.

        Raises:
            ModelError: a part is not text or a refusal (an image, audio...): raygents
                messages carry text only, and a part is never dropped silently.
        """
        parts = data.get("content")
        if not isinstance(parts, list):
            return data
        texts: list[str] = []
        refusals: list[str] = [data["refusal"]] if data.get("refusal") else []
        for index, part in enumerate(parts):
            kind = part.get("type", "text") if isinstance(part, Mapping) else type(part).__name__
            value = part.get(kind) if isinstance(part, Mapping) else None
            if kind not in ("text", "refusal") or not isinstance(value, str):
                raise self._invalid(
                    f"answered with content part #{index} of type {str(kind)[:40]!r}, which "
                    "raygents cannot carry (its messages hold text only); ask for a text answer"
                )
            (texts if kind == "text" else refusals).append(value)
        return {**data, "content": "".join(texts) or None, "refusal": "".join(refusals) or None}

    def _finish(self, acc: _StreamAccumulator) -> ModelResponse:
        message = Message("assistant", acc.content(), tool_calls=with_ids(acc.tool_calls()))
        self._check_refusal(message, "".join(acc.refusal) or None)
        if acc.finish_reason is None:
            raise ModelError(
                f"{self._where()} ended the stream for model {self.model!r} without a finish "
                "reason; the connection may have dropped",
                retryable=True,
            )
        return ModelResponse(message, self._finish_reason(acc.finish_reason), acc.usage)

    def _finish_reason(self, reason: object) -> FinishReason:
        mapped = _FINISH_REASONS.get(reason) if isinstance(reason, str) else None
        if mapped is None:
            raise self._invalid(
                f"answered with finish reason {reason!r}, which raygents does not know; "
                f"expected one of {sorted(_FINISH_REASONS)!r}"
            )
        return mapped

    def _check_refusal(self, message: Message, refusal: object) -> None:
        if refusal and not message.content and not message.tool_calls:
            raise self._refused(refusal)


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _StreamAccumulator:
    """Collects the chunks of one streamed answer (choice 0 only)."""

    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    def add(self, chunk: ChatCompletionChunk) -> str:
        """Take in one chunk and return its text delta (``""`` when it has none)."""
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = _usage(usage)
        delta_text = ""
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) not in (0, None):
                continue
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                delta_text += delta.content
            if delta.refusal:
                self.refusal.append(delta.refusal)
            for position, call in enumerate(delta.tool_calls or ()):
                index = call.index if isinstance(call.index, int) else position
                partial = self.calls.setdefault(index, _PartialCall())
                partial.id = partial.id or (call.id or "")
                if call.function is not None:
                    partial.name += call.function.name or ""
                    partial.arguments.append(call.function.arguments or "")
        self.text.append(delta_text)
        return delta_text

    def content(self) -> str | None:
        text = "".join(self.text)
        return text if text or not self.calls else None

    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall(c.id, c.name, "".join(c.arguments) or "{}")
            for _, c in sorted(self.calls.items())
        ]


def _tool_param(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": strict_parameters(tool),
            "strict": True,
        },
    }


def _response_format_param(response_format: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": strict_schema(response_format)}


def _usage(usage: CompletionUsage | None) -> Usage:
    if usage is None:
        return Usage()
    prompt = getattr(usage, "prompt_tokens_details", None)
    completion = getattr(usage, "completion_tokens_details", None)
    return Usage(
        usage.prompt_tokens or 0,
        usage.completion_tokens or 0,
        cached_input_tokens=count(getattr(prompt, "cached_tokens", None)),
        reasoning_tokens=count(getattr(completion, "reasoning_tokens", None)),
    )
