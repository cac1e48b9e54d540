"""Run state: the plain data that travels between actors and that a checkpoint holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from raygents.core.approvals import ApprovalDecision, PendingApproval
from raygents.core.contextdata import StoredContext
from raygents.core.doubt import InDoubt, Resolution
from raygents.core.messages import Message, ToolResult, Usage
from raygents.errors import RaygentsError

__all__ = ["Envelope", "Outcome", "RunState", "TraceContext", "Workflow", "new_run_id"]


def new_run_id() -> str:
    """A fresh, sortable run id."""
    import os
    import time

    return f"run-{time.time_ns():x}-{os.urandom(4).hex()}"


class TraceContext(BaseModel):
    """Where a run's spans join their trace (W3C Trace Context); see
    :mod:`raygents.telemetry.tracing`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    traceparent: str
    """The span the run's agent spans are children of, as a ``traceparent`` header: the run's
    root span, or for an agent-as-tool child the span of the tool call that started it."""
    started_ns: int = 0
    """When a top-level run's root span began (it is exported when the run ends); 0 for a
    child run, which has no root span of its own."""
    workflow_span: str = ""
    """The span id (hex) of the ``trace()`` block a top-level run was started in: its root
    span's parent, in the block's trace; empty for a run of its own trace."""
    activation: str = ""
    """The span id (hex) of the agent span of the activation under way, and ``activation_ns``
    when it began: a run recovered from a record that still names one lost that activation
    (an activation that ends clears it), and exports its span for it."""
    activation_ns: int = 0


class Workflow(BaseModel):
    """The ``trace()`` block a run was started in: the runs started in one share its trace
    and group id."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace_id: str
    """The block's trace id (``trace_<32 hex digits>``)."""
    name: str = ""
    """The workflow's name."""
    group_id: str | None = None
    """A group of traces (a conversation's id, say), as ``runs()`` shows it."""


class RunState(BaseModel):
    """Everything about a run that must survive a hop to another actor or a checkpoint.

    Limits only shrink as a run travels: ``max_turns``, ``max_tool_depth`` and
    ``max_model_calls`` are caps that apply on top of each agent's own limits.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    agent_name: str
    """The active agent."""
    messages: tuple[Message, ...] = ()
    """The conversation without the system prompt."""
    input_len: int = 0
    """How many leading messages were the run's input (session history included)."""
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    """Usage of this run and of every agent-as-tool child it made."""
    max_turns: int | None = None
    """A cap on every agent's ``max_turns`` for this run."""
    depth: int = 0
    """Agent-as-tool nesting depth: 0 for a top-level run."""
    max_tool_depth: int | None = None
    """A cap on agent-as-tool nesting inherited from the parent run."""
    max_model_calls: int | None = None
    """A cap on model calls (``usage.requests``) of this run and its agent-as-tool children:
    the smallest ``max_model_calls`` of the agents active in it, and for a child its share of
    what its parent had left when it started."""
    max_tokens: int | None = None
    """A budget of tokens (input and output) for this run and its agent-as-tool children
    (``run(max_tokens=)``); for a child, its share of what its parent had left when it
    started."""
    max_cost_usd: float | None = None
    """A budget in US dollars for this run and its agent-as-tool children
    (``run(max_cost_usd=)``), shared with children like ``max_tokens``."""
    parent_run_id: str | None = None
    path: tuple[str, ...] = ()
    """Agent-as-tool nesting as ``"<agent>/<call id>"`` steps, for events."""
    tool_used_in_run: bool = False
    empty_retries: int = 0
    output_retries: int = 0
    """Corrections of malformed model output the run has sent (``max_output_retries``); a
    record without it is from before it was counted, and reads as 0."""
    exploring: bool = False
    """Structured output with tools: still exploring with tools before the synthesis turn."""
    forced_synthesis: bool = False
    """One turn past the limit is granted for the synthesis of structured output."""
    response_format: dict[str, Any] | None = None
    """A run-level output schema (``run_typed``) that overrides agents' ``output_type``."""
    seq: int = 0
    """The sequence number of the run's newest checkpoint record."""
    recorded: int = 0
    """How many leading messages are already in checkpoint records (for deltas)."""
    since_full: int = 0
    """Bytes of messages in delta records since the last full record."""
    full_size: int = 0
    """Bytes of messages in the last full record."""
    journal: dict[str, ToolResult] = Field(default_factory=dict)
    """Finished calls of the pending batch, by call id: never run again after a resume. An
    entry never changes once made (checkpoint deltas carry only new entries)."""
    approvals: dict[str, ApprovalDecision] = Field(default_factory=dict)
    """Decisions for calls of the pending batch, by call id."""
    pending: tuple[PendingApproval, ...] = ()
    """Calls waiting for approval (this run's and its children's)."""
    started: dict[str, float] = Field(default_factory=dict)
    """The pending batch's ``on_recovery="ask"`` calls whose start is recorded, with when
    (``time.time()``): one of them without a journal entry on a resume may have run."""
    resolutions: dict[str, Resolution] = Field(default_factory=dict)
    """Decisions on calls in doubt of the pending batch, by call id (used up as it runs)."""
    in_doubt: tuple[InDoubt, ...] = ()
    """Calls in doubt (this run's and its children's): the run waits for resolutions."""
    turn_limit: int | None = None
    """The active agent's turn limit as checkpointed; wins over the live agent's on resume."""
    epoch: int = 0
    """The dispatch this state belongs to; checkpoint writes of older dispatches are refused."""
    session_id: str | None = None
    """The conversation the run loads at start and saves on success (start agent's session)."""
    start_agent: str = ""
    """The agent the run started on (whose session and input guardrails apply)."""
    tenant: str | None = None
    """Whose quota of runs in flight the run counts against (``max_concurrent_runs``); None
    is the default tenant's."""
    rewritten: bool = False
    """A handoff's ``input_filter`` or a compaction rewrote the history: the session save
    replaces the conversation with the run's instead of appending the run's new messages to
    it, unless ``session_summary`` says how a compaction rewrote it."""
    loaded_len: int | None = None
    """How many leading messages the run loaded from its session (None: no session, or a
    record from before it was kept)."""
    session_summary: tuple[int, int] | None = None
    """``(upto, summary_len)``: compactions rewrote the history, and its first
    ``summary_len`` messages stand for the first ``upto`` of the ``loaded_len`` it loaded
    from its session (the next ``loaded_len - upto`` are the rest of those, verbatim): the
    session save records the compaction, keeping what other runs saved meanwhile. None: no
    compaction, or an ``input_filter`` rewrote the history too."""
    started_at: float | None = None
    """When the run started (``time.time()`` where it was made); a record without it (from
    before) reads as None."""
    trace: TraceContext | None = None
    """The run's trace context, when tracing was on as it started; a record without it (from
    before, or untraced) reads as None, and a top-level run then gets one on its next
    activation."""
    workflow: Workflow | None = None
    """The ``trace()`` block the run (or its top-level parent) was started in."""
    context: StoredContext | None = None
    """The run's context as plain data, as the last step that could write it left it; None
    for no context, or one the caller marked ``NotDurable`` (see
    :mod:`raygents.core.contextdata`)."""
    context_writes: dict[str, list[Any]] = Field(default_factory=dict)
    """Writes of the pending batch's tool calls to the context, by call id (those that wrote):
    applied in call order when the batch ends, also after a resume."""

    prompt_tokens: int | None = None
    """The input tokens the provider said the run's last model call took (None: it did not
    say, or the history was rewritten since): the next request's count starts from it."""
    prompt_len: int = 0
    """How many messages that call's request had."""

    def evolve(self, **changes: Any) -> RunState:
        """A copy with ``changes`` applied."""
        return self.model_copy(update=changes)


