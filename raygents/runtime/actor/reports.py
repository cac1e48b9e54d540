"""Reports: what an agent actor tells the coordinator about records it stored itself, batched.

The records a run's actor puts in the store itself, and the ends of the agent-as-tool
children it ran, reach the coordinator's run table in one ``noted`` call per window.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import ray

from raygents.core.envelope import RunState
from raygents.records.runinfo import Note, RunInfo, ended_info

__all__ = ["Note", "Reports"]

log = logging.getLogger("raygents")

_NOTE_WINDOW_S = 0.25  # how long reports of records written here gather before they go out


class Reports:
    """The reports of one agent actor waiting to go to the coordinator.

    Args:
        noted: sends reports to the coordinator, ``noted(notes, ends)``, and returns the
            call's object ref (``CoordinatorClient.noted``).
    """

    def __init__(self, noted: Callable[[list[Note], list[RunInfo]], Any]) -> None:
        self._noted = noted
        self._notes: list[Note] = []
        self._ends: list[RunInfo] = []
        """Ends of agent-as-tool children run from here."""
        self._timer: asyncio.TimerHandle | None = None
        self._sent: set[asyncio.Future[None]] = set()

    def stored(self, note: Note) -> None:
        """A record was stored: report it within the window."""
        self._notes.append(note)
        self._soon()

    def child_ended(self, state: RunState) -> None:
        """An agent-as-tool child run completed: report its end with the next reports (its
        parent's journal record of the result is usually one of them)."""
        self._ends.append(ended_info(state, "completed"))
        self._soon()

    def drop(self, run_id: str) -> None:
        """A run completed: its records are deleted at its end, so its reports still waiting
        here are moot."""
        self._notes = [note for note in self._notes if note[0] != run_id]

    @property
    def ends_waiting(self) -> bool:
        """Whether the ends of children wait to be reported."""
        return bool(self._ends)

    def send(self) -> None:
        """Report the records and the children's ends waiting here now, in one call."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._notes and not self._ends:
            return
        notes, self._notes = self._notes, []
        ends, self._ends = self._ends, []
        ack = self._noted(notes, ends)
        sent = asyncio.ensure_future(_acknowledged(ack))
        self._sent.add(sent)
        sent.add_done_callback(self._sent.discard)

    async def settled(self) -> None:
        """Report what waits now and wait until the coordinator has every report."""
        self.send()
        if self._sent:
            await asyncio.wait(list(self._sent))

    def _soon(self) -> None:
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(_NOTE_WINDOW_S, self.send)


async def _acknowledged(ref: Any) -> None:
    try:
        await ref
    except ray.exceptions.RayError as exc:  # the records are stored; the table catches up
        log.warning("the coordinator missed reports of stored checkpoints: %s", exc)
