"""An OpenAI API endpoint: the client, credentials, retries and error translation that the Chat
Completions and Responses adapters share.

With ``openai.py`` and ``responses.py``, the only modules that import ``openai``. Everything an
adapter hands back (responses, stream deltas, errors) is raygents data, because openai's
exceptions and clients do not survive a pickle round trip between Ray processes.
"""

from __future__ import annotations

import asyncio
import math
import os
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qsl

import openai

from raygents.core.messages import ToolCall, ToolSpec
from raygents.core.secrets import mask, shown_url, url_secrets
from raygents.errors import ModelError, UserError
from raygents.models import ratelimit

if TYPE_CHECKING:
    import httpx2

__all__ = ["OpenAIEndpoint"]

_DEFAULT_BASE_URL = "https://api.openai.com/v1"
_PLACEHOLDER_KEY = "not-needed"
"""Sent as the key to a ``base_url`` server when no key is configured; local servers need none."""
_SHOWN_QUERY = frozenset({"api-version", "api_version"})
"""Query parameters of a base URL shown in repr and errors; every other value is masked."""


class OpenAIEndpoint:
    """What every OpenAI adapter holds: a model name, an endpoint, a key, and the retry and
    timeout policy, with the openai client built from them on first use.

    Construction is cheap and reads only the environment; the openai client is created once
    per event loop and is never pickled, so a model can be sent to Ray actors. The arguments
    are those of :class:`~raygents.models.openai.OpenAIChatModel`.

    Raises:
        UserError: on invalid arguments.
    """

    api: ClassVar[str] = "OpenAI"
    """The API's name, as errors show it."""

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

    def _repr_fields(self) -> str:
        # the key is masked too, for a server that takes it in the path (``/v1/<key>/``)
        shown = None if self.base_url is None else self._scrub(_shown_url(self.base_url))
        return (
            f"{self.model!r}, base_url={shown!r}, "
            f"max_retries={self.max_retries!r}, timeout_s={self.timeout_s!r}"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._repr_fields()})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_client=None, _client_loop=None, _http_client=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    async def aclose(self) -> None:
        """Close the HTTP connections this model opened; a later call opens new ones.

        A client passed as ``http_client`` is left open: it belongs to the caller.
        """
        client, self._client, self._client_loop = self._client, None, None
        if client is not None and self._http_client is None:
            await client.close()

    # -- client ----------------------------------------------------------------------------

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
            seconds = retry_after(response.headers)
            if seconds is not None:
                ratelimit.report_pause(self.model, seconds)

    def _credentials(self) -> tuple[str, str]:
        api_key = self._api_key or os.environ.get("OPENAI_API_KEY") or None
        base_url = self.base_url or os.environ.get("OPENAI_BASE_URL") or None
        if api_key is None and base_url is None:
            raise UserError(
                f"{type(self).__name__}({self.model!r}) has no API key and no base URL: set "
                "OPENAI_API_KEY (or pass api_key=...) to use OpenAI, or set OPENAI_BASE_URL "
                "(or pass base_url=...) to use an OpenAI-compatible server such as vLLM or Ollama"
            )
        return api_key or _PLACEHOLDER_KEY, base_url or _DEFAULT_BASE_URL

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

    def _not_json(self, err: ValueError) -> ModelError:
        return self._invalid(f"sent a body that is not valid JSON ({err})")

    def _refused(self, refusal: object) -> ModelError:
        return ModelError(
            f"model {self.model!r} refused to answer: {self._scrub(str(refusal))}",
            retryable=False,
        )

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
            return self._invalid(f"sent a response that does not fit the {self.api} schema")
        if isinstance(err, openai.APIStatusError):
            return self._status_error(err.status_code, detail(err.body))
        if isinstance(err, openai.APIError):  # an error event inside a stream
            status = _body_status(err.body)
            if status is not None:
                return self._status_error(status, detail(err.body) or err.message)
            return self._sent_error(detail(err.body) or err.message)
        text = self._scrub(str(err))
        return ModelError(f"openai client failed for model {model!r}: {type(err).__name__}: {text}")

    def _sent_error(self, text: str) -> ModelError:
        """An error the server reported inside an answer (not as an HTTP status)."""
        return ModelError(
            f"{self._where()} sent an error for model {self.model!r}: {self._scrub(text)}"
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


def strict_parameters(tool: ToolSpec) -> dict[str, Any]:
    """A tool's JSON-schema parameters for a strict function tool: strict mode wants an object
    schema even for a tool without parameters."""
    return tool.parameters or {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def strict_schema(response_format: Mapping[str, Any]) -> dict[str, Any]:
    """The ``name``, ``schema`` and ``strict`` of a structured-output format.

    Raises:
        UserError: ``response_format`` lacks ``name`` or ``schema``.
    """
    if "name" not in response_format or "schema" not in response_format:
        raise UserError(
            "response_format must have the keys 'name' and 'schema', got "
            f"{sorted(response_format)!r}"
        )
    return {"name": response_format["name"], "schema": response_format["schema"], "strict": True}


def with_ids(calls: Iterable[ToolCall]) -> list[ToolCall]:
    """The calls, each with an id; some compatible servers send none, but tool results need one."""
    return [
        c if c.id else ToolCall(f"call_{uuid.uuid4().hex[:24]}", c.name, c.arguments) for c in calls
    ]


def retry_after(headers: Mapping[str, str]) -> float | None:
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


def count(value: object) -> int:
    """A token count a provider reported, or 0 when it reported none (or nonsense)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def detail(body: object) -> str:
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
