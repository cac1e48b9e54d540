"""Sessions: conversations kept between runs, loaded at a run's start and saved on success.

A session stores one conversation per session id. The runtime loads it before a run (the
messages are prepended to the input); a run holds its session id while it runs (a resumed run
takes it again), so runs on one conversation take turns. When a run completes, its
conversation is saved: through ``save_run`` where the session has it, which stores the
conversation as it is now followed by the run's messages after the history it loaded (a run
that suspended keeps what another run saved meanwhile; see :class:`Session`), else through
``save``, which replaces the conversation. A run whose history a compaction shortened saves
through ``save_compacted``, which puts its summary in place of what it stands for and keeps
what other runs saved meanwhile. Three implementations ship, each with both:

- :class:`MemorySession`: shared by every process of the Ray cluster, gone with the cluster;
- :class:`SQLiteSession`: durable on one machine (a SQLite file, a row per message);
- :class:`StoreSession`: durable in a checkpoint store (``file://``, ``s3://``), a record per
  save of what it changes.

Messages are stored as JSON-mode dicts (``Message.model_dump(mode="json")``), checked to load
back as :class:`~raygents.core.messages.Message` before they are stored; text that is not valid
UTF-8 (lone surrogates) is stored with U+FFFD in its place, and found so in stored data it is
replaced with a warning. Session ids follow the store's key-segment rules everywhere, so a
conversation can move between implementations.
"""

from raygents.sessions.base import Session, load_session, save_session, validate_session_id
from raygents.sessions.memory import MemorySession
from raygents.sessions.sqlite import SQLiteSession
from raygents.sessions.store import StoreSession

__all__ = [
    "MemorySession",
    "SQLiteSession",
    "Session",
    "StoreSession",
    "load_session",
    "save_session",
    "validate_session_id",
]
