"""A batch job's items and results: plain data, and the run id of each item."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from raygents.core.messages import Usage
from raygents.errors import RaygentsError, UserError
from raygents.ids import validate_id

__all__ = [
    "MAX_JOB_ID_LENGTH",
    "BatchItem",
    "BatchResult",
    "BatchStatus",
    "batch_run_id",
    "check_job_id",
    "error_message",
    "item_from_json",
    "length_of",
]

BatchStatus = Literal["completed", "failed", "suspended", "interrupted"]
"""How an item ended: ``interrupted`` is a run awaiting approval of tool calls, or in doubt."""

MAX_JOB_ID_LENGTH = 90
"""The longest job id: its shards' names are store key segments of at most 128 characters."""


@dataclass(frozen=True)
class BatchItem:
    """One input of a batch job, as it ended.

    Attributes:
        index: the input's position in the job's inputs, from 0.
        run_id: the run that ran it (:func:`batch_run_id`).
        status: ``completed``, ``failed``, ``suspended`` or ``interrupted``.
        output: the run's final text when completed (JSON text for a typed agent).
        error: what went wrong (a message, never a traceback) when not completed.
        usage: tokens the run used, when it completed.
        skipped: an earlier run of the job completed it; it did not run again.
    """

    index: int
    run_id: str
    status: BatchStatus
    output: str | None = None
    error: str | None = None
    usage: Usage | None = None
    skipped: bool = False

    def to_json(self) -> dict[str, Any]:
        """The item as a JSON object (a line of the job's output)."""
        usage = None if self.usage is None else self.usage.model_dump(mode="json")
        return {
            "index": self.index,
            "run_id": self.run_id,
            "status": self.status,
            "output": self.output,
            "error": self.error,
            "usage": usage,
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class BatchResult:
    """A batch job once every item it started has ended.

    Attributes:
        job_id: the job.
        items: the items in input order; empty when the job wrote them to ``output``.
        completed: items completed (``skipped`` ones included).
        skipped: items an earlier run of the job had completed.
        failed: items failed.
        suspended: items suspended (a re-run of the job resumes them).
        interrupted: items awaiting approval of tool calls, or in doubt (``raygents.resume``
            them).
        usage: tokens of the completed items.
        output: where the items were written, or None.
        stopped: why the job stopped before its last input (``max_failures`` reached, or
            :meth:`BatchHandle.suspend`), or None when it went through every input.
    """

    job_id: str
    items: tuple[BatchItem, ...]
    completed: int
    skipped: int
    failed: int
    suspended: int
    interrupted: int
    usage: Usage
    output: str | None = None
    stopped: str | None = None

    @property
    def total(self) -> int:
        """Items that ended."""
        return self.completed + self.failed + self.suspended + self.interrupted


def batch_run_id(job_id: str, index: int) -> str:
    """The run id of item ``index`` of job ``job_id``: ``<job_id>.<index>``."""
    return f"{job_id}.{index}"


def check_job_id(job_id: Any) -> str:
    """Check that ``job_id`` is a usable job id and return it.

    Raises:
        UserError: it is not an id (:func:`raygents.ids.validate_id`), or is longer than
            :data:`MAX_JOB_ID_LENGTH`.
    """
    validate_id(job_id, "job id")
    if len(job_id) > MAX_JOB_ID_LENGTH:
        raise UserError(
            f"job id {job_id[:40]!r}... is too long ({len(job_id)} characters): use at most "
            f"{MAX_JOB_ID_LENGTH}, so that its run ids and shard names fit in a store key"
        )
    return str(job_id)


def item_from_json(line: Mapping[str, Any]) -> BatchItem:
    """An item from its JSON line (:meth:`BatchItem.to_json`)."""
    usage = line.get("usage")
    return BatchItem(
        index=line["index"],
        run_id=line["run_id"],
        status=line["status"],
        output=line.get("output"),
        error=line.get("error"),
        usage=None if usage is None else Usage.model_validate(usage),
        skipped=bool(line.get("skipped")),
    )


def error_message(exc: BaseException) -> str:
    """An error as an item carries it: its message, never a traceback."""
    if isinstance(exc, RaygentsError):
        return exc.message or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


def length_of(inputs: Iterable[Any]) -> int | None:
    """How many inputs a job has, where the iterable knows (None: a generator, say)."""
    try:
        return len(inputs)  # type: ignore[arg-type]
    except TypeError:
        return None
