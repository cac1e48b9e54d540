"""Runs driven by the coordinator (detached mode): they outlive the driver that started them,
and their ends are recorded in the run table, so ``attach`` from any driver gets them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import ray

from raygents.core.envelope import Envelope, Outcome
from raygents.records.runinfo import RunInfo, RunSummary, outcome_entry
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.drive import SuspendToken, drive

__all__ = ["DetachedRuns"]


class DetachedRuns:
    """Drives top-level runs in the coordinator's process.

    Args:
        namespace: the coordinator's namespace.
        finish: records a run's end and its result (the coordinator's ``finish``).
    """

    def __init__(
        self, namespace: str, finish: Callable[[RunInfo, RunSummary | None], Awaitable[None]]
    ) -> None:
        self.namespace = namespace
        self._finish = finish
        self._directory: Directory | None = None
        self._tokens: dict[str, SuspendToken] = {}

    async def drive(self, envelope: Envelope) -> AsyncIterator[Any]:
        """Drive a run: yields event batches, then the outcome (after its end is recorded)."""
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
        driving = drive(
            envelope,
            directory,
            token,
            events.put_nowait,
            client=directory.client,
            mailboxes=directory.mailboxes,
        )
        task = asyncio.ensure_future(driving)
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
            await self._record(outcome)
            yield outcome
        finally:
            self._tokens.pop(run_id, None)

    def suspend(self, requests: list[tuple[str, str]]) -> None:
        """Ask runs driven here, ``(run_id, cause)``, to suspend (others are not here)."""
        for run_id, cause in requests:
            token = self._tokens.get(run_id)
            if token is not None:
                token.request(cause)

    async def _record(self, outcome: Outcome) -> None:
        await self._finish(*outcome_entry(outcome))
