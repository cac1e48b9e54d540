"""Large content parts in the store: an image's or file's bytes kept once, by their SHA-256,
and the messages that carry them holding only that reference.

A run's records, the envelopes in Ray's object store and its events stay small: a part of
more than :data:`THRESHOLD` bytes is put under ``blobs/sha256/<hex>`` (once: the key is its
content's hash, and a store's puts are create-only) and its message holds ``blob`` and
``size`` in place of ``data``. :func:`load` brings the bytes back, checked against their
hash, where a model needs them (before each model call, after a resume or a recovery alike).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from threading import Lock

from raygents.core.messages import Message
from raygents.core.parts import FilePart, ImagePart, Part, TextPart, blob_name
from raygents.errors import MAX_PAYLOAD_BYTES, CheckpointCorrupt, CheckpointError
from raygents.stores.base import Store

__all__ = ["PREFIX", "THRESHOLD", "BlobCache", "blob_key", "keep", "load"]

THRESHOLD = 64 * 1024
"""Parts of more bytes than this are kept in the store, not in the message."""
PREFIX = "blobs/sha256/"


def blob_key(blob: str) -> str:
    """The store key of a part's ``blob`` (``"sha256:<hex>"``)."""
    return PREFIX + blob.removeprefix("sha256:")


def keep(messages: tuple[Message, ...], store: Store) -> tuple[Message, ...]:
    """``messages`` with each part over :data:`THRESHOLD` bytes put in ``store`` and
    referenced by its hash (``messages`` itself where there is none)."""

    def out(part: ImagePart | FilePart) -> Part:
        if part.data is None or len(part.data) <= THRESHOLD:
            return part
        blob = blob_name(hashlib.sha256(part.data).hexdigest())
        key = blob_key(blob)
        if not store.has(key):
            store.put(key, part.data)
        return part.with_blob(blob)  # type: ignore[no-any-return]

    return _mapped(messages, out)


def load(
    messages: tuple[Message, ...], store: Store, cache: BlobCache | None = None
) -> tuple[Message, ...]:
    """``messages`` with the bytes of each part kept in ``store`` back inline.

    Raises:
        CheckpointError: a part's bytes are not in the store (it was cleared, or the run
            was started against another store).
        CheckpointCorrupt: the stored bytes do not match their hash.
    """

    def back(part: ImagePart | FilePart) -> Part:
        if part.blob is None:
            return part
        data = cache.get(part.blob) if cache is not None else None
        if data is None:
            data = _read(store, part.blob)
            if cache is not None:
                cache.put(part.blob, data)
        return part.with_data(data)  # type: ignore[no-any-return]

    return _mapped(messages, back)


def _read(store: Store, blob: str) -> bytes:
    key = blob_key(blob)
    data = store.get(key, max_bytes=MAX_PAYLOAD_BYTES["content part"])
    if data is None:
        raise CheckpointError(
            f"the bytes of a content part ({blob}) are not in the store {store.url} under "
            f"{key!r}: was it cleared, or is this run's store another one?",
            key=key,
        )
    if hashlib.sha256(data).hexdigest() != blob.removeprefix("sha256:"):
        raise CheckpointCorrupt(
            f"the bytes under {key!r} do not match their hash", key=key, reason="hash"
        )
    return data


def _mapped(
    messages: tuple[Message, ...], fn: Callable[[ImagePart | FilePart], Part]
) -> tuple[Message, ...]:
    changed = False
    out = []
    for message in messages:
        if message.parts:
            parts = tuple(p if isinstance(p, TextPart) else fn(p) for p in message.parts)
            if any(a is not b for a, b in zip(parts, message.parts, strict=True)):
                message = message.model_copy(update={"parts": parts})
                changed = True
        out.append(message)
    return tuple(out) if changed else messages


class BlobCache:
    """The bytes of recently loaded parts, by hash, up to ``max_bytes`` in all (a run's
    image is read from the store once, not at every turn)."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = Lock()

    def get(self, blob: str) -> bytes | None:
        with self._lock:
            data = self._items.get(blob)
            if data is not None:
                self._items.move_to_end(blob)
            return data

    def put(self, blob: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        with self._lock:
            if blob in self._items:
                return
            self._items[blob] = data
            self._size += len(data)
            while self._size > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self._size -= len(dropped)