SuspendRequest = tuple[str, str] | tuple[str, str, int | None]
"""A request that a run suspend (or, with cause ``CANCEL``, stop): ``(run_id, cause)``, or
with the epoch of the dispatch it was made for (so that it never reaches a later one)."""


@dataclass
class Envelope:
    """A run on its way to an agent actor: its state plus what does not go in checkpoints."""

    state: RunState
    graph_fp: str
    """Which snapshot of the agent graph the run uses."""
    context: Any = None
    """The run context as this process holds it: the caller's object, revived from
    ``state.context`` where the run arrives (a ``NotDurable`` context's value as it is)."""
    stream: bool = False
    """Stream model output as ``llm_delta`` events."""
    llm_events: bool = False
    """Send ``llm_start`` / ``llm_end`` events (the run's run-level hooks have model-call
    hooks): they carry the request and the reply, so only runs that need them send them."""
    activate: bool = True
    """The agent becomes active with this envelope (start, handoff, resume)."""
    suspend_cause: str | None = None
    """A suspend was requested before the envelope arrived."""
    resumed: bool = False
    """The run continues from a checkpoint: its agent-as-tool children may have their own."""
    approvals: dict[str, ApprovalDecision] = field(default_factory=dict)
    """Decisions given to ``resume``, for this run and its children."""
    resolutions: dict[str, Resolution] = field(default_factory=dict)
    """Resolutions of calls in doubt given to ``resume``, for this run and its children."""


OutcomeKind = Literal["completed", "failed", "suspended", "interrupted", "handoff"]


@dataclass
class Outcome:
    """How an actor's part of a run ended."""

    kind: OutcomeKind
    state: RunState
    output: str | None = None
    error: RaygentsError | None = None
    cause: str | None = None
    checkpoint_error: str | None = None
    """Why the final checkpoint could not be stored (the state is then carried inline)."""
    tool: str | None = None
    """The tool whose result is the output, when the agent's tool use behaviour stopped at
    a tool (the driver types the output as the tool declares its return value)."""
