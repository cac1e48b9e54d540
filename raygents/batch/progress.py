"""A batch job's progress: the counts a handle reports, and how they are shown (a tqdm bar on
a terminal, a log line every few seconds otherwise)."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["BatchProgress", "Display", "open_display"]

log = logging.getLogger("raygents")

LOG_EVERY_S = 5.0
"""How often a job without a terminal logs its progress."""


@dataclass(frozen=True)
class BatchProgress:
    """Where a batch job stands.

    Attributes:
        done: items that ended completed (those an earlier run of the job completed too).
        failed: items that ended failed.
        stopped: items that ended suspended or awaiting approval (a re-run continues them).
        running: items in flight.
        pending: items not started yet, when the inputs have a length; else None.
        input_tokens: model input tokens of the items that ended.
        output_tokens: model output tokens of the items that ended.
        runs_per_s: items ended per second since the job started.
        eta_s: seconds until every item has ended at that rate, when ``pending`` is known.
    """

    done: int
    failed: int
    stopped: int
    running: int
    pending: int | None
    input_tokens: int
    output_tokens: int
    runs_per_s: float
    eta_s: float | None

    @property
    def ended(self) -> int:
        """Items that ended, whatever their status."""
        return self.done + self.failed + self.stopped

    def line(self) -> str:
        """One line for a log."""
        total = "" if self.pending is None else f"/{self.ended + self.running + self.pending}"
        eta = "" if self.eta_s is None else f", eta {self.eta_s:.0f} s"
        return (
            f"{self.ended}{total} ended ({self.done} completed, {self.failed} failed, "
            f"{self.stopped} stopped), {self.running} running, "
            f"{self.input_tokens + self.output_tokens} tokens, {self.runs_per_s:.1f} runs/s{eta}"
        )


class Display:
    """Shows a job's progress: nothing (the base), a bar, or log lines."""

    def show(self, progress: BatchProgress) -> None:
        """Show ``progress`` (called as items end, and at least every second)."""

    def close(self, progress: BatchProgress) -> None:
        """The job ended with ``progress``."""


class _Bar(Display):
    def __init__(self, job_id: str, total: int | None) -> None:
        from tqdm import tqdm

        self._bar: Any = tqdm(total=total, desc=job_id, unit="run", dynamic_ncols=True)

    def show(self, progress: BatchProgress) -> None:
        self._bar.update(progress.ended - self._bar.n)
        self._bar.set_postfix(
            failed=progress.failed,
            running=progress.running,
            tokens=progress.input_tokens + progress.output_tokens,
            refresh=False,
        )

    def close(self, progress: BatchProgress) -> None:
        self.show(progress)
        self._bar.close()


class _Log(Display):
    def __init__(self, job_id: str, every_s: float) -> None:
        self._job_id = job_id
        self._every_s = every_s
        self._next = time.monotonic() + every_s

    def show(self, progress: BatchProgress) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self._every_s
            self._say(progress)

    def close(self, progress: BatchProgress) -> None:
        self._say(progress)

    def _say(self, progress: BatchProgress) -> None:
        """Log the line; where nobody set logging up for it, write it to stderr."""
        if log.isEnabledFor(logging.INFO):
            log.info("batch %s: %s", self._job_id, progress.line())
        else:
            stamp = time.strftime("%H:%M:%S")
            print(f"{stamp} batch {self._job_id}: {progress.line()}", file=sys.stderr, flush=True)


def open_display(
    progress: bool | None, job_id: str, total: int | None, every_s: float = LOG_EVERY_S
) -> Display:
    """How to show a job's progress: ``False`` not at all; otherwise a bar when stderr is a
    terminal and tqdm is installed (``pip install raygents[batch]``), else a line every
    ``every_s`` seconds on the ``raygents`` logger at INFO (on stderr where that logger does
    not log INFO)."""
    if progress is False:
        return Display()
    if sys.stderr.isatty():
        try:
            return _Bar(job_id, total)
        except ImportError:
            pass
    return _Log(job_id, every_s)
