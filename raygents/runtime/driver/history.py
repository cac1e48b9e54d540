"""A run's history from any driver, or from a store with no cluster: ``history`` (its durable
checkpoints) and the reading of one of them that ``fork`` and ``replay`` start from."""

from __future__ import annotations

from raygents.errors import UserError
from raygents.ids import validate_id
from raygents.records import checkpoint, rebuild
from raygents.records.history import Checkpoint, History, load
from raygents.runtime.driver.client import current
from raygents.runtime.driver.startup import checkpoint_key
from raygents.stores.open import open_store

__all__ = ["history", "read_history"]


def history(run_id: str, *, store: str | None = None) -> list[Checkpoint]:
    """Every durable checkpoint of a run, oldest first.

    Works on a running, suspended, awaiting-approval, failed, cancelled or completed run,
    through the coordinator of ``init``, or with ``store`` (a ``file://`` or ``s3://`` URL)
    from the store alone, with no cluster. It reads the records recovery reads, with their
    integrity checks. Each checkpoint's ``seq`` is what ``fork(run_id, at=seq)`` starts from.

    What is kept: a run's records stay while it has not completed (until retention or
    ``raygents gc`` removes an ended run's). A completed run's records are deleted at its
    end; what stays is its completion marker, with its final messages (the newest that fit
    in one record when they are many): its history is then one ``"final"`` checkpoint.
    Records an ``init(durability="async")`` run has not stored yet are not listed.

    Raises:
        UserError: ``run_id`` is not a valid run id, or ``store`` names no store.
        RunNotFound: nothing of the run is kept.
        CheckpointError: its records cannot be read, or do not replay.
    """
    return read_history(run_id, store=store).checkpoints()


def read_history(run_id: str, *, store: str | None = None) -> History:
    """A run's decoded records and completion marker (see :func:`history`).

    Raises:
        UserError: ``run_id`` is not a valid run id, or ``store`` names no store.
        RunNotFound: nothing of the run is kept.
        CheckpointCorrupt: a record or its marker is damaged.
    """
    validate_id(run_id, "run id")
    if store is not None:
        return _from_store(run_id, store)
    rt = current()
    rt.send_notes()
    blobs, marker = rt.ask(rt.directory.client.history(run_id))
    return load(run_id, blobs, marker, key=rt.directory.cached_settings().key)


def _from_store(run_id: str, url: str) -> History:
    if not isinstance(url, str):
        raise UserError(f"store must be a store URL (file://, s3://), not {url!r}")
    opened = open_store(url)
    listed = rebuild.listing(run_id, opened.list(checkpoint.run_prefix(run_id)))
    found = (opened.get(key) for key in listed.chain)
    blobs = [data for data in found if data is not None]
    marker = opened.get(listed.done) if listed.done is not None else None
    return load(run_id, blobs, marker, key=checkpoint_key(opened.url))
