"""The OpenAI Responses API adapter: requests out as input items, output items back, reasoning
carried across turns, provider errors translated.

Calls are stateless (``store=False``): every turn sends the whole history, and the reasoning
items of earlier turns go back with their encrypted content, so no state lives at the provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import openai

from raygents.core.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningItem,
    ToolCall,
    Usage,
)
from raygents.errors import ModelError, UserError
from raygents.models.endpoint import (
    OpenAIEndpoint,
    count,
    detail,
    strict_schema,
    with_ids,
)
from raygents.models.responses_input import (
    REASONING_API,
    input_items,
    tool_choice_param,
    tool_param,
    with_next,
)

if TYPE_CHECKING:
    import httpx2

__all__ = ["REASONING_API", "OpenAIResponsesModel"]

_INCLUDE = ["reasoning.encrypted_content"]
"""Asked for on every call: with ``store=False``, the encrypted content is the only way a
reasoning item can be sent back."""
_INCOMPLETE: dict[str, FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}
_UNSUPPORTED_SETTINGS = ("frequency_penalty", "presence_penalty")


class OpenAIResponsesModel(OpenAIEndpoint):
    """A model served through OpenAI's Responses API (or a server that speaks it).

    Tools are sent as strict function tools, ``response_format`` as a strict JSON-schema text
    format, and the run's history as input items. Each call is stateless (``store=False``)
    and asks for the encrypted content of reasoning items: the reasoning items a model returns
    are kept on the assistant message (:attr:`~raygents.core.messages.Message.reasoning`),
    checkpointed with the run, and sent back on later turns, so a reasoning model keeps its
    chain of thought across turns, handoffs and a suspend and resume. Retries, timeouts, rate
    limits, error translation and the hiding of credentials are those of
    :class:`~raygents.models.openai.OpenAIChatModel`.

    Args:
        model: the model name sent to the server, e.g. ``"gpt-5"``.
        base_url: as for :class:`~raygents.models.openai.OpenAIChatModel`.
        api_key: as for :class:`~raygents.models.openai.OpenAIChatModel`.
        max_retries: how many times a transient failure is retried before giving up.
        timeout_s: the HTTP timeout of each attempt, in seconds; while streaming, of each read.
        reasoning: the ``reasoning`` option of every call: an effort (``"minimal"``, ``"low"``,
            ``"medium"``, ``"high"``), or the whole option as a dict such as
            ``{"effort": "high", "summary": "auto"}``. ``None`` leaves it to the model.
        http_client: as for :class:`~raygents.models.openai.OpenAIChatModel`.

    Raises:
        UserError: on invalid arguments.
    """

    api: ClassVar[str] = "Responses"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 3,
        timeout_s: float = 60.0,
        reasoning: str | Mapping[str, Any] | None = None,
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
        self.reasoning: dict[str, Any] | None = _reasoning_option(reasoning)
        """The ``reasoning`` option sent with every call, or ``None``."""

    def __repr__(self) -> str:
        return f"OpenAIResponsesModel({self._repr_fields()}, reasoning={self.reasoning!r})"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """Answer one turn with a single Responses call.

        Raises:
            UserError: no API key and no base URL are configured, or the request sets a
                setting the Responses API does not have.
            ModelError: the server failed after retries, refused, or answered with something
                raygents cannot use.
        """
        params = self._params(request)
        client = self._get_client()
        try:
            response = await client.responses.create(model=self.model, stream=False, **params)
        except openai.OpenAIError as err:
            # Not chained: the openai error holds the request (key included).
            raise self._error(err) from None
        except ValueError as err:  # a body that says it is JSON and is not
            raise self._not_json(err) from None
        return self._parse(_plain(response))

    async def stream(self, request: ModelRequest) -> AsyncIterator[str | ModelResponse]:
        """Answer one turn as a stream: text deltas as they arrive, then the whole response
        (tool calls and reasoning items included), built from the stream's final event.

        Raises:
            UserError: as :meth:`respond`.
            ModelError: as :meth:`respond`; a failure part-way through the stream is not
                retried, and a stream that ends without its final event is an error.
        """
        params = self._params(request)
        client = self._get_client()
        final: Mapping[str, Any] | None = None
        try:
            events = await client.responses.create(model=self.model, stream=True, **params)
            async with events:
                async for event in events:
                    data = _plain(event)
                    delta, done = self._event(data)
                    if delta:
                        yield delta
                    if done is not None:
                        final = done
        except openai.OpenAIError as err:
            raise self._error(err) from None  # not chained, as in respond()
        except ValueError as err:  # malformed JSON in an SSE event
            raise self._invalid(f"sent a malformed stream event: {err}") from err
        if final is None:
            raise ModelError(
                f"{self._where()} ended the stream for model {self.model!r} without its final "
                "event (response.completed); the connection may have dropped",
                retryable=True,
            )
        yield self._parse(final)

    # -- request ---------------------------------------------------------------------------

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        """The Responses parameters of a request, besides ``model`` and ``stream``."""
        params: dict[str, Any] = {
            "input": list(input_items(request.messages, self.model)),
            "store": False,
            "include": list(_INCLUDE),
        }
        if request.system:
            params["instructions"] = request.system
        if self.reasoning is not None:
            params["reasoning"] = dict(self.reasoning)
        if request.tools:
            params["tools"] = [tool_param(t) for t in request.tools]
        if request.response_format is not None:
            schema = strict_schema(request.response_format)
            params["text"] = {"format": {"type": "json_schema", **schema}}
        params.update(self._settings(request))
        return params

    def _settings(self, request: ModelRequest) -> dict[str, Any]:
        settings = request.settings
        for name in _UNSUPPORTED_SETTINGS:
            if getattr(settings, name) is not None:
                raise UserError(
                    f"ModelSettings.{name} is not a setting of the Responses API "
                    f"(model {self.model!r}); leave it unset, or use OpenAIChatModel"
                )
        out: dict[str, Any] = {}
        for name, wire in (("temperature", "temperature"), ("top_p", "top_p")):
            if getattr(settings, name) is not None:
                out[wire] = getattr(settings, name)
        if settings.max_tokens is not None:
            out["max_output_tokens"] = settings.max_tokens
        if request.tools and settings.tool_choice is not None:
            out["tool_choice"] = tool_choice_param(settings.tool_choice)
        if request.tools and settings.parallel_tool_calls is not None:
            out["parallel_tool_calls"] = settings.parallel_tool_calls
        if settings.extra:
            out["extra_body"] = dict(settings.extra)
        return out

    # -- responses -------------------------------------------------------------------------

    def _event(self, data: Mapping[str, Any]) -> tuple[str, Mapping[str, Any] | None]:
        """A stream event's text delta, and the whole response when it is the final event.

        Raises:
            ModelError: the event reports a failure.
        """
        kind = data.get("type")
        if kind == "response.output_text.delta":
            delta = data.get("delta")
            return (delta if isinstance(delta, str) else ""), None
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            response = data.get("response")
            if not isinstance(response, Mapping):
                raise self._invalid(f"sent a {kind} event without a response")
            return "", response
        if kind == "error":
            code = data.get("code")
            raise self._sent_error(f"{code}: {detail(data)}" if code else detail(data))
        return "", None  # progress events (output_item.added, ...) carry nothing new

    def _parse(self, data: Mapping[str, Any]) -> ModelResponse:
        """A response object, as plain data, turned into a raygents response.

        Raises:
            ModelError: the response failed, or holds something raygents cannot carry.
        """
        status = data.get("status")
        if status == "failed":
            error = data.get("error")
            code = error.get("code") if isinstance(error, Mapping) else None
            text = detail({"error": error}) or "the response failed"
            raise self._sent_error(f"{code}: {text}" if code else text)
        output = data.get("output")
        if not isinstance(output, list):
            raise self._invalid("returned a response without an output list")
        texts: list[str] = []
        refusals: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[ReasoningItem] = []
        for index, item in enumerate(output):
            self._take(index, item, texts, refusals, calls, reasoning)
            if reasoning and isinstance(item, Mapping) and item.get("type") == "reasoning":
                following = output[index + 1] if index + 1 < len(output) else None
                reasoning[-1] = with_next(reasoning[-1], following)
        text = "".join(texts)
        message = Message(
            "assistant",
            text if text or not calls else None,
            tool_calls=with_ids(calls),
            reasoning=reasoning,
        )
        if refusals and not text and not calls:
            raise self._refused("".join(refusals))
        reason = self._finish_reason(status, data.get("incomplete_details"), bool(calls))
        return ModelResponse(message, reason, _usage(data.get("usage")))

    def _take(
        self,
        index: int,
        item: object,
        texts: list[str],
        refusals: list[str],
        calls: list[ToolCall],
        reasoning: list[ReasoningItem],
    ) -> None:
        """Sort one output item into text, refusals, tool calls or reasoning.

        Raises:
            ModelError: the item is of a type raygents cannot carry; it is never dropped.
        """
        kind = item.get("type") if isinstance(item, Mapping) else type(item).__name__
        if kind == "message" and isinstance(item, Mapping):
            for part_index, part in enumerate(item.get("content") or ()):
                self._take_part(index, part_index, part, texts, refusals)
        elif kind == "function_call" and isinstance(item, Mapping):
            call = _function_call(item)
            if call is None:
                raise self._invalid(f"answered with a malformed function_call as output #{index}")
            calls.append(call)
        elif kind == "reasoning" and isinstance(item, Mapping):
            reasoning.append(ReasoningItem(api=REASONING_API, data=dict(item)))
        else:
            raise self._invalid(
                f"answered with output #{index} of type {str(kind)[:40]!r}, which raygents "
                "cannot carry (it handles messages, function calls and reasoning)"
            )

    def _take_part(
        self, index: int, part_index: int, part: object, texts: list[str], refusals: list[str]
    ) -> None:
        kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
        key = {"output_text": "text", "refusal": "refusal"}.get(str(kind))
        value = part.get(key) if isinstance(part, Mapping) and key else None
        if not isinstance(value, str):
            raise self._invalid(
                f"answered with content part #{part_index} of output #{index} of type "
                f"{str(kind)[:40]!r}, which raygents cannot carry (its messages hold text only)"
            )
        (texts if kind == "output_text" else refusals).append(value)

    def _finish_reason(self, status: object, incomplete: object, has_calls: bool) -> FinishReason:
        if status in ("completed", None):  # some compatible servers leave it out
            return "tool_calls" if has_calls else "stop"
        if status == "incomplete":
            why = incomplete.get("reason") if isinstance(incomplete, Mapping) else None
            mapped = _INCOMPLETE.get(why) if isinstance(why, str) else None
            if mapped is not None:
                return mapped
            raise self._invalid(f"answered incomplete for a reason raygents does not know: {why!r}")
        raise self._invalid(
            f"answered with status {status!r}; expected 'completed' or 'incomplete'"
        )


def _reasoning_option(value: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str) and value:
        return {"effort": value}
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return dict(value)
    raise UserError(
        "reasoning must be an effort such as 'low' or 'high', or a dict such as "
        f"{{'effort': 'high', 'summary': 'auto'}}, got {value!r}"
    )


def _function_call(item: Mapping[str, Any]) -> ToolCall | None:
    name, arguments = item.get("name"), item.get("arguments", "{}")
    call_id = item.get("call_id") or item.get("id") or ""
    if not isinstance(name, str) or not name or not isinstance(call_id, str):
        return None
    if not isinstance(arguments, str):
        return None
    return ToolCall(call_id, name, arguments or "{}")


def _usage(usage: object) -> Usage:
    if not isinstance(usage, Mapping):
        return Usage()
    inputs, outputs = usage.get("input_tokens_details"), usage.get("output_tokens_details")
    return Usage(
        count(usage.get("input_tokens")),
        count(usage.get("output_tokens")),
        cached_input_tokens=count(
            inputs.get("cached_tokens") if isinstance(inputs, Mapping) else 0
        ),
        reasoning_tokens=count(
            outputs.get("reasoning_tokens") if isinstance(outputs, Mapping) else 0
        ),
    )


def _plain(value: object) -> Mapping[str, Any]:
    """An openai object as plain data (the client does not validate what servers send)."""
    to_dict = getattr(value, "to_dict", None)
    data = to_dict(warnings=False) if callable(to_dict) else value
    return data if isinstance(data, Mapping) else {"type": type(value).__name__}
