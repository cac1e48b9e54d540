"""Batch jobs' ledgers in the checkpoint store: where a job's shards are, when each was
written (retention ages them), and the HMAC seal each line carries where the store has a key.

A ledger is JSON Lines shards under ``jobs/<job_id>/``, named
``<job_id>.<writer>.<part:05d>.jsonl``; ``writer`` is ``<start time in µs, 16 hex digits>-<pid>``
of the run of the job that wrote it. With a checkpoint key, each line carries ``seal``:
HMAC-SHA256, with the key that signs the checkpoints, over the job id and the line's other
fields as canonical JSON. A sealed line cannot be moved to another job, nor changed, nor made
up by whoever can write the store but does not hold the key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["LEDGER", "SEAL", "SHARD", "prefix", "seal", "unsealed", "written_at"]

LEDGER = "jobs"
"""The folder of the checkpoint store that holds batch jobs' ledgers: ``jobs/<job_id>/``."""
SHARD = re.compile(r"(.+)\.([0-9a-f]{16})-(\d+)\.(\d{5})\.jsonl")
"""A shard's name: the job id, the writer's start time (µs, hex) and pid, and the part."""
SEAL = "seal"
"""The field of a line that holds its seal."""
_LABEL = b"raygents ledger line\x00"


def prefix(job_id: str) -> str:
    """The store prefix of job ``job_id``'s ledger."""
    return f"{LEDGER}/{job_id}/"


def written_at(name: str) -> float | None:
    """When the run of the job that wrote shard ``name`` started (a ``time.time()``), or None
    for a name that is not a shard's."""
    found = SHARD.fullmatch(name)
    return None if found is None else int(found[2], 16) / 1e6


def seal(line: Mapping[str, Any], key: bytes, job_id: str) -> dict[str, Any]:
    """``line`` with its seal (any seal it had is replaced)."""
    fields = {k: v for k, v in line.items() if k != SEAL}
    return {**fields, SEAL: _tag(fields, key, job_id)}


def unsealed(line: Mapping[str, Any], key: bytes | None, job_id: str) -> dict[str, Any] | None:
    """``line`` without its seal: with ``key``, only if the seal is there and holds (None
    otherwise: the line is refused); without a key, whatever it holds (nothing can be
    checked)."""
    fields = {k: v for k, v in line.items() if k != SEAL}
    if key is None:
        return fields
    found = line.get(SEAL)
    if not isinstance(found, str):
        return None
    try:
        expected = _tag(fields, key, job_id)
    except ValueError:  # (a value JSON cannot hold: never sealed)
        return None
    return fields if hmac.compare_digest(found, expected) else None


def _tag(fields: Mapping[str, Any], key: bytes, job_id: str) -> str:
    text = json.dumps(
        fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
    digest = hmac.new(key, _LABEL + job_id.encode() + b"\x00", hashlib.sha256)
    digest.update(text.encode())
    return digest.hexdigest()
