"""RunInfo: a run's status and its entry in the run table, plain data that crosses processes,
and the summary of a completed run's result that the table keeps for ``attach`` (its
completion marker, which keeps the result in the store: :mod:`~raygents.records.keptresult`)."""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, cast, get_args

from raygents.core.messages import Usage
from raygents.errors import RunCancelled

if TYPE_CHECKING:
    from raygents.core.envelope import Outcome, RunState
    from raygents.core.messages import Message

__all__ = [
    "Note",
    "RecordEntry",
    "RunInfo",
    "RunStatus",
    "RunSummary",
    "TableStatus",
    "ended_info",
    "outcome_entry",
    "outcome_status",
    "parent_of",
    "run_summary",
    "table_status",
]

RunStatus = Literal[
    "pending",
    "running",
    "suspended",
    "awaiting_approval",
    "in_doubt",
    "completed",
    "failed",
    "cancelled",
]
"""Where a run stands: what :meth:`~raygents.RunHandle.status` and the run table say."""

TableStatus = RunStatus | Literal["unknown"]
"""A status in the run table: a run's, or ``"unknown"`` for one not read back yet."""

RecordEntry = tuple[str, str, int, str | None]
"""What a checkpoint record tells the run table: ``(status, agent_name, turns, last_error)``."""

Note = tuple[str, int, int, bytes, RecordEntry, bool]
"""A record an agent actor stored itself, as it reports it to the coordinator:
``(run_id, seq, epoch, data, entry, full)``."""

_TABLE_STATUSES = frozenset(s for literal in get_args(TableStatus) for s in get_args(literal))
_CHILD_ID = re.compile(r"(.+)\.[0-9a-f]{24}")  # (runtime/children.child_run_id's ids)
_PARENT_CUT = 64  # characters of the parent's id that a child's id keeps


@dataclass(frozen=True)
class RunInfo:
    """What the coordinator knows about a run."""

    run_id: str
    status: TableStatus
    agent_name: str
    turns: int = 0
    attempts: int = 1
    updated_at: float = field(default_factory=time.time)
    last_error: str | None = None
    seq: int = 0
    owner: str | None = None
    tenant: str | None = None
    """Whose quota of runs in flight the run counts against (None: the default tenant's)."""
    started_at: float | None = None
    """When the run was first dispatched (kept across its resumes and recoveries); None
    where not known (a run read back from a marker that does not say)."""
    parent: str | None = None
    """The run id of the agent-as-tool parent of a child run; None for a top-level run (or
    a child whose parent is not known)."""
    group_id: str | None = None
    """The group id of the ``trace()`` block the run was started in (its parent's, for a
    child run), if it had one."""
    trace_id: str | None = None
    """The trace id of that block (``trace_<32 hex digits>``); None outside one."""
    events: int = 0
    """The ``seq`` of the last event of the run's latest drive that ended (its terminal
    event), which a resumed run numbers its events after; 0 where not known."""


class RunSummary(TypedDict):
    """A completed run's result as the run table keeps it (what ``attach`` rebuilds from)."""

    final_output: str
    messages: Sequence[Message]
    usage: Usage | None
    turns: int
    agent_name: str
    input_count: NotRequired[int]
    """How many of ``messages`` the run started with."""
    context: NotRequired[dict[str, Any]]
    """The run's final context, as its state keeps it (a ``StoredContext`` as JSON), when it
    has a durable one."""
    start_agent: NotRequired[str]
    """The agent the run started on (``agent_name`` is the one it ended on)."""
    rewritten: NotRequired[bool]
    """A handoff's input filter rewrote the run's history."""


_STATUS_OF: dict[str, RunStatus] = {
    "completed": "completed",
    "suspended": "suspended",
    "interrupted": "awaiting_approval",
}


def outcome_status(outcome: Outcome) -> RunStatus:
    """The run table's status for a run whose actor's part ended with ``outcome`` (a
    handoff that comes back as an outcome ended nowhere: the run failed)."""
    if outcome.kind == "failed" and isinstance(outcome.error, RunCancelled):
        return "cancelled"
    if outcome.kind == "interrupted" and outcome.state.in_doubt:
        return "in_doubt"
    return _STATUS_OF.get(outcome.kind, "failed")


def run_summary(outcome: Outcome) -> RunSummary:
    """The summary the run table keeps of a completed run's result."""
    state = outcome.state
    summary: RunSummary = {
        "final_output": outcome.output or "",
        "messages": state.messages,
        "usage": state.usage,
        "turns": state.turns,
        "agent_name": state.agent_name,
        "input_count": state.input_len,
        "start_agent": state.start_agent,
        "rewritten": state.rewritten,
    }
    if state.context is not None:
        summary["context"] = state.context.model_dump(mode="json")
    return summary


def ended_info(state: RunState, status: TableStatus, error: str | None = None) -> RunInfo:
    """The run table's entry for the run of ``state`` once it ended with ``status``."""
    return RunInfo(
        state.run_id,
        status,
        state.agent_name,
        state.turns,
        last_error=error,
        seq=state.seq,
        tenant=state.tenant,
        started_at=state.started_at,
        parent=state.parent_run_id,
        group_id=state.workflow.group_id if state.workflow else None,
        trace_id=state.workflow.trace_id if state.workflow else None,
    )


def outcome_entry(outcome: Outcome, error: str | None = None) -> tuple[RunInfo, RunSummary | None]:
    """The run table's entry for a run that ended with ``outcome``, and a completed run's
    summary; ``error``: the text of the error its caller sees (default: the outcome's)."""
    summary = run_summary(outcome) if outcome.kind == "completed" else None
    if error is None and outcome.error is not None:
        error = str(outcome.error)
    return ended_info(outcome.state, outcome_status(outcome), error), summary


def table_status(value: str) -> TableStatus:
    """``value``, checked to be a run table status.

    Raises:
        ValueError: it is not one.
    """
    if value not in _TABLE_STATUSES:
        raise ValueError(f"not a run status: {value!r}")
    return cast(TableStatus, value)


def parent_of(run_id: str, known: Collection[str]) -> str | None:
    """The parent of ``run_id`` among the ``known`` run ids when its id is an agent-as-tool
    child's (``<parent id, cut to 64>.<24 hex digits>``, see
    :func:`~raygents.runtime.actor.children.child_run_id`), else None. ``known`` is looked in with
    ``in`` first (a set or a dict is quick); a parent whose id was cut is found by a scan, and
    only when one known id begins with the cut id (the digits cannot tell two such ids apart)."""
    found = _CHILD_ID.fullmatch(run_id)
    if found is None:
        return None
    head = found[1]
    if head in known:
        return head
    if len(head) != _PARENT_CUT:
        return None
    longer = [o for o in known if len(o) > _PARENT_CUT and o.startswith(head) and o != run_id]
    return longer[0] if len(longer) == 1 else None
