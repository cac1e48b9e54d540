"""Checkpoint stores: create-only byte maps in memory, in a directory, or in S3.

Every store is synchronous and thread-safe; callers run it in a thread pool. Keys are
``/``-separated safe segments (see :func:`validate_key`). Writes are create-only: putting an
existing key fails unless the stored bytes are identical, so a retried put is harmless and
nothing is ever overwritten in place. No read returns (or reads) more than a limit, the
codec's by default. Only this module imports ``boto3``, and only lazily; the file store lives in
:mod:`raygents.filestore` and is re-exported here.
"""

from __future__ import annotations

import abc
import builtins
import functools
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar

from raygents.codec import DEFAULT_MAX_BYTES
from raygents.errors import CheckpointCorrupt, CheckpointError, RaygentsError, UserError

if TYPE_CHECKING:
    from raygents.filestore import FileStore

__all__ = [
    "FileStore",
    "MAX_KEY_LENGTH",
    "MAX_SEGMENT_LENGTH",
    "MemoryStore",
    "S3Store",
    "Store",
    "default_store_url",
    "open_store",
    "validate_key",
]

MAX_KEY_LENGTH = 512
MAX_SEGMENT_LENGTH = 128
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*", re.ASCII)
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", re.ASCII)
_SCHEMES = "memory://[name], file://<dir>, s3://<bucket>[/<prefix>]"
_T = TypeVar("_T")


def __getattr__(name: str) -> Any:
    """``FileStore``, imported on first use: :mod:`raygents.filestore` builds on this module."""
    if name == "FileStore":
        from raygents.filestore import FileStore

        return FileStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def validate_key(key: str) -> str:
    """Check that ``key`` is safe as a store key, a file path and an S3 key, and return it.

    A key is one or more segments joined by ``/``; a segment starts with a letter, digit or
    ``_``, continues with letters, digits, ``.``, ``_`` or ``-`` (ASCII only), holds no
    ``..``, and is at most 128 characters; the key is at most 512.

    Raises:
        UserError: the key is not a str or breaks a rule; the message says which.
    """
    if type(key) is not str:
        raise UserError(f"a store key must be a str, not {type(key).__name__}")
    if not key or len(key) > MAX_KEY_LENGTH:
        _bad_key(key, f"it must be 1 to {MAX_KEY_LENGTH} characters long")
    for segment in key.split("/"):
        if not segment:
            _bad_key(key, "it has an empty segment (a leading, trailing or double '/')")
        if len(segment) > MAX_SEGMENT_LENGTH or not _SEGMENT.fullmatch(segment):
            _bad_key(
                key,
                f"segment {_short(segment)} must start with a letter, digit or '_', hold only "
                f"ASCII letters, digits, '.', '_' and '-', and be at most "
                f"{MAX_SEGMENT_LENGTH} characters",
            )
        if ".." in segment:
            _bad_key(key, f"segment {_short(segment)} contains '..'")
    return key


def _validate_prefix(prefix: str) -> str:
    if type(prefix) is not str:
        raise UserError(f"a store prefix must be a str, not {type(prefix).__name__}")
    if prefix:
        validate_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


def _is_key(key: str) -> bool:
    try:
        validate_key(key)
    except UserError:
        return False
    return True


def _bad_key(key: str, why: str) -> NoReturn:
    raise UserError(f"invalid store key {_short(key)}: {why}")


def _short(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:60]) + f"... ({len(text)} characters)"


def _too_large(url: str, key: str, size: int | None, max_bytes: int) -> CheckpointCorrupt:
    """The error for a value over ``max_bytes``: ``size`` bytes, or None when only the bytes
    read so far (``max_bytes`` + 1) are known."""
    amount = f"{size} bytes" if size is not None else f"more than {max_bytes} bytes"
    return CheckpointCorrupt(
        f"checkpoint {key!r} in {url} is {amount}, over the limit of {max_bytes}, and was not "
        "read; raygents writes nothing that large: remove it, or read it with a larger "
        "max_bytes if it is yours",
        key=key,
        reason="too large",
    )


