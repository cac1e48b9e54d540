"""Where the processes of a namespace keep large content parts: its store, opened once per
process, and the bytes read back lately (see :mod:`raygents.records.blobs`).

A ``memory://`` store is a dict in one process, which the driver and the agent actors do not
share: with one, parts stay inline in the messages (as everything of such a run stays in
the coordinator's memory).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from threading import Lock

from raygents.core.messages import Message, ToolResult
from raygents.records import blobs
from raygents.stores.base import Store
from raygents.stores.open import open_store

__all__ = ["keep", "keep_results", "load"]

_stores: dict[str, Store] = {}
_lock = Lock()
_cache = blobs.BlobCache()


def _store(url: str) -> Store | None:
    if url.startswith("memory://"):
        return None
    with _lock:
        store = _stores.get(url)
        if store is None:
            store = _stores[url] = open_store(url)
        return store


def _large(messages: Iterable[Message]) -> bool:
    return any(
        getattr(p, "data", None) is not None and len(p.data) > blobs.THRESHOLD  # type: ignore[union-attr, arg-type]
        for m in messages
        for p in m.parts
    )


def _kept(messages: Iterable[Message]) -> bool:
    return any(getattr(p, "blob", None) is not None for m in messages for p in m.parts)


def keep(messages: tuple[Message, ...], url: str) -> tuple[Message, ...]:
    """``messages`` with their large parts put in the store at ``url`` and referenced (the
    store is opened only where there is one)."""
    store = _store(url) if _large(messages) else None
    return messages if store is None else blobs.keep(messages, store)


async def keep_results(results: list[ToolResult], url: str) -> list[ToolResult]:
    """Tool results with their large parts kept in the store (in a thread: puts block)."""
    held = [Message("tool", r.content, parts=r.parts) for r in results]
    if not _large(held) or _store(url) is None:
        return results
    kept = await asyncio.to_thread(keep, tuple(held), url)
    return [
        r if m.parts == r.parts else r.model_copy(update={"parts": m.parts})
        for r, m in zip(results, kept, strict=True)
    ]


async def load(messages: tuple[Message, ...], url: str) -> tuple[Message, ...]:
    """``messages`` with the bytes of their kept parts loaded (in a thread: reads block).

    Raises:
        CheckpointError: a part's bytes are missing from the store, or corrupt.
    """
    if not _kept(messages):
        return messages
    store = _store(url)
    if store is None:  # (a memory:// run never kept any; a message copied from another may)
        store = open_store(url)
    return await asyncio.to_thread(blobs.load, messages, store, _cache)
