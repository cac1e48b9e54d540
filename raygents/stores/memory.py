"""The memory store: a dict in this process per name, shared by every store opened with it."""

from __future__ import annotations

import builtins
import threading

from raygents.stores.base import Store, too_large, validate_key

__all__ = ["MemoryStore"]


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

    def has(self, key: str) -> bool:
        validate_key(key)
        with _MEMORY_LOCK:
            return key in self._data

    def _get(self, key: str, max_bytes: int) -> bytes | None:
        with _MEMORY_LOCK:
            data = self._data.get(key)
        if data is not None and len(data) > max_bytes:
            raise too_large(self.url, key, len(data), max_bytes)
        return data

    def _list(self, prefix: str) -> builtins.list[str]:
        with _MEMORY_LOCK:
            return [key for key in self._data if key.startswith(prefix)]

    def _delete(self, keys: builtins.list[str]) -> None:
        with _MEMORY_LOCK:
            for key in keys:
                self._data.pop(key, None)