class Store(abc.ABC):
    """A create-only map from keys to bytes; every method is thread-safe and blocking."""

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """The URL that :func:`open_store` turns back into this store."""

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under a new ``key``.

        Raises:
            CheckpointError: the key exists with different bytes, or the store failed.
                The key existing with identical bytes is success.
            UserError: the key is invalid or ``data`` is not bytes.
        """
        validate_key(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise UserError(f"a store value must be bytes, not {type(data).__name__}")
        self._put(key, bytes(data))

    def get(self, key: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes | None:
        """Return the bytes under ``key``, or ``None`` when there are none.

        Args:
            key: the key.
            max_bytes: the largest value returned; of a larger one, no more than
                ``max_bytes`` + 1 bytes are read. The codec's limit by default, which no
                checkpoint raygents writes exceeds.

        Raises:
            CheckpointCorrupt: the value is larger than ``max_bytes`` (``reason`` "too large").
            CheckpointError: the store failed, or the file store found a symbolic link or
                something other than a file where the key or its directories should be.
            UserError: the key or ``max_bytes`` is invalid.
        """
        validate_key(key)
        if type(max_bytes) is not int or max_bytes < 0:
            raise UserError(
                f"max_bytes must be an int of at least 0, got {_short(repr(max_bytes))}"
            )
        return self._get(key, max_bytes)

    def mark(self, key: str) -> None:
        """Create an empty ``key`` if it does not exist: a mark that writers look for, which
        need not survive a crash of the machine (the file store skips its fsyncs)."""
        self.put(key, b"")

    def list(self, prefix: str = "") -> builtins.list[str]:
        """Return every key that starts with ``prefix`` (a plain string prefix), sorted."""
        return sorted(self._list(_validate_prefix(prefix)))

    def delete(self, keys: Iterable[str]) -> None:
        """Delete ``keys``; keys that do not exist are ignored."""
        checked = [validate_key(key) for key in keys]
        if checked:
            self._delete(checked)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def _conflict(self, key: str) -> CheckpointError:
        return CheckpointError(
            f"checkpoint key {key!r} already exists in {self.url} with different content; "
            "checkpoints are never overwritten",
            key=key,
        )

    @abc.abstractmethod
    def _put(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def _get(self, key: str, max_bytes: int) -> bytes | None: ...

    @abc.abstractmethod
    def _list(self, prefix: str) -> Iterable[str]: ...

    @abc.abstractmethod
    def _delete(self, keys: builtins.list[str]) -> None: ...


_MEMORY: dict[str, dict[str, bytes]] = {}
_MEMORY_LOCK = threading.Lock()


class MemoryStore(Store):
    """A dict in this process, shared by every store opened with the same name."""

    def __init__(self, name: str = "") -> None:
        if name:
            validate_key(name)
        self._name = name
        with _MEMORY_LOCK:
            self._data = _MEMORY.setdefault(name, {})

    @property
    def url(self) -> str:
        return f"memory://{self._name}"

    def _put(self, key: str, data: bytes) -> None:
        with _MEMORY_LOCK:
            existing = self._data.setdefault(key, data)
        if existing != data:
            raise self._conflict(key)

    def _get(self, key: str, max_bytes: int) -> bytes | None:
        with _MEMORY_LOCK:
            data = self._data.get(key)
        if data is not None and len(data) > max_bytes:
            raise _too_large(self.url, key, len(data), max_bytes)
        return data

    def _list(self, prefix: str) -> builtins.list[str]:
        with _MEMORY_LOCK:
            return [key for key in self._data if key.startswith(prefix)]

    def _delete(self, keys: builtins.list[str]) -> None:
        with _MEMORY_LOCK:
            for key in keys:
                self._data.pop(key, None)


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
            raise UserError(f"invalid S3 bucket name {_short(str(bucket))}")
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
                raise _too_large(self.url, key, size, max_bytes)
            data = _read_at_most(body, max_bytes + 1)  # the length may lie
        finally:
            body.close()
        if len(data) > max_bytes:
            raise _too_large(self.url, key, None, max_bytes)
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
                if _is_key(key):  # skip objects this store could not have written
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
    )
    return boto3.session.Session().client("s3", config=config)


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
    for name in _SECRET_VARIABLES:
        secret = os.environ.get(name)
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def open_store(url: str) -> Store:
    """Open the checkpoint store that ``url`` names.

    Args:
        url: ``memory://`` or ``memory://<name>`` (a dict in this process);
            ``file://<dir>`` (a relative ``dir`` is resolved against the current directory,
            e.g. ``file://.raygents`` or ``file:///var/lib/raygents``);
            ``s3://<bucket>`` or ``s3://<bucket>/<prefix>``.

    Raises:
        UserError: the URL is malformed or its scheme is not supported.
    """
    if type(url) is not str:
        raise UserError(f"a store URL must be a str, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if scheme == "memory" and sep:
        return MemoryStore(rest)
    if scheme == "file" and sep and rest:
        from raygents.filestore import FileStore

        return FileStore(rest)
    if scheme == "s3" and sep:
        bucket, _, prefix = rest.partition("/")
        if "@" in bucket or "?" in rest or "#" in rest:
            raise UserError("an s3:// store URL takes no credentials, query or fragment")
        return S3Store(bucket, prefix)
    shown = _short(url) if "@" not in url else f"{scheme}://..."
    raise UserError(f"unsupported store URL {shown}: use one of {_SCHEMES}")


def default_store_url() -> str:
    """Return ``file://`` and the absolute path of ``./.raygents`` in the current directory."""
    return f"file://{os.path.abspath('.raygents')}"
