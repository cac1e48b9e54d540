"""The OpenAI Chat Completions adapter: requests out, responses back, provider errors translated.

This is the only module that imports ``openai``. Everything it hands back (responses, stream
deltas, errors) is raygents data, because openai's exceptions and clients do not survive a pickle
round trip between Ray processes.
"""

from __future__ import annotations

import asyncio
import math
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

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
from raygents.core.secrets import mask, shown_url, url_secrets
from raygents.errors import ModelError, UserError
from raygents.models import ratelimit

if TYPE_CHECKING:
    import httpx2
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.completion_usage import CompletionUsage

__all__ = ["OpenAIChatModel"]

_DEFAULT_BASE_URL = "https://api.openai.com/v1"
_PLACEHOLDER_KEY = "not-needed"
"""Sent as the key to a ``base_url`` server when no key is configured; local servers need none."""

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}
_SHOWN_QUERY = frozenset({"api-version", "api_version"})
"""Query parameters of a base URL shown in repr and errors; every other value is masked."""
_SAMPLING_SETTINGS = ("temperature", "top_p", "frequency_penalty", "presence_penalty", "max_tokens")
_TOOL_SETTINGS = ("tool_choice", "parallel_tool_calls")


class OpenAIChatModel:
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
        if not isinstance(model, str) or not model:
            raise UserError(f"model must be a non-empty model name, got {model!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise UserError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise UserError(f"timeout_s must be a number of seconds > 0, got {timeout_s!r}")
        if base_url is not None and not isinstance(base_url, str):
            kind = type(base_url).__name__
            raise UserError(f"base_url must be a URL string such as 'http://host/v1', got {kind}")
        self.model = model
        """The model name sent to the server."""
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        """The endpoint, or ``None`` for OpenAI itself."""
        self.max_retries = max_retries
        """Retries of a transient failure before it is raised."""
        self.timeout_s = float(timeout_s)
        """The HTTP timeout of each attempt, in seconds."""
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
        self._http_client = http_client
        self._client: openai.AsyncOpenAI | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        # the key is masked too, for a server that takes it in the path (``/v1/<key>/``)
        shown = None if self.base_url is None else self._scrub(_shown_url(self.base_url))
        return (
            f"OpenAIChatModel({self.model!r}, base_url={shown!r}, "
            f"max_retries={self.max_retries!r}, timeout_s={self.timeout_s!r})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_client=None, _client_loop=None, _http_client=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """Answer one turn with a single Chat Completions call.

        Raises:
            UserError: no API key and no base URL are configured.
            ModelError: the server failed after retries, refused, or answered with something
                raygents cannot use.
        """
        client = self._get_client()
        try:
            completion = await client.chat.completions.create(
                model=self.model, stream=False, **self._params(request)
            )
        except openai.OpenAIError as err:
            # Not chained: the openai error holds the request (key included) and may echo the
            # key in its text; the translated message keeps everything a user needs.
            raise self._error(err) from None
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

    async def aclose(self) -> None:
        """Close the HTTP connections this model opened; a later call opens new ones.

        A client passed as ``http_client`` is left open: it belongs to the caller.
        """
        client, self._client, self._client_loop = self._client, None, None
        if client is not None and self._http_client is None:
            await client.close()

    # -- client and request ----------------------------------------------------------------

    def _get_client(self) -> openai.AsyncOpenAI:
        """The openai client for the running event loop, created on first use."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            # A client's connection pool is bound to the loop it first ran on, and a driver
            # may run several loops one after another (``asyncio.run`` per blocking call).
            api_key, base_url = self._credentials()
            # The openai client would put its paths after a query (``/v1?x=1chat/...``).
            base_url, _, query = base_url.partition("#")[0].partition("?")
            self._client = openai.AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                default_query=dict(parse_qsl(query, keep_blank_values=True)) or None,
                max_retries=self.max_retries,
                timeout=self.timeout_s,
                http_client=self._http_client
                or openai.DefaultAsyncHttpxClient(
                    event_hooks={"request": [self._on_request], "response": [self._on_response]}
                ),
            )
            self._client_loop = loop
        return self._client

    async def _on_request(self, request: httpx2.Request) -> None:
        """The openai client's retry of a call (its ``x-stainless-retry-count`` header above 0)
        waits for a turn at the namespace's rate limiter, as the first attempt did."""
        if request.headers.get("x-stainless-retry-count", "0") not in ("", "0"):
            await ratelimit.retry_turn(self.model, len(request.content) // 4 + 1)

    async def _on_response(self, response: httpx2.Response) -> None:
        """A 429 with ``Retry-After`` holds back every call of this model in the namespace
        (where it is rate-limited), not only the one the openai client retries."""
        if response.status_code == 429:
            seconds = _retry_after(response.headers)
            if seconds is not None:
                ratelimit.report_pause(self.model, seconds)

    def _credentials(self) -> tuple[str, str]:
        api_key = self._api_key or os.environ.get("OPENAI_API_KEY") or None
        base_url = self.base_url or os.environ.get("OPENAI_BASE_URL") or None
        if api_key is None and base_url is None:
            raise UserError(
                f"OpenAIChatModel({self.model!r}) has no API key and no base URL: set "
                "OPENAI_API_KEY (or pass api_key=...) to use OpenAI, or set OPENAI_BASE_URL "
                "(or pass base_url=...) to use an OpenAI-compatible server such as vLLM or Ollama"
            )
        return api_key or _PLACEHOLDER_KEY, base_url or _DEFAULT_BASE_URL

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        """The Chat Completions parameters of a request, besides ``model`` and ``stream``."""
        messages = [m.to_openai() for m in request.messages]
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

    # -- responses -------------------------------------------------------------------------

    def _parse_completion(self, completion: ChatCompletion) -> ModelResponse:
        choices = getattr(completion, "choices", None)
        if not choices:
            raise self._invalid("returned no choices")
        choice = choices[0]
        if getattr(choice, "message", None) is None:
            raise self._invalid("returned a choice without a message")
        data = self._text_parts(choice.message.to_dict(warnings=False))
        parsed = Message.from_openai({**data, "role": "assistant"})
        message = Message("assistant", parsed.content, tool_calls=_with_ids(parsed.tool_calls))
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
        message = Message("assistant", acc.content(), tool_calls=_with_ids(acc.tool_calls()))
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
            raise ModelError(
                f"model {self.model!r} refused to answer: {self._scrub(str(refusal))}",
                retryable=False,
            )

    # -- errors ----------------------------------------------------------------------------

    def _url(self) -> str:
        return self.base_url or os.environ.get("OPENAI_BASE_URL") or _DEFAULT_BASE_URL

    def _where(self) -> str:
        """The endpoint as errors show it: without its credentials."""
        return _shown_url(self._url())

    def _scrub(self, text: str) -> str:
        """The text with the API key and the base URL's credentials masked, in case a server
        echoes them back."""
        url = self._url()
        text = text.replace(url, _shown_url(url))
        key = self._api_key or os.environ.get("OPENAI_API_KEY")
        # A very short "key" (a test value, a typo) would mask random letters instead.
        key = key if key and len(key) >= 8 else None
        return mask(text, [*url_secrets(url, _SHOWN_QUERY), key])

    def _invalid(self, what: str) -> ModelError:
        return ModelError(self._scrub(f"{self._where()} {what} (model {self.model!r})"))

    def _error(self, err: openai.OpenAIError) -> ModelError:
        """Translate an openai exception; its text is rebuilt so that no key can leak."""
        where, model = self._where(), self.model
        if isinstance(err, openai.APITimeoutError):
            message = f"request to {where} for model {model!r} timed out after {self.timeout_s}s"
            return ModelError(f"{message} ({self._retries()})", retryable=True)
        if isinstance(err, openai.APIConnectionError):
            cause = f": {err.__cause__}" if err.__cause__ else ""
            message = f"could not connect to {where} for model {model!r}{cause}"
            return ModelError(self._scrub(f"{message} ({self._retries()})"), retryable=True)
        if isinstance(err, openai.APIResponseValidationError):
            return self._invalid("sent a response that does not fit the Chat Completions schema")
        if isinstance(err, openai.APIStatusError):
            return self._status_error(err.status_code, _detail(err.body))
        if isinstance(err, openai.APIError):  # an error event inside a stream
            status = _body_status(err.body)
            if status is not None:
                return self._status_error(status, _detail(err.body) or err.message)
            detail = self._scrub(_detail(err.body) or err.message)
            return ModelError(f"{where} sent an error for model {model!r}: {detail}")
        detail = self._scrub(str(err))
        return ModelError(
            f"openai client failed for model {model!r}: {type(err).__name__}: {detail}"
        )

    def _status_error(self, status: int, detail: str) -> ModelError:
        where, model = self._where(), self.model
        retryable = status in (408, 409, 429) or status >= 500
        suffix = f": {self._scrub(detail)}" if detail else ""
        if status == 401:
            message = (
                f"the API key was rejected by {where} (HTTP 401); check OPENAI_API_KEY "
                "or the api_key= argument"
            )
        elif status == 404:
            message = (
                f"model {model!r} was not found at {where} (HTTP 404){suffix}; check the "
                "model name and base_url"
            )
        elif retryable:
            message = f"{where} answered HTTP {status} for model {model!r}{suffix}"
            message = f"{message} ({self._retries()})"
        else:
            message = f"{where} answered HTTP {status} for model {model!r}{suffix}"
        return ModelError(message, status_code=status, retryable=retryable)

    def _retries(self) -> str:
        return f"retried up to {self.max_retries} times"


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
            # Strict mode wants an object schema even for a tool without parameters.
            "parameters": tool.parameters
            or {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
            "strict": True,
        },
    }


def _response_format_param(response_format: Mapping[str, Any]) -> dict[str, Any]:
    if "name" not in response_format or "schema" not in response_format:
        raise UserError(
            "response_format must have the keys 'name' and 'schema', got "
            f"{sorted(response_format)!r}"
        )
    return {
        "type": "json_schema",
        "json_schema": {
            "name": response_format["name"],
            "schema": response_format["schema"],
            "strict": True,
        },
    }


def _with_ids(calls: Iterable[ToolCall]) -> list[ToolCall]:
    """The calls, each with an id; some compatible servers send none, but tool results need one."""
    return [
        c if c.id else ToolCall(f"call_{uuid.uuid4().hex[:24]}", c.name, c.arguments) for c in calls
    ]


def _usage(usage: CompletionUsage | None) -> Usage:
    if usage is None:
        return Usage()
    prompt = getattr(usage, "prompt_tokens_details", None)
    completion = getattr(usage, "completion_tokens_details", None)
    return Usage(
        usage.prompt_tokens or 0,
        usage.completion_tokens or 0,
        cached_input_tokens=_count(getattr(prompt, "cached_tokens", None)),
        reasoning_tokens=_count(getattr(completion, "reasoning_tokens", None)),
    )


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The pause a 429 asks for, in seconds (``retry-after-ms``, else ``retry-after`` in
    seconds), or None; a date in ``retry-after`` is left to the openai client's retry."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name) or "nan") * scale
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds > 0:
            return seconds
    return None


def _count(value: object) -> int:
    """A token count a provider reported, or 0 when it reported none (or nonsense)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _detail(body: object) -> str:
    """The human-readable part of an error body, shortened."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        text = str(message) if message else ""
    else:
        text = "" if body is None else str(body)
    return text if len(text) <= 500 else text[:500] + "..."


def _body_status(body: object) -> int | None:
    code = body.get("code") if isinstance(body, Mapping) else None
    return code if isinstance(code, int) and 400 <= code <= 599 else None


def _shown_url(url: str) -> str:
    """``url`` with its userinfo, query values (but ``api-version``) and fragment masked."""
    return shown_url(url, _SHOWN_QUERY)
