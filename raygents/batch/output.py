"""JSON Lines shards of a batch job's items: the job's output (a directory or an ``s3://``
prefix) and its ledger of completed items in the checkpoint store, written as items end and
read back.

Each run of a job writes its own shards, ``<job_id>.<writer>.<part:05d>.jsonl`` (``writer``
tells runs of the job apart and sorts in the order they started), each of at most
``shard_items`` lines. In a directory each line is appended and flushed as its item ends; in
a store (S3, or the checkpoint store) a shard is one create-only object, put when it is full
and at each :meth:`Shards.flush`. A line is one item (:meth:`raygents.batch.job.BatchItem.to_json`);
a ledger line also holds the fingerprints of the item's input and agent graph, and, with a
checkpoint key, a seal (:mod:`raygents.records.ledger`). An index can have a line from each
run of the job that ended it (a failed item that a later run completed, a changed item run
again); the newest is the last of its index.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from raygents.errors import CheckpointCorrupt, UserError
from raygents.records import ledger
from raygents.stores.base import Store

__all__ = ["Shards", "is_marked", "mark", "open_ledger", "open_output"]

_SHARD_BYTES = 1 << 30  # the most of a shard read back
_LINE_BYTES = 64 << 20  # the longest line read back (a longer one is left out)
MAX_INDEX = 1 << 27
"""The largest item index read back from shards when the job's inputs have no length (a
bitmap of every index below it takes 16 MiB); above it, or above the inputs' length, a line
is left out (its item runs, and finds its run completed)."""
log = logging.getLogger("raygents")
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # (a FIFO planted as a shard never blocks its open)

LEDGER = ledger.LEDGER
"""The folder of the checkpoint store that holds batch jobs' ledgers: ``jobs/<job_id>/``."""


class Shards:
    """The shards of one job in one place: what this run of the job writes, and what every
    run of it wrote. Thread-safe."""

    def __init__(
        self,
        job_id: str,
        *,
        directory: Path | None = None,
        store: Store | None = None,
        prefix: str = "",
        shard_items: int = 10_000,
        sealed: bool = False,
        key: bytes | None = None,
    ) -> None:
        if type(shard_items) is not int or shard_items < 1:
            raise UserError(f"shard_items must be an int of at least 1, got {shard_items!r}")
        self.job_id = job_id
        self.url = ""
        """Where the shards are, as the caller named it."""
        self.shard_items = shard_items
        self.writer = f"{time.time_ns() // 1000:016x}-{os.getpid()}"
        self._dir = directory
        self._store = store
        self._prefix = prefix
        self._sealed = sealed
        """A ledger: its lines carry a seal (with ``key``), checked as they are read back."""
        self._key = key
        self._lock = threading.Lock()
        self._part = 0
        self._lines = 0
        self._file: IO[str] | None = None
        self._buffer: list[str] = []
        self.written: list[str] = []
        """The names of the shards this run of the job wrote (a store's once put), in order."""

    # --- writing ------------------------------------------------------------------------
    def write(self, line: dict[str, Any]) -> None:
        """Add one item's line to the current shard (a new shard when it is full).

        Raises:
            OSError: the directory's file could not be written (its shard is then left
                behind, and the next line goes to a new one). In a store, a put that
                fails keeps its lines for the next :meth:`flush`.
        """
        if self._sealed and self._key is not None:
            line = ledger.seal(line, self._key, self.job_id)
        text = json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self._lock:
            if self._dir is None:
                self._buffer.append(text)
                self._lines += 1
                if self._lines >= self.shard_items:
                    self._close_shard()
                return
            if self._lines >= self.shard_items:
                self._close_shard()
            if self._file is None:
                name = self._name(self._part)
                self._file = _open_new(self._dir / name)
                self.written.append(name)
            try:
                self._file.write(text)
                self._file.flush()
            except BaseException:
                self._abandon()
                raise
            self._lines += 1

    def flush(self) -> None:
        """Make what was written readable and durable: in a directory, sync the current
        shard to disk; in a store, put the lines not put yet as a shard.

        Raises:
            OSError: the directory's file could not be synced.
            CheckpointError: the store's put failed (the lines stay, for the next flush).
        """
        with self._lock:
            if self._file is not None:
                try:
                    self._file.flush()
                    os.fsync(self._file.fileno())
                except BaseException:
                    self._abandon()
                    raise
            elif self._store is not None and self._lines:
                self._close_shard()

    def close(self) -> None:
        """Finish the current shard (synced to disk, or put)."""
        with self._lock:
            if self._lines or self._file is not None:
                self._close_shard()

    def _name(self, part: int) -> str:
        return f"{self.job_id}.{self.writer}.{part:05d}.jsonl"

    def _close_shard(self) -> None:
        name = self._name(self._part)
        if self._file is not None:
            file, self._file = self._file, None
            self._part += 1  # (the next line goes to a new shard even if this one failed)
            self._lines = 0
            try:
                file.flush()
                os.fsync(file.fileno())
            finally:
                file.close()
            return
        if self._store is not None:
            self._store.put(self._prefix + name, "".join(self._buffer).encode())
            self._buffer = []
            self.written.append(name)
        self._part += 1
        self._lines = 0

    def _abandon(self) -> None:
        """Leave a directory's shard that failed: a line may be cut short in it, and later
        lines go to the next one."""
        assert self._file is not None
        file, self._file = self._file, None
        with contextlib.suppress(OSError):  # (its buffered bytes are the failed write's own)
            file.close()
        self._part += 1
        self._lines = 0

    # --- reading ------------------------------------------------------------------------
    def shards(self) -> list[str]:
        """The names of the job's shards that exist now, oldest run of the job first."""
        if self._dir is not None:
            names = [p.name for p in self._dir.iterdir()]
        else:
            assert self._store is not None
            names = [k[len(self._prefix) :] for k in self._store.list(self._prefix)]
        found = [
            (m[2], m[3], m[4], n)
            for n in names
            if (m := ledger.SHARD.fullmatch(n)) and m[1] == self.job_id
        ]
        return [n for *_, n in sorted(found)]

    def lines(self, name: str, skip: int = 0) -> Iterator[dict[str, Any]]:
        """The items of one shard after its first ``skip``, in the order they were written
        (a last line cut short by a crash is left out)."""
        if self._dir is not None:
            try:
                fd = os.open(self._dir / name, os.O_RDONLY | os.O_NOFOLLOW | _NONBLOCK)
            except OSError as exc:  # (a link, or gone)
                log.warning("batch %r: shard %s left out: %s", self.job_id, name, exc)
                return
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                log.warning("batch %r: shard %s is not a file: left out", self.job_id, name)
                return
            with os.fdopen(fd, "rb") as f:
                yield from _parsed(_bounded_lines(f), skip)
            return
        assert self._store is not None
        try:
            data = self._store.get(self._prefix + name, max_bytes=_SHARD_BYTES)
        except CheckpointCorrupt as exc:  # (too large)
            log.warning("batch %r: shard %s left out: %s", self.job_id, name, exc)
            return
        if data is not None:
            yield from _parsed(_bounded_lines(io.BytesIO(data)), skip)

    def completed(self, limit: int = MAX_INDEX) -> Iterator[dict[str, Any]]:
        """The lines of completed items that every run of the job wrote, oldest first (those
        of an index below ``limit``, the job's item count). In a ledger read with a key, a
        line whose seal is missing or does not hold is left out (logged): its item runs
        again, and finds its run's signed completion marker if it completed."""
        for name in self.shards():
            refused = 0
            for line in self.lines(name):
                if self._sealed:
                    checked = ledger.unsealed(line, self._key, self.job_id)
                    if checked is None:
                        refused += 1
                        continue
                    line = checked
                index = line.get("index")
                if line.get("status") == "completed" and type(index) is int and 0 <= index < limit:
                    yield line
            if refused:
                log.warning(
                    "batch %r: %d line(s) of ledger shard %s are not sealed with the checkpoint "
                    "key: left out (their items run again)",
                    self.job_id,
                    refused,
                    name,
                )


