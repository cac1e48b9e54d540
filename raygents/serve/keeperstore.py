"""KeeperRecords: the keeper's state in the checkpoint store, so that a keeper that restarts
goes on where it was: each message a thread accepted and has not started, each run a thread
started, and each webhook delivery with its body and, once done, how it ended.

Keys live under ``serve/<app>/`` (``<app>``: a digest of the namespace and route prefix):

- ``threads/<thread_id>/<seq>-m``: a message accepted (its request, written before the POST
  is answered); removed once its run started or could not start;
- ``threads/<thread_id>/<seq>-r``: the run it started (its id and input count);
- ``webhooks/<run_id>/<gen>-a``: a delivery to make when the run stops (written before the
  request that asked for it is answered); ``-b``: the body, written before the first attempt
  (a delivery after a restart sends the same bytes, so the same signature); ``-d``: how it
  ended. A delivery whose ``-d`` is missing is made (again) after a restart: at least once.

The store is create-only: a record is written once and removed, never changed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raygents.errors import CheckpointError, RaygentsError
from raygents.records import codec
from raygents.stores.base import Store
from raygents.stores.open import open_store

__all__ = ["KeeperRecords", "Queued", "Restored", "ThreadRecord", "WebhookRecord"]

log = logging.getLogger("raygents")
_PREFIX = "serve"


@dataclass
class Queued:
    """A message of a thread, accepted and not started yet."""

    run_id: str
    request: dict[str, Any]
    seq: int
    """Its place in the thread's order of messages (a key of its records)."""
    front: bool = False
    """It interrupts: it goes before the messages queued (the latest such one first)."""
    restored: bool = False
    """Read back after a restart (it may have started just before the keeper stopped)."""


@dataclass
class ThreadRecord:
    """A thread as read back: its agent, the runs it started, the messages it still owes."""

    agent: str
    started: list[tuple[int, str, int]] = field(default_factory=list)
    """``(turn, run_id, input count)`` of each run it started, in the order they started
    (an interrupting message starts before those queued before it)."""
    queued: list[Queued] = field(default_factory=list)
    """Its messages not started yet, in the order they run."""


@dataclass
class WebhookRecord:
    """A run's newest webhook delivery as read back."""

    gen: int
    url: str
    body: bytes | None = None
    """The body sent (or about to be), once it was written."""
    done: dict[str, Any] | None = None
    """How it ended (the delivery's document), once it did."""


@dataclass
class Restored:
    """What a keeper reads back at start."""

    threads: dict[str, ThreadRecord] = field(default_factory=dict)
    webhooks: dict[str, WebhookRecord] = field(default_factory=dict)


def app_folder(namespace: str, route_prefix: str) -> str:
    """The folder of one app's records: a digest of its namespace and route prefix."""
    digest = hashlib.sha256(f"{namespace}\n{route_prefix}".encode()).hexdigest()[:16]
    return f"{_PREFIX}/app-{digest}"


