"""The S3 store: objects under a prefix of a bucket, through boto3 (the only module that
imports it, and only when a store is opened)."""

from __future__ import annotations

import builtins
import contextlib
import functools
import os
import random
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from raygents.core.secrets import mask
from raygents.errors import CheckpointCorrupt, CheckpointError, RaygentsError, UserError
from raygents.stores.base import Store, is_key, short, too_large, validate_key

__all__ = ["S3Store", "on_retries"]

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", re.ASCII)
_T = TypeVar("_T")

_RETRYABLE_CODES = frozenset(
    [
        "SlowDown",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "ConditionalRequestConflict",
        "OperationAborted",
    ]
)
_FORBIDDEN_CODES = frozenset(
    [
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "AccountProblem",
    ]
)
_SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
_ACTIONS = {
    "PutObject": "write",
    "GetObject": "read",
    "HeadObject": "read",
    "ListObjectsV2": "list",
    "DeleteObjects": "delete",
}
"""The store action of each S3 operation this store sends."""

RetryListener = Callable[[str, int], None]
"""Told ``(action, count)``: ``count`` requests of ``action`` (write, read, list, delete) were
sent again."""
_retry_listeners: list[RetryListener] = []


def on_retries(listener: RetryListener) -> None:
    """Tell ``listener`` of every request an S3 store of this process sends again (after
    throttling such as 503 SlowDown, a 5xx or a lost connection): botocore's retries within a
    call and the store's own further rounds. The telemetry's metrics listen."""
    if listener not in _retry_listeners:
        _retry_listeners.append(listener)


def _retried(action: str, count: int) -> None:
    for listener in tuple(_retry_listeners):
        with contextlib.suppress(Exception):  # (a listener's failure is never the store's)
            listener(action, count)


def _count_retries(parsed: Any = None, model: Any = None, **_: Any) -> None:
    """botocore's ``after-call`` event: the retries of one call (its answer's metadata)."""
    meta = parsed.get("ResponseMetadata") if isinstance(parsed, dict) else None
    count = meta.get("RetryAttempts") if isinstance(meta, dict) else None
    if type(count) is int and count > 0:
        _retried(_ACTIONS.get(getattr(model, "name", ""), "other"), count)


class _Failure(NamedTuple):
    """An S3 failure turned into a CheckpointError, and whether to retry it."""

    error: CheckpointError
    retry: bool


