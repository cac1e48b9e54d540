"""RunHandle: the driver's view of a run (its result, status, events and suspend)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from raygents.agents.result import RunResult
from raygents.core.events import RunEvent
from raygents.errors import CANCEL, SUSPEND_FOR_CHECKPOINT, RaygentsError, UserError
from raygents.records.runinfo import RunStatus

if TYPE_CHECKING:
    from raygents.agents.agent import Agent
    from raygents.runtime.link.drive import SuspendToken

log = logging.getLogger("raygents")
T = TypeVar("T")

__all__ = ["EventLog", "RunHandle"]


class EventLog:
    """Every event of a run, kept so that any number of readers see them all, from the start.

    The run appends without ever waiting for readers, so a slow reader never stalls a run.
    """

    def __init__(self) -> None:
        self._events: list[RunEvent] = []
        self._closed = False
        self._cond = threading.Condition()

    def append(self, event: RunEvent) -> None:
        """Add an event (called from the runtime's event loop)."""
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def close(self) -> None:
        """No more events will come."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _wait(self, index: int, timeout: float | None = None) -> RunEvent | None:
        with self._cond:
            while index >= len(self._events):
                if self._closed:
                    return None
                if not self._cond.wait(timeout) and timeout is not None:
                    raise TimeoutError
            return self._events[index]

    def __iter__(self) -> Iterator[RunEvent]:
        index = 0
        while (event := self._wait(index)) is not None:
            yield event
            index += 1

    def __aiter__(self) -> AsyncIterator[RunEvent]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[RunEvent]:
        index = 0
        while True:
            with self._cond:
                ready = index < len(self._events)
                event = self._events[index] if ready else None
                closed = self._closed
            if event is None and closed:
                return
            if event is None:
                event = await asyncio.to_thread(self._wait, index)
                if event is None:
                    return
            yield event
            index += 1

    def snapshot(self) -> list[RunEvent]:
        """The events so far."""
        with self._cond:
            return list(self._events)


class RunHandle:
    """A run in progress. ``await handle`` or ``handle.result()`` gives its :class:`RunResult`.

    Errors of the run (``MaxTurnsExceeded``, ``SuspendedError``, ...) are raised from
    ``result()`` and ``await``.
    """

    def __init__(self, run_id: str, runtime: Any, token: SuspendToken) -> None:
        self.run_id = run_id
        self._runtime = runtime
        self._token = token
        self._future: concurrent.futures.Future[RunResult] = concurrent.futures.Future()
        self._events = EventLog()
        self._status: RunStatus = "pending"
        self._listener: Callable[[RunEvent], None] | None = None
        """Also handed each event (the run-level hooks' relay), on the runtime's loop."""
        self._graph: Mapping[str, Agent] = {}
        """The run's agents by name, where this driver started or resumed it."""
        self._agent_name = ""
        """The agent the run is at, as its events say."""

    def result(self, timeout_s: float | None = None) -> RunResult:
        """Wait for the run to end and return its result (or raise its error).

        Raises:
            TimeoutError: the run did not end within ``timeout_s`` (it keeps running).
        """
        try:
            return self._future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"run {self.run_id} did not end within {timeout_s} s") from None

    def __await__(self) -> Generator[Any, None, RunResult]:
        return asyncio.wrap_future(self._future).__await__()

    def done(self) -> bool:
        """Whether the run has ended."""
        return self._future.done()

    def status(self) -> RunStatus:
        """The run's status as this driver last saw it."""
        return self._status

    @property
    def current_agent(self) -> Agent | None:
        """The agent the run is at now (as its events say), its last agent once it completed;
        None where this driver does not have the agent (a run it attached to)."""
        if self._future.done() and self._future.exception() is None:
            return self._future.result().last_agent
        return self._graph.get(self._agent_name)

    @property
    def final_output(self) -> Any:
        """The run's final output once it completed, else None."""
        if self._future.done() and self._future.exception() is None:
            return self._future.result().final_output
        return None

    def final_output_as(self, cls: type[T], raise_if_incorrect_type: bool = False) -> T:
        """The final output as ``cls`` (see :meth:`RunResult.final_output_as`), once the run
        ended.

        Raises:
            UserError: the run has not ended yet.
        """
        return self._ended().final_output_as(cls, raise_if_incorrect_type)

    def to_input_list(self) -> list[dict[str, Any]]:
        """The conversation as the next run's input (see :meth:`RunResult.to_input_list`),
        once the run ended.

        Raises:
            UserError: the run has not ended yet.
        """
        return self._ended().to_input_list()

    def _ended(self) -> RunResult:
        if not self._future.done():
            raise UserError(
                f"run {self.run_id} has not ended yet: read its events to the end, or wait "
                "for result()",
                run_id=self.run_id,
            )
        return self._future.result()

    def events(self) -> EventLog:
        """Every event of the run from its start; iterate with ``for`` or ``async for``.

        A handle from :func:`~raygents.attach` to a run another driver drives holds the events
        replayed from the run's checkpoints (``data["replayed"]``), then its terminal event.
        """
        return self._events

    def suspend(self, cause: str = SUSPEND_FOR_CHECKPOINT) -> None:
        """Ask the run to suspend gracefully: in-flight work finishes, then it stops.

        ``result()`` then raises :class:`~raygents.SuspendedError`.
        """
        self._runtime.call_soon(self._token.request, cause)

    def cancel(self) -> None:
        """Stop the run now, unlike :meth:`suspend`: the model call in flight is abandoned,
        its running tool tasks are cancelled through Ray and its agent-as-tool children are
        cancelled. Its records stay in the store for inspection; it cannot be resumed.

        ``result()`` then raises :class:`~raygents.RunCancelled` (unless the run ended
        first); the run's status is ``cancelled``. A run that stopped (suspended, or awaiting
        approval) is cancelled where it lies, as :func:`raygents.cancel` does (which waits
        for it, and raises what goes wrong).
        """
        if self.done() and self._status in ("suspended", "awaiting_approval"):
            done = self._runtime.submit(_cancel_stopped(self._runtime, self.run_id))
            done.add_done_callback(_logged_failure(self.run_id))
            return
        self._runtime.call_soon(self._token.request, CANCEL)

    # --- called by the runtime ----------------------------------------------------------
    def _set_status(self, status: RunStatus) -> None:
        self._status = status

    def _emit(self, event: RunEvent) -> None:
        if event.type == "agent_start" and not event.path:
            self._agent_name = event.agent_name
        self._events.append(event)
        if self._listener is not None:
            self._listener(event)

    def _resolve(
        self, result: RunResult | None, error: RaygentsError | None, status: RunStatus
    ) -> None:
        self._status = status
        self._events.close()
        if error is not None:
            self._future.set_exception(error)
        else:
            assert result is not None
            self._future.set_result(result)

    def __repr__(self) -> str:
        return f"<RunHandle {self.run_id} {self._status}>"


async def _cancel_stopped(runtime: Any, run_id: str) -> None:
    """Have the coordinator cancel a stopped run, once it has this driver's notes (its stop
    among them: until then it may take the run for running)."""
    sending = runtime._send_notes()
    if sending:
        await asyncio.wait(sending)
    await runtime.directory.client.cancel(run_id)


def _logged_failure(run_id: str) -> Callable[[concurrent.futures.Future[Any]], None]:
    """A done callback that logs the failure of a cancel nobody waits for."""

    def check(future: concurrent.futures.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("run %s: cannot cancel it: %s", run_id, future.exception())

    return check
