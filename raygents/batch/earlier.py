"""EarlierRuns: what earlier runs of a batch job settled, as its ledger and output hold it.

Running a job again reads its ledger of completed items (:func:`~raygents.batch.output.open_ledger`,
sealed as :mod:`raygents.records.ledger` says) and, with an output, the indexes the output
holds. From them each item gets its run id: none where an earlier run completed it with the
same input and agent graph (it ends at once, its kept line answering), the id of its run
otherwise, or a new one where its input or graph changed (``on_change="rerun"``). What the
completed items spent counts in the job's budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from raygents.batch.fingerprint import Fingerprints, changed_run_id, combined
from raygents.batch.items import BatchItem, batch_run_id, item_from_json
from raygents.batch.output import MAX_INDEX, Shards, is_marked, mark, open_ledger
from raygents.core.jobbudget import JobBudget
from raygents.core.messages import Usage
from raygents.errors import UserError
from raygents.stores.base import Store

__all__ = ["EarlierRuns", "OnChange"]

OnChange = Literal["error", "rerun"]
"""What a job run again does with an item the ledger holds as completed with another input
or agent graph: refuse (``error``), or run it again (``rerun``)."""


class EarlierRuns:
    """What earlier runs of one job settled: the items they completed (with the fingerprints
    of their inputs and graphs; without an output, their lines), the items the output holds,
    and what they spent (added to ``budget`` as they are read).

    Args:
        job_id: the job.
        on_change: what :meth:`run_id` does with an item completed with another input or
            agent graph.
        budget: the job's budget, which the completed items' usage is added to.
    """

    def __init__(self, job_id: str, *, on_change: OnChange, budget: JobBudget) -> None:
        self.job_id = job_id
        self._on_change = on_change
        self._budget = budget
        self._fps = Fingerprints()  # (of the items the ledger holds as completed)
        self._graphs: set[str] = set()
        self.logged: dict[int, BatchItem] = {}
        """Items completed before, by index, with their lines (a job without an output)."""
        self.logged_bits = bytearray()
        """Items completed before, one bit an index (a job with an output: it has their lines)."""
        self.written = bytearray()
        """Items the output holds as completed, one bit an index."""

    def read(
        self, store: Store, key: bytes | None, output: Shards | None, limit: int | None
    ) -> Shards:
        """Read the output's completed items, then the job's ledger in ``store`` (checked
        with the checkpoint ``key``), and return the ledger (this run of the job adds to it).

        Lines of an index past ``limit`` (the job's item count; :data:`MAX_INDEX` without
        one), and ledger lines of another run id, are left out. An item the ledger holds but
        the output lacks (its line was lost) is written again from its ledger line; one whose
        ledger line has no output runs again (its run's kept result answers), so no item is
        written without its output."""
        ledger = open_ledger(store, self.job_id, key)
        limit = MAX_INDEX if limit is None else limit
        if output is not None:
            for line in output.completed(limit):
                mark(self.written, line["index"])
        for line in ledger.completed(limit):
            self._read_line(line, output is not None)
        return ledger

    def _read_line(self, line: dict[str, Any], with_output: bool) -> None:
        """Take in one ledger line of a completed item."""
        index = line["index"]
        fps = _fingerprints_of(line)
        if line.get("run_id") != batch_run_id(self.job_id, index) and (
            fps is None or line.get("run_id") != changed_run_id(self.job_id, index, *fps)
        ):
            return
        self._budget.add(_usage_of(line))
        if fps is not None:
            self._fps.set(index, combined(*fps))
            self._graphs.add(fps[1])
        if with_output and is_marked(self.written, index):
            mark(self.logged_bits, index)
        elif isinstance(line.get("output"), str):
            try:
                self.logged[index] = replace(item_from_json(line), skipped=True)
            except (TypeError, ValueError):
                return  # (its item runs, and finds its run completed)

    def run_id(self, index: int, fps: tuple[str, str]) -> str | BatchItem:
        """The run id of item ``index``, whose input and graph have the fingerprints
        ``fps``; or the item itself (skipped) when an earlier run of the job completed it
        with the same input and graph: it then ends at once.

        Raises:
            UserError: the ledger holds it as completed with another input or agent graph,
                and ``on_change`` is ``"error"``.
        """
        kept = self._fps.get(index)
        if kept is None or kept == combined(*fps):
            found = self.logged_before(index)  # (its end let its fingerprints go)
            return batch_run_id(self.job_id, index) if found is None else found
        if self._on_change == "error":
            what = "its input" if fps[1] in self._graphs else "the agent graph"
            raise UserError(
                f"batch {self.job_id!r}: item {index} completed before with another input or "
                f"agent graph ({what} changed since), and the job's ledger would answer with "
                "its old output: run the job with on_change='rerun' to run changed items "
                "again, or give it another job_id"
            )
        self.logged.pop(index, None)  # (its old output is not this input's)
        return changed_run_id(self.job_id, index, *fps)

    def logged_before(self, index: int) -> BatchItem | None:
        """Item ``index`` (skipped) if an earlier run of the job completed it, else None;
        it is told once (the view lets it go)."""
        found = self.logged.pop(index, None)
        if found is None and not is_marked(self.logged_bits, index):
            return None
        if found is None:  # (with an output: only its index was kept)
            found = BatchItem(index, batch_run_id(self.job_id, index), "completed", skipped=True)
        return found

    def in_output(self, item: BatchItem) -> bool:
        """Whether the output holds a skipped item's line already (a changed item's old
        output line is not its output)."""
        return (
            item.skipped
            and is_marked(self.written, item.index)
            and item.run_id == batch_run_id(self.job_id, item.index)
        )


def _usage_of(line: Mapping[str, Any]) -> Usage | None:
    """A ledger line's usage, or None (a line without one, or one that does not read)."""
    usage = line.get("usage")
    if not isinstance(usage, Mapping):
        return None
    try:
        return Usage.model_validate(usage)
    except ValueError:
        return None


def _fingerprints_of(line: Mapping[str, Any]) -> tuple[str, str] | None:
    """A ledger line's fingerprints of its input and graph (lines written before they were
    kept have none)."""
    input_fp, graph_fp = line.get("input_fp"), line.get("graph_fp")
    if isinstance(input_fp, str) and isinstance(graph_fp, str):
        return input_fp, graph_fp
    return None