class S3Store(Store):
    """Objects under ``prefix/`` in an S3 bucket (or anything that speaks S3).

    Credentials, region and endpoint come from the standard AWS environment and config files
    (``AWS_ENDPOINT_URL_S3`` points at MinIO, Ceph or a local test server). botocore's
    ``standard`` retry mode retries throttling, 5xx and connection errors; this store adds
    ``extra_retries`` rounds with exponential backoff on top, and does not retry 403s.
    Puts are create-only (``If-None-Match: *``); on 412 the existing object is compared.

    Args:
        bucket: the bucket name.
        prefix: the key prefix (segments without a trailing ``/``), or ``""``.
        max_attempts: botocore's attempts per call; ``AWS_MAX_ATTEMPTS`` or 4 by default.
        extra_retries: further rounds after botocore gives up on a retryable error.
        backoff_s: the first pause between rounds; it doubles each round, with jitter.
        connect_timeout_s: the TCP connect timeout of one attempt.
        read_timeout_s: the socket read timeout of one attempt.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        max_attempts: int | None = None,
        extra_retries: int = 2,
        backoff_s: float = 0.5,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
    ) -> None:
        if type(bucket) is not str or not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise UserError(f"invalid S3 bucket name {short(str(bucket))}")
        prefix = prefix.strip("/")
        if prefix:
            validate_key(prefix)
        self._bucket, self._prefix = bucket, prefix
        self._max_attempts = _max_attempts(max_attempts)
        self._extra_retries = max(0, extra_retries)
        self._backoff_s = max(0.0, backoff_s)
        self._timeouts = (connect_timeout_s, read_timeout_s)
        self._client_lock = threading.Lock()
        self._client_object: Any = None
        _boto3()  # fail at open time, not at the first checkpoint, when the extra is missing

    @property
    def url(self) -> str:
        return f"s3://{self._bucket}/{self._prefix}" if self._prefix else f"s3://{self._bucket}"

    @property
    def endpoint_url(self) -> str:
        """The endpoint the client talks to."""
        return str(self._client().meta.endpoint_url)

    def _put(self, key: str, data: bytes) -> None:
        name = self._object_key(key)
        for _ in range(3):
            if self._call("write", key, lambda: self._put_once(name, data)):
                return
            try:  # 412: compare; a retry after a lost reply lands here
                existing = self._get(key, len(data))
            except CheckpointCorrupt as exc:
                if getattr(exc, "reason", None) != "too large":
                    raise
                raise self._conflict(key) from None
            if existing == data:
                return
            if existing is not None:
                raise self._conflict(key)
        raise CheckpointError(f"checkpoint {key!r} in {self.url} keeps vanishing", key=key)

    def _put_once(self, name: str, data: bytes) -> bool:
        client = self._client()
        try:
            client.put_object(Bucket=self._bucket, Key=name, Body=data, IfNoneMatch="*")
        except client.exceptions.ClientError as exc:
            if _status(exc) == 412 or _code(exc) == "PreconditionFailed":
                return False
            raise
        return True

    def has(self, key: str) -> bool:
        """Whether ``key`` exists (one ``HEAD`` request)."""
        validate_key(key)
        return self._call("read", key, lambda: self._head_once(key))

    def _head_once(self, key: str) -> bool:
        client = self._client()
        try:
            client.head_object(Bucket=self._bucket, Key=self._object_key(key))
        except client.exceptions.ClientError as exc:
            if _status(exc) == 404 and _code(exc) != "NoSuchBucket":
                return False
            raise
        return True

    def _get(self, key: str, max_bytes: int) -> bytes | None:
        return self._call("read", key, lambda: self._get_once(key, max_bytes))

    def _get_once(self, key: str, max_bytes: int) -> bytes | None:
        client = self._client()
        try:
            response = client.get_object(Bucket=self._bucket, Key=self._object_key(key))
        except client.exceptions.ClientError as exc:
            if _code(exc) in ("NoSuchKey", "404") or (
                _status(exc) == 404 and _code(exc) != "NoSuchBucket"
            ):
                return None
            raise
        body = response["Body"]
        try:  # (closing a body not read to its end drops the connection, as it should)
            size = response.get("ContentLength")
            if type(size) is int and size > max_bytes:
                raise too_large(self.url, key, size, max_bytes)
            data = _read_at_most(body, max_bytes + 1)  # the length may lie
        finally:
            body.close()
        if len(data) > max_bytes:
            raise too_large(self.url, key, None, max_bytes)
        return data

    def _list(self, prefix: str) -> builtins.list[str]:
        return self._call("list", prefix or None, lambda: self._list_once(prefix))

    def _list_once(self, prefix: str) -> builtins.list[str]:
        base = f"{self._prefix}/" if self._prefix else ""
        pages = self._client().get_paginator("list_objects_v2")
        keys = []
        for page in pages.paginate(Bucket=self._bucket, Prefix=base + prefix):
            for item in page.get("Contents", ()):
                key = str(item["Key"])[len(base) :]
                if is_key(key):  # skip objects this store could not have written
                    keys.append(key)
        return keys

    def _delete(self, keys: builtins.list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            objects = [{"Key": self._object_key(key)} for key in batch]
            delete = functools.partial(
                self._client().delete_objects,
                Bucket=self._bucket,
                Delete={"Objects": objects, "Quiet": True},
            )
            response = self._call("delete", batch[0] if len(batch) == 1 else None, delete)
            errors = [e for e in response.get("Errors", ()) if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                raise CheckpointError(
                    f"cannot delete {len(errors)} checkpoints in {self.url}, e.g. "
                    f"{first.get('Key')!r}: {first.get('Code')}",
                )

    def _object_key(self, key: str) -> str:
        return f"{self._prefix}/{key}" if self._prefix else key

    def _client(self) -> Any:
        with self._client_lock:
            if self._client_object is None:
                self._client_object = _make_client(self._max_attempts, *self._timeouts)
            return self._client_object

    def _call(self, action: str, key: str | None, operation: Callable[[], _T]) -> _T:
        """Run ``operation``, retrying retryable failures; raise a clear CheckpointError."""
        for attempt in range(self._extra_retries + 1):
            try:
                return operation()
            except RaygentsError:
                raise
            except Exception as exc:
                failure = self._failure(exc, action, key)
                if not failure.retry or attempt == self._extra_retries:
                    raise failure.error from exc
                _retried(action, 1)
            time.sleep(self._backoff_s * 2**attempt * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable")

    def _failure(self, exc: Exception, action: str, key: str | None) -> _Failure:
        """Classify an exception from boto3; anything not from boto3 is re-raised."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            HTTPClientError,
            IncompleteReadError,
            NoCredentialsError,
            PartialCredentialsError,
            SSLError,
        )
        from botocore.exceptions import (
            ConnectionError as BotoConnectionError,
        )

        what = f"{action} checkpoint {key!r}" if key else f"{action} checkpoints"
        if isinstance(exc, ClientError):
            return self._client_failure(exc, what, key)
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            message = (
                f"cannot {what} in {self.url}: no usable AWS credentials; set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or configure a profile"
            )
            return _Failure(CheckpointError(message, key=key), retry=False)
        unreachable = (BotoConnectionError, HTTPClientError, IncompleteReadError)
        if isinstance(exc, unreachable) and not isinstance(exc, SSLError):
            attempts = self._max_attempts * (self._extra_retries + 1)
            message = (
                f"cannot {what} in {self.url}: the S3 endpoint {self.endpoint_url} is "
                f"unreachable or dropped the connection ({type(exc).__name__}; gave up after "
                f"{attempts} attempts)"
            )
            return _Failure(CheckpointError(message, key=key), retry=True)
        if isinstance(exc, BotoCoreError):
            message = f"cannot {what} in {self.url}: {_redact(str(exc))}"
            return _Failure(CheckpointError(message, key=key), retry=False)
        raise exc

    def _client_failure(self, exc: Any, what: str, key: str | None) -> _Failure:
        code, status = _code(exc), _status(exc)
        if code == "NoSuchBucket":
            message = (
                f"cannot {what}: S3 bucket {self._bucket!r} does not exist at "
                f"{self.endpoint_url}; create it or fix the store URL {self.url!r}"
            )
            return _Failure(CheckpointError(message, key=key), retry=False)
        if status == 403 or code in _FORBIDDEN_CODES:
            message = (
                f"cannot {what}: access denied ({code}) to bucket {self._bucket!r} "
                f"prefix {self._prefix!r}; check that the configured AWS credentials may read, "
                "write, list and delete there"
            )
            return _Failure(CheckpointError(message, key=key), retry=False)
        retry = status in (429, 500, 502, 503, 504) or code in _RETRYABLE_CODES
        attempts = f" after {self._max_attempts * (self._extra_retries + 1)} attempts"
        message = (
            f"cannot {what} in {self.url}: S3 answered {code} (HTTP {status})"
            f"{attempts if retry else ''}: {_redact(_error_message(exc))}"
        )
        return _Failure(CheckpointError(message, key=key), retry=retry)


