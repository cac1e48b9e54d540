"""MemorySession: conversations shared by every process of the Ray cluster."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import Any

from raygents.core.messages import Message
from raygents.sessions.base import (
    build_messages,
    check_compacted,
    check_input_len,
    dump_messages,
    merge_compacted,
    merge_save,
    validate_session_id,
)

__all__ = ["MemorySession"]


class _ConversationTable:
    """The conversations of one MemorySession: session id -> JSON-mode messages, and their
    marks (see :func:`merge_save`). A Ray actor's state, or (without Ray) this process's."""

    def __init__(
        self,
        data: dict[str, list[dict[str, Any]]] | None = None,
        marks: dict[str, list[int]] | None = None,
    ) -> None:
        self.data = {} if data is None else data
        self.marks = {} if marks is None else marks

    def load(self, session_id: str) -> list[dict[str, Any]]:
        return self.data.get(session_id, [])

    def save(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        self.write(session_id, messages, None)

    def write(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        input_len: int | None,
        compacted: tuple[int, int, int] | None = None,
    ) -> None:
        """Save (``input_len`` None), save a run's conversation (see :func:`merge_save`) or
        a compacted run's (``compacted``, see :func:`merge_compacted`)."""
        current, marks = self.data.get(session_id, []), self.marks.get(session_id, [])
        if compacted is not None:
            new, marks = merge_compacted(current, marks, messages, compacted)
        else:
            new, marks = merge_save(current, marks, messages, input_len)
        self.data[session_id], self.marks[session_id] = new, marks

    def merge(
        self, data: dict[str, list[dict[str, Any]]], marks: dict[str, list[int]] | None = None
    ) -> None:
        """Take conversations saved before Ray was up (those the actor has win)."""
        for session_id, messages in data.items():
            if session_id not in self.data:
                self.data[session_id] = messages
                self.marks[session_id] = (marks or {}).get(session_id, [])


_LOCAL: dict[str, dict[str, list[dict[str, Any]]]] = {}
_LOCAL_MARKS: dict[str, dict[str, list[int]]] = {}
_LOCAL_LOCK = threading.Lock()


class MemorySession:
    """Conversations in memory, shared by every actor and task of the Ray cluster.

    Each instance is backed by one named Ray actor (``num_cpus=0``, detached, in the
    ``raygents`` namespace), created on first use; only the actor's name travels when the
    session is pickled, so every copy sees the same conversations. Nothing survives the
    cluster. Without Ray initialised, it keeps conversations in this process (copies in the
    same process share them), and hands them to the actor once Ray is up.

    With Ray, ``load`` and ``save`` block on the actor (``ray.get``); in async code call them
    through :func:`load_session` / :func:`save_session`, which use a worker thread.
    """

    def __init__(self) -> None:
        self.name = f"raygents-session-{uuid.uuid4().hex}"
        self._actor: Any = None

    def __getstate__(self) -> dict[str, Any]:
        if self.name in _LOCAL:  # saved before Ray was up: hand the data to the actor first
            self._table()
        return {"name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.name = state["name"]
        self._actor = None

    def __repr__(self) -> str:
        return f"MemorySession({self.name!r})"

    def load(self, session_id: str) -> list[Message]:
        """The stored conversation (a fresh copy), or ``[]`` for an unknown id."""
        validate_session_id(session_id)
        actor = self._table()
        if actor is None:
            with _LOCAL_LOCK:
                data = list(_LOCAL.get(self.name, {}).get(session_id, []))
        else:
            import ray

            data = ray.get(actor.load.remote(session_id))
        return build_messages(data, f"memory session {session_id!r}")

    def save(self, session_id: str, messages: Sequence[Message]) -> None:
        """Replace the stored conversation with a copy of ``messages``."""
        self._write(session_id, messages, None)

    def save_run(self, session_id: str, messages: Sequence[Message], *, input_len: int) -> None:
        """Save a run's conversation, keeping what other runs saved since it loaded (see
        :class:`Session`)."""
        self._write(session_id, messages, check_input_len(input_len))

    def save_compacted(
        self, session_id: str, messages: Sequence[Message], *, compacted: tuple[int, int, int]
    ) -> None:
        """Save a compacted run's conversation: its summary in place of what it stands for,
        keeping what other runs saved since (see :class:`Session`)."""
        self._write(session_id, messages, None, check_compacted(compacted, len(messages)))

    def _write(
        self,
        session_id: str,
        messages: Sequence[Message],
        input_len: int | None,
        compacted: tuple[int, int, int] | None = None,
    ) -> None:
        validate_session_id(session_id)
        data = dump_messages(messages)
        actor = self._table()
        if actor is None:
            with _LOCAL_LOCK:
                table = _ConversationTable(
                    _LOCAL.setdefault(self.name, {}), _LOCAL_MARKS.setdefault(self.name, {})
                )
                table.write(session_id, data, input_len, compacted)
        else:
            import ray

            ray.get(actor.write.remote(session_id, data, input_len, compacted))

    def close(self) -> None:
        """Forget every conversation and stop the backing actor (a later use starts afresh)."""
        with _LOCAL_LOCK:
            _LOCAL.pop(self.name, None)
            _LOCAL_MARKS.pop(self.name, None)
        actor = self._table()
        if actor is not None:
            import ray

            ray.kill(actor)
        self._actor = None

    def _table(self) -> Any:
        """The backing actor, or ``None`` when Ray is not initialised in this process."""
        import ray  # only when used: ``import raygents`` must not import Ray's runtime

        if not ray.is_initialized():
            return None
        if self._actor is None:
            self._actor = (
                ray.remote(_ConversationTable)
                .options(
                    name=self.name,
                    namespace="raygents",
                    get_if_exists=True,
                    num_cpus=0,
                    lifetime="detached",
                )
                .remote()
            )
            with _LOCAL_LOCK:
                local = _LOCAL.pop(self.name, None)
                marks = _LOCAL_MARKS.pop(self.name, None)
            if local:
                ray.get(self._actor.merge.remote(local, marks))
        return self._actor
