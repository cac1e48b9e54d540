"""Trace: a ``with trace(...)`` block in a driver, whose runs share one trace and group id."""

from __future__ import annotations

import contextvars
import os
import re
import time
from types import TracebackType
from typing import Any

from raygents.core.envelope import Workflow
from raygents.errors import UserError, excerpt
from raygents.telemetry import tracing

__all__ = ["Trace", "current_workflow", "gen_trace_id", "trace"]

_TRACE_ID = re.compile(r"trace_[0-9a-f]{32}")
_current: contextvars.ContextVar[Trace | None] = contextvars.ContextVar(
    "raygents_trace", default=None
)


def gen_trace_id() -> str:
    """A new trace id: ``trace_`` and 32 hex digits."""
    return f"trace_{os.urandom(16).hex()}"


class Trace:
    """A group of runs: every run a driver starts while the trace is current (inside its
    ``with`` block, or between :meth:`start` with ``mark_as_current`` and :meth:`finish`)
    gets its trace id and group id. ``runs()`` lists them with ``group_id`` and
    ``trace_id``; with OpenTelemetry on, their root spans are children of one span named
    after the workflow, exported when the trace finishes.

    Attributes:
        name: the workflow's name.
        trace_id: ``trace_<32 hex digits>``.
        group_id: an id that ties traces together (a conversation's id), or None.
        metadata: string keys and values, set on the workflow's span.
        disabled: a disabled trace groups nothing (runs started in it get no trace id).
    """

    def __init__(
        self,
        name: str,
        trace_id: str | None,
        group_id: str | None,
        metadata: dict[str, Any] | None,
        disabled: bool,
    ) -> None:
        self.name = name
        self.trace_id = trace_id or gen_trace_id()
        self.group_id = group_id
        self.metadata = dict(metadata or {})
        self.disabled = disabled
        self._started_ns = 0
        self._token: contextvars.Token[Trace | None] | None = None

    def start(self, mark_as_current: bool = False) -> None:
        """Begin the trace (its span's start), and make it current if ``mark_as_current``."""
        if not self._started_ns:
            self._started_ns = time.time_ns()
        if mark_as_current and self._token is None:
            self._token = _current.set(self)

    def finish(self, reset_current: bool = False) -> None:
        """End the trace: its span is exported (with tracing on); ``reset_current`` makes
        the trace current before :meth:`start` current again."""
        if reset_current and self._token is not None:
            _current.reset(self._token)
            self._token = None
        if self._started_ns and not self.disabled:
            tracing.workflow_end(self.workflow(), self._started_ns, self.metadata)
        self._started_ns = 0

    def workflow(self) -> Workflow:
        """The trace as a run's state keeps it."""
        return Workflow(trace_id=self.trace_id, name=self.name, group_id=self.group_id)

    def __enter__(self) -> Trace:
        self.start(mark_as_current=True)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish(reset_current=True)

    def __repr__(self) -> str:
        return f"Trace({self.name!r}, trace_id={self.trace_id!r}, group_id={self.group_id!r})"


def trace(
    workflow_name: str,
    trace_id: str | None = None,
    group_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    disabled: bool = False,
) -> Trace:
    """A trace that groups the runs started while it is current::

        with raygents.trace("Joke workflow", group_id=thread_id):
            first = raygents.run(agent, "Tell me a joke")
            second = raygents.run(agent, f"Rate this joke: {first.final_output}")

    Args:
        workflow_name: what the runs do together (the name of the workflow's span).
        trace_id: ``trace_<32 hex digits>``; a new one by default.
        group_id: ties traces together (a chat thread's id, say); ``runs()`` shows it.
        metadata: string keys and values for the workflow's span.
        disabled: group nothing (the block runs as if there were no trace).

    Raises:
        UserError: ``workflow_name`` is empty or not a str, ``trace_id`` is not
            ``trace_<32 hex digits>``, ``group_id`` is not a str, or ``metadata`` has a key
            that is not a str.
    """
    if not isinstance(workflow_name, str) or not workflow_name:
        raise UserError(f"trace() needs a workflow name, got {excerpt(repr(workflow_name), 80)}")
    if trace_id is not None and not (isinstance(trace_id, str) and _TRACE_ID.fullmatch(trace_id)):
        raise UserError(
            f"trace_id must be 'trace_' and 32 hex digits (gen_trace_id() makes one), got "
            f"{excerpt(repr(trace_id), 80)}"
        )
    if group_id is not None and not isinstance(group_id, str):
        raise UserError(f"group_id must be a str, got {excerpt(repr(group_id), 80)}")
    if metadata is not None and (
        not isinstance(metadata, dict) or not all(isinstance(k, str) for k in metadata)
    ):
        raise UserError(f"metadata must be a dict with str keys, got {excerpt(repr(metadata), 80)}")
    return Trace(workflow_name, trace_id, group_id, metadata, disabled)


def current_workflow() -> Workflow | None:
    """The current trace of this driver (its task or thread), as a run's state keeps it."""
    found = _current.get()
    if found is None or found.disabled:
        return None
    return found.workflow()
