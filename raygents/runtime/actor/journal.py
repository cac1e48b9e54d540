"""Journal: the group-committed records of one tool batch's finished calls."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from raygents.agents.tools import ToolResult
from raygents.core.contextdata import capture
from raygents.core.envelope import RunState
from raygents.core.events import RunEvent
from raygents.errors import UserError
from raygents.runtime.actor.writer import RecordWriter

__all__ = ["Journal"]

log = logging.getLogger("raygents")

# A finished call that took this long is journaled at once (running it again would cost more
# than a record); a quicker one waits up to _JOURNAL_WAIT_S for company, or for the batch's end.
_JOURNAL_AT_ONCE_S = 0.01
_JOURNAL_WAIT_S = 0.05


class Journal:
    """The journal records of one batch, group-committed.

    A finished call's result goes into a record at once if the call took
    ``_JOURNAL_AT_ONCE_S`` or more (running it again would cost more than the record), else
    within ``_JOURNAL_WAIT_S``, with the calls that finish meanwhile; while a record is in
    flight, finished calls go in the next one. The batch's last call is left to the batch's
    own record, which the run writes while its next model call runs.
    """

    def __init__(
        self,
        writer: RecordWriter,
        state: RunState,
        emit: Callable[[RunEvent], None],
        calls: int,
        live: Callable[[], Any] | None = None,
    ) -> None:
        self.writer = writer
        self.state = state
        """The run's state as the newest journal record left it."""
        self.emit = emit
        self.entries = dict(state.journal)
        self.writes = dict(state.context_writes)
        self.live = live
        """The run's context object in the actor, whose writes (hooks, callbacks,
        ``remote=False`` tools) a journal record keeps too."""
        self.written = set(state.journal)
        self.failed = False
        self.left = calls  # steps of the batch still running
        self._flight: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def finished(
        self,
        took_s: float,
        call_id: str | None = None,
        result: ToolResult | None = None,
        writes: list[Any] | None = None,
    ) -> None:
        """A step of the batch finished (``call_id``, ``result``: a call to journal, with its
        ``writes`` to the run context)."""
        self.left -= 1
        if call_id is None or result is None or call_id in self.entries:
            return
        self.entries[call_id] = result
        if writes:
            self.writes[call_id] = writes
        if self._flight is not None or self.left <= 0:
            return  # the record in flight loops for it, or the batch's own record has it
        if took_s >= _JOURNAL_AT_ONCE_S:
            self._write_now()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(_JOURNAL_WAIT_S, self._due)

    def _due(self) -> None:
        self._timer = None
        if self._flight is None and self.left > 0:
            self._write_now()

    def _write_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._flight = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        try:
            while not self.failed and self.left > 0 and self.written != self.entries.keys():
                ids = set(self.entries)
                state = self._context(
                    self.state.evolve(journal=dict(self.entries), context_writes=dict(self.writes))
                )
                self.state, write = self.writer.write(state, "running", checked=False)
                if write is not None:
                    try:
                        await write
                    except Exception as exc:  # the batch's own record covers it
                        log.warning(
                            "run %s: a journal checkpoint failed: %s", self.state.run_id, exc
                        )
                        self.failed = True
                        self.state = self.state.evolve(recorded=0)  # next record: a full one
                        return
                    await self.writer.checkpointed(self.state, "running", self.emit)
                self.written = ids
        finally:
            self._flight = None

    def _context(self, state: RunState) -> RunState:
        """``state`` with the context as the actor holds it now (a record of a call that ran
        in the actor keeps what it wrote: the call is not run again)."""
        if self.live is None or state.context is None:
            return state
        try:
            stored = capture(state.context, self.live())
        except UserError:  # (the batch's end refuses it, failing the run)
            return state
        return state if stored is state.context else state.evolve(context=stored)

    async def settle(self) -> bool:
        """Wait for the records in flight; True if every result is in a written record."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._flight is not None:
            await self._flight
        return not self.failed and self.written == self.entries.keys()