class KeeperRecords:
    """Reads and writes one app's keeper records (store I/O in threads, never on the loop).

    Args:
        url: the checkpoint store's URL (``memory://`` keeps nothing across a restart).
        key: the checkpoint HMAC key: records are signed as checkpoints are.
        folder: the app's folder (:func:`app_folder`).
    """

    def __init__(self, url: str, key: bytes | None, folder: str) -> None:
        self.store: Store = open_store(url)
        self.key = key
        self.folder = folder

    # --- threads --------------------------------------------------------------------------
    def _thread_key(self, thread_id: str, seq: int, kind: str) -> str:
        return f"{self.folder}/threads/{thread_id}/{seq:012d}-{kind}"

    async def accepted(self, thread_id: str, agent: str, queued: Queued) -> None:
        """Keep a message a thread accepted (before its POST is answered).

        Raises:
            CheckpointError: the store failed.
        """
        value = {
            "thread_id": thread_id,
            "agent": agent,
            "run_id": queued.run_id,
            "seq": queued.seq,
            "front": queued.front,
            "request": json.dumps(queued.request, ensure_ascii=False),
        }
        await self._put(self._thread_key(thread_id, queued.seq, "m"), value)

    async def started(
        self, thread_id: str, agent: str, queued: Queued, inputs: int | None, turn: int = 0
    ) -> None:
        """A message's run started (``inputs``: its input count; ``turn``: when, a number
        that grows with each start), or could not (``inputs`` None): its message record goes,
        and a started run's record takes its place."""
        try:
            if inputs is not None:
                value = {
                    "thread_id": thread_id,
                    "agent": agent,
                    "run_id": queued.run_id,
                    "seq": queued.seq,
                    "inputs": inputs,
                    "turn": turn,
                }
                await self._put(self._thread_key(thread_id, queued.seq, "r"), value)
            await self._delete([self._thread_key(thread_id, queued.seq, "m")])
        except RaygentsError as exc:  # (read back, it is found started: see Keeper._begin)
            log.warning("thread %s: cannot record run %s: %s", thread_id, queued.run_id, exc)

    # --- webhooks -------------------------------------------------------------------------
    def _hook_key(self, run_id: str, gen: int, kind: str) -> str:
        return f"{self.folder}/webhooks/{run_id}/{gen:06d}-{kind}"

    async def watching(self, run_id: str, gen: int, url: str) -> None:
        """Keep a delivery to make (before the request that asked for it is answered); the
        run's older deliveries go.

        Raises:
            CheckpointError: the store failed.
        """
        await self._put(self._hook_key(run_id, gen, "a"), {"run_id": run_id, "url": url})
        if gen > 1:
            found = await self._list(f"{self.folder}/webhooks/{run_id}/")
            await self._delete([k for k in found if _gen(k) < gen])

    async def body(self, run_id: str, gen: int, body: bytes) -> None:
        """Keep the body of a delivery before its first attempt."""
        await self._put(self._hook_key(run_id, gen, "b"), {"run_id": run_id, "body": body})

    async def ended(self, run_id: str, gen: int, document: dict[str, Any]) -> None:
        """Keep how a delivery ended; its body is no longer needed."""
        try:
            await self._put(self._hook_key(run_id, gen, "d"), {"run_id": run_id, **document})
            await self._delete([self._hook_key(run_id, gen, "b")])
        except RaygentsError as exc:  # (after a restart, it is delivered again)
            log.warning("run %s: cannot record its webhook delivery: %s", run_id, exc)

    async def forget(self, run_ids: Iterable[str]) -> None:
        """Remove the delivery records of runs the keeper no longer keeps."""
        keys: list[str] = []
        for run_id in run_ids:
            keys += await self._list(f"{self.folder}/webhooks/{run_id}/")
        await self._delete(keys)

    # --- reading back ---------------------------------------------------------------------
    async def read_back(self) -> Restored:
        """Every thread's and delivery's records (an unreadable record is left out, with a
        warning)."""
        restored = Restored()
        for key in await self._list(f"{self.folder}/threads/"):
            value = await self._get(key)
            if value is not None:
                _thread_record(restored, key, value)
        for key in await self._list(f"{self.folder}/webhooks/"):
            value = await self._get(key)
            if value is not None:
                _webhook_record(restored, key, value)
        for thread in restored.threads.values():
            started = {run_id for _, run_id, _ in thread.started}
            thread.started.sort()
            thread.queued = sorted(
                (q for q in thread.queued if q.run_id not in started),
                key=lambda q: (0, -q.seq) if q.front else (1, q.seq),
            )
        return restored

    # --- the store ------------------------------------------------------------------------
    async def _put(self, key: str, value: dict[str, Any]) -> None:
        data = codec.encode(value, key=self.key, source=key)
        await asyncio.to_thread(self.store.put, key, data)

    async def _get(self, key: str) -> dict[str, Any] | None:
        try:
            data = await asyncio.to_thread(self.store.get, key)
            if data is None:
                return None
            value = codec.decode(data, key=self.key, source=key)
        except CheckpointError as exc:
            log.warning("the serve keeper cannot read %s: %s", key, exc)
            return None
        return value if isinstance(value, dict) else None

    async def _list(self, prefix: str) -> list[str]:
        return await asyncio.to_thread(self.store.list, prefix)

    async def _delete(self, keys: list[str]) -> None:
        if keys:
            await asyncio.to_thread(self.store.delete, keys)


def _gen(key: str) -> int:
    name = key.rsplit("/", 1)[-1]
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else -1


def _thread_record(restored: Restored, key: str, value: dict[str, Any]) -> None:
    """Add a thread's record (``-m`` or ``-r``) to what was read back."""
    thread_id, agent, run_id, seq = (value.get(k) for k in ("thread_id", "agent", "run_id", "seq"))
    if not (isinstance(thread_id, str) and isinstance(agent, str) and isinstance(run_id, str)):
        return
    if type(seq) is not int or f"/threads/{thread_id}/" not in key:
        return
    thread = restored.threads.setdefault(thread_id, ThreadRecord(agent))
    if key.endswith("-r"):
        inputs, turn = value.get("inputs"), value.get("turn")
        turn = turn if type(turn) is int else seq
        thread.started.append((turn, run_id, inputs if type(inputs) is int else 0))
        return
    try:
        request = json.loads(value.get("request") or "")
    except ValueError:
        request = None
    if isinstance(request, dict):
        front = value.get("front") is True
        thread.queued.append(Queued(run_id, request, seq, front, restored=True))


def _webhook_record(restored: Restored, key: str, value: dict[str, Any]) -> None:
    """Add a delivery's record (``-a``, ``-b`` or ``-d``) to what was read back."""
    run_id, gen, kind = value.get("run_id"), _gen(key), key[-1]
    if not isinstance(run_id, str) or f"/webhooks/{run_id}/" not in key or gen < 0:
        return
    known = restored.webhooks.get(run_id)
    if kind == "a" and isinstance(value.get("url"), str):
        if known is None or known.gen < gen:
            restored.webhooks[run_id] = WebhookRecord(gen, value["url"])
        return
    if known is None or known.gen != gen:
        return  # (listed in order: its -a came first)
    if kind == "b" and isinstance(value.get("body"), bytes):
        known.body = value["body"]
    elif kind == "d":
        known.done = {k: v for k, v in value.items() if k != "run_id"}
