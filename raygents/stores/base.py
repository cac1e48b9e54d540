"""The store interface and the rules of its keys: what every checkpoint store implements.

Every store is synchronous and thread-safe; callers run it in a thread pool. Keys are
``/``-separated safe segments (see :func:`validate_key`). Writes are create-only: putting an
existing key fails unless the stored bytes are identical, so a retried put is harmless and
nothing is ever overwritten in place. No read returns (or reads) more than a limit,
:data:`DEFAULT_MAX_BYTES` by default.
"""

from __future__ import annotations

import abc
import builtins
import re
from collections.abc import Iterable
from typing import NoReturn

from raygents.errors import CheckpointCorrupt, CheckpointError, UserError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_KEY_LENGTH",
    "MAX_SEGMENT_LENGTH",
    "Store",
    "is_key",
    "short",
    "too_large",
    "validate_key",
    "validate_prefix",
]

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
"""The largest value a read returns unless told otherwise: the largest record the codec
writes (:mod:`raygents.records.codec` holds its records to it)."""
MAX_KEY_LENGTH = 512
MAX_SEGMENT_LENGTH = 128
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*", re.ASCII)


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
                f"segment {short(segment)} must start with a letter, digit or '_', hold only "
                f"ASCII letters, digits, '.', '_' and '-', and be at most "
                f"{MAX_SEGMENT_LENGTH} characters",
            )
        if ".." in segment:
            _bad_key(key, f"segment {short(segment)} contains '..'")
    return key


def validate_prefix(prefix: str) -> str:
    if type(prefix) is not str:
        raise UserError(f"a store prefix must be a str, not {type(prefix).__name__}")
    if prefix:
        validate_key(prefix[:-1] if prefix.endswith("/") else prefix)
    return prefix


def is_key(key: str) -> bool:
    try:
        validate_key(key)
    except UserError:
        return False
    return True


def _bad_key(key: str, why: str) -> NoReturn:
    raise UserError(f"invalid store key {short(key)}: {why}")


def short(text: str) -> str:
    """``text`` as a message shows it: quoted, and cut when long."""
    return repr(text) if len(text) <= 80 else repr(text[:60]) + f"... ({len(text)} characters)"


def too_large(url: str, key: str, size: int | None, max_bytes: int) -> CheckpointCorrupt:
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
                ``max_bytes`` + 1 bytes are read. :data:`DEFAULT_MAX_BYTES` by default, which
                no checkpoint raygents writes exceeds.

        Raises:
            CheckpointCorrupt: the value is larger than ``max_bytes`` (``reason`` "too large").
            CheckpointError: the store failed, or the file store found a symbolic link or
                something other than a file where the key or its directories should be.
            UserError: the key or ``max_bytes`` is invalid.
        """
        validate_key(key)
        if type(max_bytes) is not int or max_bytes < 0:
            raise UserError(f"max_bytes must be an int of at least 0, got {short(repr(max_bytes))}")
        return self._get(key, max_bytes)

    def mark(self, key: str) -> None:
        """Create an empty ``key`` if it does not exist: a mark that writers look for, which
        need not survive a crash of the machine (the file store skips its fsyncs)."""
        self.put(key, b"")

    def has(self, key: str) -> bool:
        """Whether ``key`` exists (reads no more than its first byte)."""
        validate_key(key)
        try:
            return self._get(key, 0) is not None
        except CheckpointCorrupt:  # (larger than 0 bytes: it exists)
            return True

    def put_if_dir(self, key: str, data: bytes) -> bool:
        """:meth:`put`, but only where the key's directory exists, in stores that have
        directories (the file store); False if nothing was written because it is gone.
        Stores without directories put and return True."""
        self.put(key, data)
        return True

    def make_dir(self, prefix: str) -> None:
        """Create the directory that keys under ``prefix`` go into, where the store has
        directories (the file store); nothing otherwise."""
        validate_prefix(prefix)

    def remove_empty_dir(self, prefix: str) -> None:
        """Remove the directory of ``prefix`` if it is empty, where the store has
        directories (the file store); nothing otherwise."""
        validate_prefix(prefix)

    def list(self, prefix: str = "") -> builtins.list[str]:
        """Return every key that starts with ``prefix`` (a plain string prefix), sorted."""
        return sorted(self._list(validate_prefix(prefix)))

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