def mark(bits: bytearray, index: int) -> None:
    """Set bit ``index`` of ``bits`` (one bit per item: a million items take 125 KB)."""
    byte = index >> 3
    if byte >= len(bits):
        bits.extend(bytes(byte + 1 - len(bits)))
    bits[byte] |= 1 << (index & 7)


def is_marked(bits: bytearray, index: int) -> bool:
    """Whether bit ``index`` of ``bits`` is set."""
    byte = index >> 3
    return byte < len(bits) and bool(bits[byte] & (1 << (index & 7)))


def _open_new(path: Path) -> IO[str]:
    """A shard's file opened to append, never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    return os.fdopen(fd, "a", encoding="utf-8")


def _bounded_lines(f: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``f``, up to :data:`_SHARD_BYTES` in all; a line longer than
    :data:`_LINE_BYTES` is read past and comes out as an empty line (left out)."""
    left = _SHARD_BYTES
    while left > 0:
        text = f.readline(min(_LINE_BYTES + 1, left))
        if not text:
            return
        left -= len(text)
        if text.endswith(b"\n"):
            yield text
            continue
        if len(text) <= _LINE_BYTES and left > 0:
            yield text  # (the last line, cut short)
            return
        while left > 0 and not text.endswith(b"\n"):  # (too long: skipped, never held)
            text = f.readline(min(1 << 20, left))
            if not text:
                return
            left -= len(text)
        yield b"\n"


def _parsed(lines: Iterator[bytes], skip: int) -> Iterator[dict[str, Any]]:
    for n, text in enumerate(lines):
        if not text.endswith(b"\n"):
            return  # (cut short: the next run of the job writes its item again)
        if n < skip:
            continue
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        yield value if isinstance(value, dict) else {}


def open_output(url: str | os.PathLike[str], job_id: str, shard_items: int = 10_000) -> Shards:
    """The output shards of job ``job_id`` in a directory (or ``file://`` path), created if
    need be, or under ``s3://bucket/prefix``.

    Raises:
        UserError: ``url`` is not a directory or an ``s3://`` prefix, or the directory
            cannot be created (a file is there, or a file above it).
    """
    text = os.fspath(url)
    if type(text) is not str or not text:
        raise UserError(f"output must be a directory or an s3:// prefix, got {url!r}")
    if text.startswith("s3://"):
        from raygents.stores.s3 import S3Store

        bucket, _, prefix = text[len("s3://") :].partition("/")
        shards = Shards(job_id, store=S3Store(bucket, prefix), shard_items=shard_items)
    else:
        directory = Path(text[len("file://") :] if text.startswith("file://") else text)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # (a file, a path under a file, a directory it cannot create)
            raise UserError(
                f"output {text!r} is not a directory raygents can write to: "
                f"{exc.strerror or type(exc).__name__}"
            ) from None
        shards = Shards(job_id, directory=directory, shard_items=shard_items)
    shards.url = text
    return shards


def open_ledger(store: Store, job_id: str, key: bytes | None = None) -> Shards:
    """The ledger of job ``job_id``'s completed items in the checkpoint store ``store``,
    under ``jobs/<job_id>/``: with ``key`` (the checkpoint key), each line is sealed as it is
    written and checked as it is read back (:mod:`raygents.records.ledger`)."""
    return Shards(job_id, store=store, prefix=ledger.prefix(job_id), sealed=True, key=key)