def _read_at_most(body: Any, limit: int) -> bytes:
    """Read ``body`` to its end or to ``limit`` bytes, whichever comes first; at the end,
    botocore checks that the body was as long as the response said."""
    data = bytearray()
    while len(data) < limit:
        chunk = body.read(limit - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def _boto3() -> tuple[Any, Any]:
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise UserError("s3:// checkpoint stores need boto3: pip install 'raygents[s3]'") from exc
    return boto3, Config


def _make_client(max_attempts: int, connect_timeout_s: float, read_timeout_s: float) -> Any:
    boto3, config_class = _boto3()
    config = config_class(
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        user_agent_extra=_writer_tag(),
    )
    client = boto3.session.Session().client("s3", config=config)
    client.meta.events.register("after-call.s3", _count_retries)
    return client


def _writer_tag() -> str:
    """Who sends the requests, for S3's access logs: ``raygents pid/<pid>``, and
    ``ray-node/<id>`` inside a Ray worker (records are written on the node of their run)."""
    tag = f"raygents pid/{os.getpid()}"
    ray = sys.modules.get("ray")  # (this module never imports Ray itself)
    if ray is not None and ray.is_initialized():
        tag += f" ray-node/{ray.get_runtime_context().get_node_id()}"
    return tag


def _max_attempts(value: int | None) -> int:
    if value is None:
        text = os.environ.get("AWS_MAX_ATTEMPTS", "4")
        try:
            value = int(text)
        except ValueError:
            raise UserError(f"AWS_MAX_ATTEMPTS must be an int, got {text!r}") from None
    if value < 1:
        raise UserError(f"max_attempts must be at least 1, got {value!r}")
    return value


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: Any) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _error_message(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Message", ""))[:200]


def _redact(text: str) -> str:
    """``text`` with the AWS secrets of this process's environment masked."""
    return mask(text, (os.environ.get(name) for name in _SECRET_VARIABLES))
