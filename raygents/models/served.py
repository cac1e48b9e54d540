"""Models served on the same Ray cluster: a Ray Serve deployment that speaks the OpenAI chat API
(as Ray Serve LLM's ``LLMServer`` does), called through its ``DeploymentHandle``, no HTTP hop.

The request and the answers are those of the Chat Completions adapter (``openai.py``), whose
conversions this module reuses; only the transport differs. Ray Serve is imported on first
use, so raygents without the ``serve`` extra still imports.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from openai.types.chat import ChatCompletion, ChatCompletionChunk

from raygents.core.messages import ModelRequest, ModelResponse
from raygents.errors import ModelError, UserError
from raygents.models.openai import OpenAIChatModel, _StreamAccumulator
from raygents.telemetry import logs

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

__all__ = ["ServeModel"]

DEFAULT_APP = "default"
"""The application ``serve.run`` names when given no name."""
_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 4.0, 5.0)
"""Waits before the retries of a call whose replica went away (the last one repeats)."""


class ServeModel:
    """A model served by a Ray Serve deployment on the cluster, such as Ray Serve LLM's
    ``LLMServer`` (vLLM), called through its ``DeploymentHandle`` from the agent actor.

    The deployment's ``chat(request)`` method is called as Ray Serve LLM's OpenAI ingress
    calls it: with a ``ChatCompletionRequest`` (a plain dict of the same fields where
    neither vLLM nor SGLang is installed in the caller, for deployments of your own), its
    answer an async generator of a ``ChatCompletionResponse``, or when streaming of
    ``data: {...}`` chunks (in lists), an ``ErrorResponse`` for a failure. Tools, structured
    output, streaming and usage work as with
    :class:`~raygents.models.openai.OpenAIChatModel`.

    Each call carries the run's id as its Serve ``session_id``: with
    :class:`~raygents.models.affinity.RunAffinityRouter` set as the deployment's request
    router (:func:`~raygents.models.affinity.affinity_router_config`), every turn of a run
    goes to the replica that served its first turn while that replica is alive. A call whose
    replica dies or is unreachable is sent again (to another replica, once Serve knows),
    up to ``max_retries`` times; text a dying replica had streamed is not taken back.

    Args:
        deployment: the name of the deployment (for Serve LLM, ``LLMServer:<model id>`` or
            the name you gave it).
        app_name: the Serve application it belongs to (default ``"default"``, the name
            ``serve.run`` gives an unnamed one).
        model: the model id sent in the request's ``model`` field (default: ``deployment``);
            also the name rate limits and metrics use.
        max_retries: how many times a call whose replica went away is sent again.

    Raises:
        UserError: on invalid arguments. A deployment that does not exist is reported on
            first use.
    """

    def __init__(
        self,
        deployment: str,
        *,
        app_name: str | None = None,
        model: str | None = None,
        max_retries: int = 3,
    ) -> None:
        for name, value in (("deployment", deployment), ("app_name", app_name), ("model", model)):
            if (value is not None or name == "deployment") and (
                not isinstance(value, str) or not value
            ):
                raise UserError(f"ServeModel {name} must be a non-empty string, got {value!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise UserError(f"ServeModel max_retries must be an int >= 0, got {max_retries!r}")
        self.deployment = deployment
        """The deployment's name."""
        self.app_name = app_name or DEFAULT_APP
        """The Serve application the deployment belongs to."""
        self.model: str = model or deployment
        """The model id sent with each request."""
        self.max_retries = max_retries
        """Retries of a call whose replica went away."""
        # the request and answer conversions of the Chat Completions adapter (no client)
        self._chat = OpenAIChatModel(
            self.model, base_url=f"serve://{self.app_name}/{deployment}", api_key="unused"
        )
        self._handle: DeploymentHandle[Any] | None = None

    def __repr__(self) -> str:
        return f"ServeModel({self.deployment!r}, app_name={self.app_name!r}, model={self.model!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_handle": None}  # (a handle belongs to its process)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """Answer one turn with one ``chat`` call to the deployment.

        Raises:
            UserError: the deployment does not exist, or Serve is not running.
            ModelError: the deployment failed, answered with an error, or with something
                raygents cannot use; or its replicas stayed unreachable after retries.
        """
        body = self._body(request, stream=False)
        for attempt in range(self.max_retries + 1):
            try:
                items = [item async for item in self._chat_items(body)]
            except _ReplicaGone as gone:
                await self._wait_to_retry(attempt, gone)
                continue
            return self._completion(items)
        raise AssertionError("unreachable")  # pragma: no cover (_wait_to_retry raises)

    async def stream(self, request: ModelRequest) -> AsyncIterator[str | ModelResponse]:
        """Answer one turn as a stream: text deltas as they arrive, then the whole response.

        Raises:
            UserError: as :meth:`respond`.
            ModelError: as :meth:`respond`; a stream that ends without a finish reason is
                an error.
        """
        body = self._body(request, stream=True)
        for attempt in range(self.max_retries + 1):
            acc = _StreamAccumulator()
            try:
                async for item in self._chat_items(body):
                    for chunk in self._chunks(item):
                        delta = acc.add(chunk)
                        if delta:
                            yield delta
            except _ReplicaGone as gone:
                await self._wait_to_retry(attempt, gone)
                continue
            yield self._chat._finish(acc)
            return

    # -- the call -----------------------------------------------------------------------

    async def _chat_items(self, body: dict[str, Any]) -> AsyncIterator[Any]:
        """What the deployment's ``chat`` yields for ``body``, sent with the run's id. A call
        left early (cancelled, or an error here) is cancelled at the replica too."""
        handle = await self._deployment_handle()
        from ray.exceptions import RayActorError, RayTaskError
        from ray.serve.exceptions import (
            BackPressureError,
            DeploymentUnavailableError,
            ReplicaUnavailableError,
        )

        run_id = logs.bound_run()
        options = handle.options(stream=True, session_id=run_id or "")
        items = cast("DeploymentResponseGenerator[Any]", options.chat.remote(self._request(body)))
        finished = False
        try:
            async for item in items:
                yield item
            finished = True
        except (
            RayActorError,
            ReplicaUnavailableError,
            BackPressureError,
            DeploymentUnavailableError,
        ) as err:
            raise _ReplicaGone(f"{type(err).__name__}: {_short(err)}") from None
        except RayTaskError as err:
            cause = err.cause if err.cause is not None else err
            raise ModelError(
                f"{self._where()} failed for model {self.model!r}: "
                f"{type(cause).__name__}: {_short(cause)}"
            ) from None
        finally:
            if not finished:
                items.cancel()  # type: ignore[no-untyped-call]  # (Ray leaves it untyped)

    async def _deployment_handle(self) -> DeploymentHandle[Any]:
        if self._handle is None:
            self._handle = await asyncio.to_thread(self._lookup)
        return self._handle

    def _lookup(self) -> DeploymentHandle[Any]:
        try:
            from ray import serve
        except ImportError:
            raise UserError("ServeModel needs Ray Serve: pip install 'raygents[serve]'") from None
        try:
            return serve.get_deployment_handle(self.deployment, app_name=self.app_name)
        except Exception as err:  # Serve not running, no such app or deployment
            raise UserError(
                f"cannot reach Serve deployment {self.deployment!r} of application "
                f"{self.app_name!r}: {type(err).__name__}: {_short(err)}; is it running "
                "(serve.status()) and are the names right?"
            ) from None

    async def _wait_to_retry(self, attempt: int, gone: _ReplicaGone) -> None:
        if attempt >= self.max_retries:
            raise ModelError(
                f"{self._where()} had no replica to answer model {self.model!r} "
                f"({gone}; retried {self.max_retries} times)",
                retryable=True,
            )
        await asyncio.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])

    # -- requests and answers ------------------------------------------------------------

    def _body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        """The Chat Completions body of ``request``, as a server receives it."""
        params = self._chat._params(request)
        extra = params.pop("extra_body", None) or {}
        body: dict[str, Any] = {"model": self.model, **params, **extra, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def _completion(self, items: list[Any]) -> ModelResponse:
        if len(items) != 1:
            raise self._chat._invalid(
                f"answered a request that does not stream with {len(items)} items, not 1"
            )
        data = self._error_checked(_plain(items[0]))
        if not isinstance(data, Mapping):
            kind = type(items[0]).__name__
            raise self._chat._invalid(f"answered with a {kind}, not a completion")
        return self._chat._parse_completion(ChatCompletion.construct(**data))

    def _chunks(self, item: Any) -> Iterable[ChatCompletionChunk]:
        """The chunks in one item of a stream: a ``data: {...}`` string, a list of them, or a
        chunk object."""
        for part in item if isinstance(item, list) else [item]:
            for data in self._events(part):
                yield ChatCompletionChunk.construct(**self._error_checked(data))

    def _events(self, part: Any) -> Iterable[dict[str, Any]]:
        if not isinstance(part, str):
            data = _plain(part)
            if not isinstance(data, dict):
                raise self._chat._invalid(f"streamed a {type(part).__name__}, not a chunk")
            yield data
            return
        for line in part.splitlines():
            payload = line.removeprefix("data:").strip() if line.startswith("data:") else ""
            if not payload or payload == "[DONE]":
                continue
            try:
                data = json.loads(payload)
            except ValueError as err:
                raise self._chat._invalid(f"sent a malformed stream event: {err}") from None
            if not isinstance(data, dict):
                raise self._chat._invalid("sent a stream event that is not a JSON object")
            yield data

    def _error_checked(self, data: Any) -> Any:
        """``data``, unless it is an ``ErrorResponse``: then its error, raised."""
        if not isinstance(data, Mapping) or "error" not in data or "choices" in data:
            return data
        error = data["error"]
        error = error if isinstance(error, Mapping) else {"message": str(error)}
        code = error.get("code")
        status = code if isinstance(code, int) and 400 <= code <= 599 else None
        retryable = status is not None and (status in (408, 409, 429) or status >= 500)
        kind = f" {error.get('type')}" if error.get("type") else ""
        shown = f" {status}" if status is not None else ""
        raise ModelError(
            f"{self._where()} answered model {self.model!r} with error{shown}{kind}: "
            f"{_short(error.get('message', ''))}",
            status_code=status,
            retryable=retryable,
        )

    def _request(self, body: dict[str, Any]) -> Any:
        """``body`` as Ray Serve LLM's request type where it imports, else as is."""
        kind = _protocol()
        if kind is None:
            return body
        try:
            return kind(**body)
        except Exception as err:  # (pydantic's ValidationError, of vLLM's model)
            raise ModelError(
                f"cannot build the ChatCompletionRequest for {self._where()}: {_short(err)}"
            ) from None

    def _where(self) -> str:
        return f"Serve deployment {self.deployment!r} of application {self.app_name!r}"


class _ReplicaGone(Exception):
    """The replica a call went to died, or no replica could take it: send it again."""


_PROTOCOL: list[Any] = []
"""Ray Serve LLM's ``ChatCompletionRequest`` (or None where vLLM and SGLang are missing),
once looked up."""


def _protocol() -> Any:
    """Ray Serve LLM's ``ChatCompletionRequest``, or None where it does not import."""
    if not _PROTOCOL:
        try:
            from ray.serve.llm.openai_api_models import ChatCompletionRequest
        except ImportError:  # neither vLLM nor SGLang here: a deployment of your own
            _PROTOCOL.append(None)
        else:
            _PROTOCOL.append(ChatCompletionRequest)
    return _PROTOCOL[0]


def _plain(item: Any) -> Any:
    """A response object (pydantic) as plain data."""
    dump = getattr(item, "model_dump", None)
    return dump() if callable(dump) else item


def _short(value: object, limit: int = 500) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."
