"""RunHandle: the driver's view of a run (its result, status, events and suspend)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from raygents.agents.result import RunResult
from raygents.core.events import RunEvent
from raygents.errors import CANCEL, SUSPEND_FOR_CHECKPOINT, RaygentsError, UserError
from raygents.records.runinfo import RunInfo, RunStatus

if TYPE_CHECKING:
    from raygents.agents.agent import Agent
    from raygents.runtime.link.drive import SuspendToken

log = logging.getLogger("raygents")
T = TypeVar("T")

_WAKE_S = 0.2
"""How often a thread waiting for a run's result wakes: an interrupt raised in it without a
signal (``_thread.interrupt_main``, as Ray cancels a plain task) is seen only when a wait
ends."""

__all__ = ["EventLog", "EventsAfter", "RunHandle"]


class EventLog:
    """Every event of a run, kept so that any number of readers see them all, from the start.

    The run appends without ever waiting for readers, so a slow reader never stalls a run.
    With ``keep``, only the newest ``keep`` events stay (the log of a run another process
    drives, which may be long): a reader that falls further behind gets a ``lagged`` event
    naming the numbers it missed, then goes on with the oldest event kept.
    """

    def __init__(self, keep: int | None = None) -> None:
        self._events: list[RunEvent] = []
        self._dropped = 0
        """Events dropped from the front (``keep``): the index of ``_events[0]``."""
        self._keep = keep
        self._first_seq: int | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._async_waiters: list[asyncio.Future[None]] = []

    def append(self, event: RunEvent) -> None:
        """Add an event (called from the runtime's event loop)."""
        with self._cond:
            if self._first_seq is None:
                self._first_seq = event.seq
            self._events.append(event)
            keep = self._keep
            if keep is not None and len(self._events) > keep + keep // 4:
                cut = len(self._events) - keep  # (in chunks: a slice is not free)
                del self._events[:cut]
                self._dropped += cut
            self._cond.notify_all()
            self._wake_async()

    def close(self) -> None:
        """No more events will come."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._wake_async()

    def _wake_async(self) -> None:
        """Wake the ``async for`` readers waiting (each on its own loop; no thread is held
        per waiting reader, so a server can follow many runs at once); holding the lock."""
        if not self._async_waiters:
            return
        for waiter in self._async_waiters:
            with contextlib.suppress(RuntimeError):  # (its loop is closed: nobody waits)
                waiter.get_loop().call_soon_threadsafe(_set_done, waiter)
        self._async_waiters.clear()

    def _get(self, index: int) -> RunEvent | int | None:
        """The event at ``index``, else the index to go on from (it was dropped), else None
        (not there yet); holding the lock."""
        if index < self._dropped:
            return self._dropped
        at = index - self._dropped
        return self._events[at] if at < len(self._events) else None

    def _wait(self, index: int, timeout: float | None = None) -> RunEvent | int | None:
        with self._cond:
            while (found := self._get(index)) is None:
                if self._closed:
                    return None
                if not self._cond.wait(timeout) and timeout is not None:
                    raise TimeoutError
            return found

    def _lagged(self, last: int | None) -> tuple[RunEvent, int]:
        """The ``lagged`` event for a reader that read up to seq ``last`` and fell behind the
        oldest event kept, and the index of that event (where the reader goes on)."""
        with self._cond:
            kept, index = self._events[0], self._dropped
        low = last + 1 if last is not None else (self._first_seq or 1)
        high = (kept.seq or low) - 1
        data = {"missed": [low, high]}
        event = RunEvent(type="lagged", run_id=kept.run_id, agent_name=kept.agent_name, data=data)
        return event, index

    def __iter__(self) -> Iterator[RunEvent]:
        index, last = 0, None
        while (found := self._wait(index)) is not None:
            if isinstance(found, int):
                lagged, index = self._lagged(last)
                yield lagged
                continue
            yield found
            last = found.seq if found.seq is not None else last
            index += 1

    def __aiter__(self) -> AsyncIterator[RunEvent]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[RunEvent]:
        index, last = 0, None
        while True:
            with self._cond:
                found = self._get(index)
                closed = self._closed
                if found is None and not closed:  # (woken by the next append or close)
                    woken = asyncio.get_running_loop().create_future()
                    self._async_waiters.append(woken)
            if found is None and closed:
                return
            if found is None:
                await woken
                continue
            if isinstance(found, int):
                lagged, index = self._lagged(last)
                yield lagged
                continue
            yield found
            last = found.seq if found.seq is not None else last
            index += 1

    def after(self, seq: int) -> EventsAfter:
        """The events numbered after ``seq`` (see :meth:`RunHandle.events`)."""
        return EventsAfter(self, seq)

    def snapshot(self) -> list[RunEvent]:
        """The events so far (those still kept)."""
        with self._cond:
            return list(self._events)


def _set_done(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # (its reader may have gone: cancelled)
        waiter.set_result(None)


def _after(event: RunEvent, seq: int) -> bool:
    """Whether a reader that saw the events up to ``seq`` has not seen ``event``: numbered
    after it, or a ``lagged`` or terminal event never numbered (a replayed history is not)."""
    if event.seq is not None:
        return event.seq > seq
    return not (event.data and event.data.get("replayed")) or event.is_terminal


class EventsAfter:
    """A run's events numbered after a seq (``handle.events(after=seq)``), as
    :class:`EventLog` gives them: iterate with ``for`` or ``async for``."""

    def __init__(self, log: EventLog, seq: int) -> None:
        self._log = log
        self.seq = seq

    def __iter__(self) -> Iterator[RunEvent]:
        return (e for e in self._log if _after(e, self.seq))

    def __aiter__(self) -> AsyncIterator[RunEvent]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[RunEvent]:
        async for event in self._log:
            if _after(event, self.seq):
                yield event

    def snapshot(self) -> list[RunEvent]:
        """The events so far (those still kept)."""
        return [e for e in self._log.snapshot() if _after(e, self.seq)]


class RunHandle:
    """A run in progress. ``await handle`` or ``handle.result()`` gives its :class:`RunResult`.

    Errors of the run (``MaxTurnsExceeded``, ``SuspendedError``, ...) are raised from
    ``result()`` and ``await``.
    """

    def __init__(
        self,
        run_id: str,
        runtime: Any,
        token: SuspendToken,
        *,
        numbered_after: int = 0,
        keep: int | None = None,
    ) -> None:
        self.run_id = run_id
        self._runtime = runtime
        self._token = token
        self._future: concurrent.futures.Future[RunResult] = concurrent.futures.Future()
        self._events = EventLog(keep)
        self._status: RunStatus = "pending"
        self._seq = numbered_after
        """The seq of the newest event (a resumed run numbers on after its last drive's)."""
        self._listener: Callable[[RunEvent], None] | None = None
        """Also handed each event (the run-level hooks' relay), on the runtime's loop."""
        self._graph: Mapping[str, Agent] = {}
        """The run's agents by name, where this driver started or resumed it."""
        self._entry: RunInfo | None = None
        """The run table's entry once the run ended, where the coordinator drove it
        (detached mode) and sent it with the outcome; else None (ask the coordinator)."""
        self._agent_name = ""
        """The agent the run is at, as its events say."""
        self._tap: Callable[[RunEvent], None] | None = None
        """Also handed each event while the coordinator's relay wants them (someone in
        another process follows the run), on the runtime's loop."""

    def result(self, timeout_s: float | None = None) -> RunResult:
        """Wait for the run to end and return its result (or raise its error).

        A ``KeyboardInterrupt`` raised in the waiting thread without a signal (as Ray raises
        one to cancel a plain task, through ``_thread.interrupt_main``) ends the wait within
        a fraction of a second; the run keeps running (see :meth:`cancel` to stop it).

        Raises:
            TimeoutError: the run did not end within ``timeout_s`` (it keeps running).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:  # (in slices: see _WAKE_S)
            left = _WAKE_S if deadline is None else deadline - time.monotonic()
            try:
                return self._future.result(max(0.0, min(left, _WAKE_S)))
            except concurrent.futures.TimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"run {self.run_id} did not end within {timeout_s} s"
                    ) from None

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

    @overload
    def events(self, after: None = None) -> EventLog: ...

    @overload
    def events(self, after: int) -> EventsAfter: ...

    def events(self, after: int | None = None) -> EventLog | EventsAfter:
        """Every event of the run from its start; iterate with ``for`` or ``async for``.

        Events carry their number in the run, ``seq`` (the same in every process). With
        ``after``, only those numbered after it come (and the ``lagged`` markers, and the
        terminal event when it has no number): a reader that reconnects passes the ``seq`` of
        the last event it handled, and gets no event twice and none missed.

        A handle from :func:`~raygents.attach` to a run another process drives gets its
        events live through the coordinator's relay: those it keeps (the newest 10,000),
        then each one as it happens, then the terminal event. A run that ended before anyone
        followed it (or whose events are no longer kept) gives the events its checkpoints
        record instead (``data["replayed"]``, no ``seq``), then its terminal event (numbered
        where the run table knows the number).

        Raises:
            UserError: ``after`` is not an int >= 0.
        """
        if after is None:
            return self._events
        if type(after) is not int or after < 0:
            raise UserError(f"after must be an int >= 0 (an event's seq), got {after!r}")
        return self._events.after(after)

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
        if self.done() and self._status in ("suspended", "awaiting_approval", "in_doubt"):
            done = self._runtime.submit(_cancel_stopped(self._runtime, self.run_id))
            done.add_done_callback(_logged_failure(self.run_id))
            return
        self._runtime.call_soon(self._token.request, CANCEL)

    # --- called by the runtime ----------------------------------------------------------
    def _set_status(self, status: RunStatus) -> None:
        self._status = status

    def _emit(self, event: RunEvent) -> None:
        """An event of the run this process drives: numbered here, unless the coordinator
        drives the run and numbered it."""
        if event.seq is None:
            self._seq += 1
            event = event.model_copy(update={"seq": self._seq})
        else:
            self._seq = event.seq
        if event.type == "agent_start" and not event.path:
            self._agent_name = event.agent_name
        self._events.append(event)
        if self._listener is not None:
            self._listener(event)
        if self._tap is not None:
            self._tap(event)

    def _relayed(self, event: RunEvent) -> None:
        """An event of a run another process drives, as the relay (or a replay) gives it."""
        self._events.append(event)

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
