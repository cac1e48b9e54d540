"""The runs of a batch job's items: started, resumed, or followed, as what the store and the
coordinator know of each says."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raygents.agents.agent import Agent
from raygents.core.contextdata import NotDurable
from raygents.errors import RaygentsError, UserError

if TYPE_CHECKING:
    from raygents.runtime.driver.handle import RunHandle

__all__ = ["GroupedStarts", "JobRuns", "Launched"]

Launched = tuple["RunHandle", bool]
"""An item's run and whether it had completed before."""


class JobRuns:
    """How each item of job ``job_id`` gets its run (blocking calls: one round trip to the
    coordinator, or a few)."""

    def __init__(self, agent: Agent, job_id: str, context: Any, options: Mapping[str, Any]) -> None:
        self._agent = agent
        self.job_id = job_id
        self._context = context
        self._options = dict(options)
        self._statuses: dict[str, str] = {}

    def read(self) -> None:
        """Ask the coordinator once which of the job's runs it knows, and their statuses."""
        self._statuses = self.known()

    def known(self) -> dict[str, str]:
        """The statuses the coordinator knows of this job's runs (those it forgot completed:
        starting them again finds their completion marker)."""
        from raygents.runtime.driver.attach import runs

        prefix = f"{self.job_id}."
        return {
            info.run_id: info.status
            for info in runs()
            if info.run_id.startswith(prefix) and info.run_id[len(prefix) :].isdigit()
        }

    def status(self, run_id: str) -> str | None:
        """What the coordinator knew of the item's run when the job started (once per item:
        its launch goes by it)."""
        return self._statuses.pop(run_id, None)

    def launch(self, run_id: str, raw: Any) -> Launched:
        """The run of an item the coordinator knew as suspended, awaiting approval, running or
        completed: resumed, or attached to (those not run or failed go to
        :meth:`start_each`). Returns the handle and whether the run had completed before."""
        from raygents.runtime.driver.attach import attach

        run_input, context = self._split(raw)
        return self._go_on(attach(run_id), run_id, run_input, context)

    def start_each(self, items: list[tuple[str, Any]]) -> list[Launched | BaseException]:
        """Start the runs of items the coordinator knew as not run or failed, their ids claimed
        in one call; per item, what :meth:`launch` returns or the error it raises. An id
        claimed since (another driver's run of the job) is followed or resumed instead."""
        from raygents.runtime.driver.runs import start_each

        split: list[tuple[str, Any, Any]] = []
        refused: dict[str, BaseException] = {}
        for run_id, raw in items:
            try:
                split.append((run_id, *self._split(raw)))
            except UserError as exc:
                refused[run_id] = exc
        started = iter(start_each(self._agent, split, **self._options))
        answers: list[Launched | BaseException] = []
        for run_id, raw in items:
            if run_id in refused:
                answers.append(refused[run_id])
                continue
            handle = next(started)
            if not isinstance(handle, UserError):
                answers.append(handle if isinstance(handle, BaseException) else (handle, False))
                continue
            try:
                answers.append(self._taken(run_id, raw, handle))
            except BaseException as exc:
                answers.append(exc)
        return answers

    def _taken(self, run_id: str, raw: Any, refused: UserError) -> Launched:
        """The run of an item whose start was refused: the run the store knows of its id,
        or (no such run: the input was refused, not the id) the refusal."""
        from raygents.runtime.driver.attach import attach

        try:
            found = attach(run_id)
        except RaygentsError:
            raise refused from None
        return self._go_on(found, run_id, *self._split(raw))

    def _go_on(self, found: RunHandle, run_id: str, run_input: Any, context: Any) -> Launched:
        """Continue a run the store knows: resume it if suspended, start it again if it
        failed, else follow it (its result, its wait for approval, its end elsewhere)."""
        from raygents.runtime.driver.runs import resume

        status = found.status()
        if status == "suspended":
            timeout_s = self._options["timeout_s"]
            # (a durable context is in the run's checkpoint, with what the run wrote to it)
            again = context if isinstance(context, NotDurable) else None
            handle = resume(run_id, agent=self._agent, context=again, timeout_s=timeout_s)
            return handle, False
        if status == "failed":
            return self._start(run_id, run_input, context), False
        return found, status == "completed"

    def _start(self, run_id: str, run_input: Any, context: Any) -> RunHandle:
        from raygents.runtime.driver.runs import start

        return start(self._agent, run_input, context=context, run_id=run_id, **self._options)

    def input_of(self, raw: Any) -> Any:
        """An item's run input (what its fingerprint covers): the item itself where it is
        not a usable item dict (its start then refuses it)."""
        try:
            return self._split(raw)[0]
        except UserError:
            return raw

    def _split(self, raw: Any) -> tuple[Any, Any]:
        """An item's run input and context."""
        if isinstance(raw, Mapping) and "input" in raw:
            unknown = set(raw) - {"input", "context"}
            if unknown:
                raise UserError(
                    f"a batch item dict takes 'input' and 'context', not {sorted(unknown)!r}"
                )
            return raw["input"], raw.get("context", self._context)
        return raw, self._context


class GroupedStarts:
    """:meth:`JobRuns.start_each` for items that come one at a time: those that arrive while
    one group's start is under way go together in the next, so a job's items take one claim
    call per group, not one per item. On the job's event loop."""

    def __init__(
        self,
        runs: JobRuns,
        loop: asyncio.AbstractEventLoop,
        pool: concurrent.futures.Executor,
    ) -> None:
        self._runs = runs
        self._loop = loop
        self._pool = pool
        self._waiting: list[tuple[str, Any, asyncio.Future[Launched]]] = []
        self._sending: asyncio.Task[None] | None = None

    async def start(self, run_id: str, raw: Any) -> Launched:
        """The run of an item the coordinator knew as not run or failed."""
        future: asyncio.Future[Launched] = self._loop.create_future()
        self._waiting.append((run_id, raw, future))
        if self._sending is None:  # (it starts on the loop's next turn: items of this one join)
            self._sending = self._loop.create_task(self._send())
        return await future

    async def _send(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                items = [(run_id, raw) for run_id, raw, _ in group]
                try:
                    answers = await self._loop.run_in_executor(
                        self._pool, self._runs.start_each, items
                    )
                except Exception as exc:
                    answers = [exc] * len(group)
                for (_, _, future), answer in zip(group, answers, strict=True):
                    if isinstance(answer, BaseException):
                        future.set_exception(answer)
                    else:
                        future.set_result(answer)
        finally:
            self._sending = None
