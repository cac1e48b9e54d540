"""The JSON bodies the API takes: read under a size cap, parsed with hostile input refused
(deep nesting, huge or non-finite numbers, lone surrogates), and validated into their models
(unknown fields refused)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from raygents.errors import MAX_PAYLOAD_BYTES
from raygents.serve.problems import Problem

__all__ = [
    "ApprovalsRequest",
    "ForkRequest",
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "ReplayRequest",
    "RunRequest",
    "ThreadRunRequest",
    "parse_json",
    "read_body",
    "validated",
]

MAX_BODY_BYTES = MAX_PAYLOAD_BYTES["run input"] + 1024 * 1024
"""The largest body taken: a run's input at its cap, and a megabyte for the rest."""
MAX_DEPTH = 64
"""How deeply arrays and objects may nest in a body."""
_MAX_DIGITS = 64
M = TypeVar("M", bound=BaseModel)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Decision(_Body):
    """A decision with a message for the model (a denial's reason)."""

    approved: bool = Field(strict=True)
    message: str | None = Field(default=None, max_length=10_000, strict=True)


class _RunLimits(_Body):
    """The limits and delivery of a run a request starts (a run, a thread's run, a fork)."""

    max_turns: int | None = Field(strict=True, default=None, ge=1, le=1_000_000)
    max_tokens: int | None = Field(strict=True, default=None, ge=1, le=10**15)
    timeout_s: float | None = Field(
        strict=True, default=None, gt=0, le=10 * 365 * 86400, allow_inf_nan=False
    )
    webhook: str | None = Field(
        default=None,
        max_length=2048,
        strict=True,
        description="where the run's outcome is POSTed when it ends",
    )
    wait: bool = Field(
        strict=True, default=False, description="answer when the run stops, with its outcome"
    )


class RunRequest(_RunLimits):
    """``POST /v1/runs``: a run to start."""

    agent: str = Field(
        strict=True, min_length=1, max_length=128, description="the served agent's name"
    )
    input: str | list[dict[str, Any]] = Field(
        description="a user message, or messages as OpenAI-style dicts"
    )
    context: Any = Field(default=None, description="given to tools and instructions (JSON)")
    run_id: str | None = Field(
        default=None, strict=True, description="the run's id (default: a new one)"
    )
    thread_id: str | None = Field(
        default=None, strict=True, description="the conversation it belongs to"
    )
    if_busy: Literal["reject", "enqueue", "interrupt"] = Field(
        default="reject", description="with thread_id: what a message to a busy thread does"
    )


class ForkRequest(_RunLimits):
    """``POST /v1/runs/{run_id}/fork``: a new run from the run's checkpoint ``at``."""

    agent: str = Field(
        strict=True,
        min_length=1,
        max_length=128,
        description="the served agent whose graph holds the agent active at the checkpoint",
    )
    at: int | None = Field(
        strict=True,
        default=None,
        ge=1,
        description="the seq of the checkpoint to fork from (see history; default: the newest)",
    )
    input: str | list[dict[str, Any]] | None = Field(
        default=None, description="new user input appended to the conversation"
    )
    run_id: str | None = Field(
        default=None, strict=True, description="the fork's run id (default: a new one)"
    )
    context: Any = Field(default=None, description="the fork's context (default: the source's)")


class ReplayRequest(_Body):
    """``POST /v1/runs/{run_id}/replay``: the agent graph to check the run's decisions with."""

    agent: str = Field(
        strict=True, min_length=1, max_length=128, description="the served agent to replay with"
    )


class ThreadRunRequest(RunRequest):
    """``POST /v1/threads/{thread_id}/runs``: as a run, the thread named by the path."""


class ApprovalsRequest(_Body):
    """``POST /v1/runs/{run_id}/approvals``: a decision for each pending call."""

    decisions: dict[str, StrictBool | Decision] = Field(
        description="call id: true (approve), false (deny) or {approved, message}"
    )


class Outcome(_Body):
    """What a call in doubt did, as a person checked it: its result (an error for a failure)."""

    content: str = Field(max_length=100_000, strict=True)
    is_error: bool = Field(default=False, strict=True)


class ResolutionsRequest(_Body):
    """``POST /v1/runs/{run_id}/resolutions``: a resolution for each call in doubt."""

    resolutions: dict[str, Literal["rerun"] | Outcome] = Field(
        description='call id: "rerun" (run it again, same key) or {content, is_error}'
    )


async def read_body(headers: dict[str, str], chunks: AsyncIterable[bytes]) -> bytes:
    """The body, refused (413) past :data:`MAX_BODY_BYTES` as soon as that is known: from its
    ``Content-Length`` before reading, else while reading."""
    length = headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        raise Problem(
            413, "PayloadTooLarge", f"the body is over the limit of {MAX_BODY_BYTES} bytes"
        )
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise Problem(
                413, "PayloadTooLarge", f"the body is over the limit of {MAX_BODY_BYTES} bytes"
            )
    return bytes(body)


def _bad(message: str) -> Problem:
    return Problem(400, "InvalidJSON", message)


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise _bad(f"a number has more than {_MAX_DIGITS} digits")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _bad(f"a number is out of range: {text[:40]!r}")
    return value


def _constant(text: str) -> Any:
    raise _bad(f"{text} is not JSON")


def parse_json(body: bytes) -> Any:
    """A body's JSON, refused (400) where it is not UTF-8 JSON, nests deeper than
    :data:`MAX_DEPTH`, has a number that is huge, infinite or NaN, or a string (or key) with a
    lone surrogate."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad("the body is not UTF-8") from None
    try:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise _bad(f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise _bad(f"the body is not JSON: {exc}") from None
    _check_tree(value)
    return value


def _check_tree(value: Any) -> None:
    """Refuse nesting past :data:`MAX_DEPTH` and lone surrogates (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise _bad(f"the body nests deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            for key, inner in item.items():
                _check_text(key)
                stack.append((inner, depth + 1))
        else:
            stack.extend((inner, depth + 1) for inner in item)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad("a string holds a lone surrogate (\\ud800-\\udfff): not text") from None


def validated(model: type[M], value: Any) -> M:
    """``value`` as ``model``; 422 naming the first field in error."""
    if not isinstance(value, dict):
        raise Problem(422, "ValidationError", "the body must be a JSON object", field="")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise Problem(
            422, "ValidationError", f"{where or 'body'}: {first['msg']}", field=where
        ) from None
