"""Runs driven by the coordinator (detached mode): they outlive the driver that started them,
and their ends are recorded in the run table, so ``attach`` from any driver gets them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import ray

from raygents.core.envelope import Envelope, Outcome, SuspendRequest
from raygents.core.events import RunEvent
from raygents.records.runinfo import RunInfo, RunSummary, outcome_entry
from raygents.runtime.coordinator.relay import EventRelay
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.drive import SuspendToken, drive
from raygents.runtime.link.ending import terminal_event
from raygents.runtime.link.untied import untied

__all__ = ["DetachedRuns"]


class DetachedRuns:
    """Drives top-level runs in the coordinator's process, numbering their events (the
    driver that started a run keeps the numbers) and keeping them in the relay's feed.

    Args:
        namespace: the coordinator's namespace.
        finish: records a run's end and its result (the coordinator's ``finish``).
        relay: where the runs' events go for followers.
        numbered_after: the seq a run's events are numbered after (its previous drive's
            last, from the run table; 0 for a new run).
        entry: the run table's entry of a run (the coordinator's ``table.get``).
    """

    def __init__(
        self,
        namespace: str,
        finish: Callable[[RunInfo, RunSummary | None], Awaitable[None]],
        relay: EventRelay,
        numbered_after: Callable[[str], int],
        entry: Callable[[str], RunInfo | None],
    ) -> None:
        self.namespace = namespace
        self._finish = finish
        self._relay = relay
        self._numbered_after = numbered_after
        self._entry = entry
        self._directory: Directory | None = None
        self._tokens: dict[str, SuspendToken] = {}

    async def drive(self, envelope: Envelope) -> AsyncIterator[Any]:
        """Drive a run: yields event batches, then ``(outcome, entry)``: the outcome and the
        run table's entry once its end is recorded (so that its driver answers with the
        table's entry without asking for it)."""
        run_id = envelope.state.run_id
        if self._directory is None:
            self._directory = Directory(
                self.namespace,
                ray.get_runtime_context().current_actor,
                owner=f"coordinator:{self.namespace}",
            )
        token = self._tokens[run_id] = SuspendToken(run_id)
        events: asyncio.Queue[Any] = asyncio.Queue()
        directory = self._directory
        seq = self._numbered_after(run_id)
        relay = self._relay
        relay.open(run_id)

        def emit(event: RunEvent) -> None:
            nonlocal seq
            seq += 1
            event = event.model_copy(update={"seq": seq})
            relay.append(run_id, (event,))
            events.put_nowait(event)

        driving = drive(
            envelope,
            directory,
            token,
            emit,
            client=directory.client,
            mailboxes=directory.mailboxes,
        )
        # (the run is not the caller's: cancelling the caller's Ray task leaves it going)
        task = untied().run(asyncio.ensure_future, driving)
        task.add_done_callback(lambda _: events.put_nowait(None))
        try:
            while (item := await events.get()) is not None:
                batch = [item]
                while not events.empty():
                    nxt = events.get_nowait()
                    if nxt is None:
                        events.put_nowait(None)
                        break
                    batch.append(nxt)
                yield batch
            outcome = task.result()
            end = terminal_event(outcome).model_copy(update={"seq": seq + 1})
            await self._record(outcome, end)
            relay.append(run_id, (end,))
            yield outcome, self._entry(run_id)
        finally:
            self._tokens.pop(run_id, None)

    def suspend(self, requests: Sequence[SuspendRequest]) -> None:
        """Ask runs driven here, ``(run_id, cause[, epoch])``, to suspend (others are not
        here)."""
        for run_id, cause, *_ in requests:
            token = self._tokens.get(run_id)
            if token is not None:
                token.request(cause)

    async def _record(self, outcome: Outcome, end: RunEvent) -> None:
        info, summary = outcome_entry(outcome)
        await self._finish(dataclasses.replace(info, events=end.seq or 0), summary)
