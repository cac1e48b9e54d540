"""raygents: LLM agents on Ray.

Each agent is a Ray actor, each tool call a Ray task; runs hand off between actors, fan out to
sub-agents in parallel, and suspend and resume from durable checkpoints. Importing raygents
starts nothing and reads no environment; ``run`` / ``start`` connect to Ray on first use.

The public API is this module's ``__all__`` (where each name lives: ``_HOMES`` below) and the
modules ``raygents.testing``, ``raygents.data``, ``raygents.guardrails``, ``raygents.templates``,
``raygents.sessions``, ``raygents.models.function`` and ``raygents.serve``. Every other module, in
the packages ``core``, ``agents``, ``models``, ``stores``, ``records``, ``telemetry``,
``runtime``, ``batch``, ``integrations``, ``serve`` and ``cli``, is internal: import from the
paths above, which stay.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

# The errors (one small module with no imports) load with the package: they are what
# callers catch, and the other names are looked up on first use.
from raygents.errors import (
    MAX_PAYLOAD_BYTES,
    SUSPEND_FOR_CHECKPOINT,
    ApprovalDecisionsMismatch,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointNotFound,
    CheckpointTooLarge,
    InputGuardrailTripped,
    LimitExceeded,
    MaxToolDepthExceeded,
    MaxTurnsExceeded,
    ModelError,
    ModelOutputError,
    OutputGuardrailTripped,
    OutputValidationError,
    PayloadTooLarge,
    RaygentsError,
    ResolutionsMismatch,
    RunCancelled,
    RunInDoubt,
    RunInterrupted,
    RunNotFound,
    SuspendedError,
    ToolInputGuardrailTripped,
    ToolNotFound,
    ToolOutputGuardrailTripped,
    TooManyRuns,
    UsageLimitExceeded,
    UserError,
)

if TYPE_CHECKING:
    from raygents.agents.agent import Agent
    from raygents.agents.guardrails import (
        GuardrailResult,
        InputGuardrail,
        OutputGuardrail,
        input_guardrail,
        output_guardrail,
    )
    from raygents.agents.handoffs import Handoff, HandoffInputData, handoff
    from raygents.agents.hooks import AgentHooks, RunHooks
    from raygents.agents.items import RunItem
    from raygents.agents.result import RunResult, TypedResult
    from raygents.agents.runstate import RunState
    from raygents.agents.toolguardrails import (
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
        ToolOutputGuardrail,
        ToolOutputGuardrailData,
        tool_input_guardrail,
        tool_output_guardrail,
    )
    from raygents.agents.tools import Tool, ToolContext, ToolResult, tool
    from raygents.agents.tooluse import StopAtTools
    from raygents.batch.job import BatchHandle, BatchItem, BatchResult
    from raygents.batch.progress import BatchProgress
    from raygents.batch.start import run_batch, start_batch
    from raygents.core.approvals import Approval, ApprovalDecision, PendingApproval
    from raygents.core.compaction import Compaction, TrimOldest, TrimToolOutputs
    from raygents.core.context import RunContext
    from raygents.core.contextdata import NotDurable
    from raygents.core.doubt import InDoubt
    from raygents.core.events import RunEvent
    from raygents.core.messages import (
        Message,
        ModelRequest,
        ModelResponse,
        ReasoningItem,
        ToolCall,
        Usage,
    )
    from raygents.core.parts import FilePart, ImagePart, TextPart
    from raygents.core.pricing import Price
    from raygents.core.replay import ReplayReport
    from raygents.integrations.mcp import MCPServerStdio, MCPServerStreamableHTTP
    from raygents.models.affinity import RunAffinityRouter, affinity_router_config
    from raygents.models.base import Model, ModelSettings
    from raygents.models.budgets import Budget
    from raygents.models.openai import OpenAIChatModel
    from raygents.models.ratelimit import RateLimit
    from raygents.models.responses import OpenAIResponsesModel
    from raygents.models.served import ServeModel
    from raygents.records.history import Checkpoint
    from raygents.records.runinfo import RunInfo, RunStatus
    from raygents.runtime.driver.attach import attach, cancel, runs
    from raygents.runtime.driver.client import init, shutdown
    from raygents.runtime.driver.fork import fork
    from raygents.runtime.driver.handle import RunHandle
    from raygents.runtime.driver.history import history
    from raygents.runtime.driver.replay import replay
    from raygents.runtime.driver.runs import resume, run, run_streamed, run_typed, start
    from raygents.runtime.driver.tracegroup import Trace, gen_trace_id, trace
    from raygents.sessions import MemorySession, Session, SQLiteSession, StoreSession

# Where each public name lives. They are imported on first use: a Ray worker that only runs
# tool tasks loads the few modules those need (tools, messages), not the driver's runtime, the
# agent loop or the OpenAI client, and so starts faster (``docs/perf-log.md``).
_HOMES = {
    "raygents.agents.agent": ("Agent",),
    "raygents.core.approvals": ("Approval", "ApprovalDecision", "PendingApproval"),
    "raygents.core.compaction": ("Compaction", "TrimOldest", "TrimToolOutputs"),
    "raygents.core.context": ("RunContext",),
    "raygents.core.contextdata": ("NotDurable",),
    "raygents.core.doubt": ("InDoubt",),
    "raygents.batch.job": ("BatchHandle", "BatchItem", "BatchResult"),
    "raygents.batch.progress": ("BatchProgress",),
    "raygents.batch.start": ("run_batch", "start_batch"),
    "raygents.core.events": ("RunEvent",),
    "raygents.agents.guardrails": (
        "GuardrailResult",
        "InputGuardrail",
        "OutputGuardrail",
        "input_guardrail",
        "output_guardrail",
    ),
    "raygents.agents.handoffs": ("Handoff", "HandoffInputData", "handoff"),
    "raygents.agents.hooks": ("AgentHooks", "RunHooks"),
    "raygents.agents.items": ("RunItem",),
    "raygents.integrations.mcp": ("MCPServerStdio", "MCPServerStreamableHTTP"),
    "raygents.core.messages": (
        "Message",
        "ModelRequest",
        "ModelResponse",
        "ReasoningItem",
        "ToolCall",
        "Usage",
    ),
    "raygents.core.parts": ("FilePart", "ImagePart", "TextPart"),
    "raygents.core.pricing": ("Price",),
    "raygents.models.base": ("Model", "ModelSettings"),
    "raygents.models.budgets": ("Budget",),
    "raygents.models.openai": ("OpenAIChatModel",),
    "raygents.models.responses": ("OpenAIResponsesModel",),
    "raygents.models.served": ("ServeModel",),
    "raygents.models.affinity": ("RunAffinityRouter", "affinity_router_config"),
    "raygents.models.ratelimit": ("RateLimit",),
    "raygents.agents.result": ("RunResult", "TypedResult"),
    "raygents.agents.runstate": ("RunState",),
    "raygents.runtime.driver.client": ("init", "shutdown"),
    "raygents.runtime.driver.handle": ("RunHandle",),
    "raygents.records.runinfo": ("RunInfo", "RunStatus"),
    "raygents.runtime.driver.attach": ("attach", "cancel", "runs"),
    "raygents.runtime.driver.runs": ("resume", "run", "run_streamed", "run_typed", "start"),
    "raygents.runtime.driver.tracegroup": ("Trace", "gen_trace_id", "trace"),
    "raygents.sessions": ("MemorySession", "Session", "SQLiteSession", "StoreSession"),
    "raygents.agents.tools": ("Tool", "ToolContext", "ToolResult", "tool"),
    "raygents.agents.toolguardrails": (
        "ToolGuardrailFunctionOutput",
        "ToolInputGuardrail",
        "ToolInputGuardrailData",
        "ToolOutputGuardrail",
        "ToolOutputGuardrailData",
        "tool_input_guardrail",
        "tool_output_guardrail",
    ),
    "raygents.agents.tooluse": ("StopAtTools",),
    # a run's history, forks and replays
    "raygents.records.history": ("Checkpoint",),
    "raygents.runtime.driver.history": ("history",),
    "raygents.runtime.driver.fork": ("fork",),
    "raygents.core.replay": ("ReplayReport",),
    "raygents.runtime.driver.replay": ("replay",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif not name.startswith("__") and importlib.util.find_spec(f"raygents.{name}") is not None:
        value = importlib.import_module(f"raygents.{name}")  # ``raygents.testing.text``...
    else:
        raise AttributeError(f"module 'raygents' has no attribute {name!r}")
    globals()[name] = value  # the next lookup finds it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "MAX_PAYLOAD_BYTES",
    "SUSPEND_FOR_CHECKPOINT",
    "Agent",
    "AgentHooks",
    "Approval",
    "ApprovalDecision",
    "ApprovalDecisionsMismatch",
    "BatchHandle",
    "BatchItem",
    "BatchProgress",
    "BatchResult",
    "Budget",
    "Checkpoint",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointNotFound",
    "CheckpointTooLarge",
    "Compaction",
    "FilePart",
    "GuardrailResult",
    "Handoff",
    "HandoffInputData",
    "ImagePart",
    "InDoubt",
    "InputGuardrail",
    "InputGuardrailTripped",
    "LimitExceeded",
    "MCPServerStdio",
    "MCPServerStreamableHTTP",
    "MaxToolDepthExceeded",
    "MaxTurnsExceeded",
    "MemorySession",
    "Message",
    "Model",
    "ModelError",
    "ModelOutputError",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "NotDurable",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "OutputGuardrail",
    "OutputGuardrailTripped",
    "OutputValidationError",
    "PayloadTooLarge",
    "PendingApproval",
    "Price",
    "RateLimit",
    "ReplayReport",
    "RaygentsError",
    "ReasoningItem",
    "ResolutionsMismatch",
    "RunContext",
    "RunEvent",
    "RunHandle",
    "RunHooks",
    "RunCancelled",
    "RunInDoubt",
    "RunInfo",
    "RunInterrupted",
    "RunNotFound",
    "RunItem",
    "RunAffinityRouter",
    "RunResult",
    "RunState",
    "RunStatus",
    "SQLiteSession",
    "ServeModel",
    "Session",
    "StopAtTools",
    "StoreSession",
    "SuspendedError",
    "TextPart",
    "Tool",
    "TooManyRuns",
    "ToolCall",
    "ToolContext",
    "ToolGuardrailFunctionOutput",
    "ToolInputGuardrail",
    "ToolInputGuardrailData",
    "ToolInputGuardrailTripped",
    "ToolNotFound",
    "ToolOutputGuardrail",
    "ToolOutputGuardrailData",
    "ToolOutputGuardrailTripped",
    "ToolResult",
    "Trace",
    "TrimOldest",
    "TrimToolOutputs",
    "TypedResult",
    "Usage",
    "UsageLimitExceeded",
    "UserError",
    "affinity_router_config",
    "attach",
    "cancel",
    "fork",
    "gen_trace_id",
    "handoff",
    "history",
    "init",
    "input_guardrail",
    "output_guardrail",
    "replay",
    "resume",
    "run",
    "run_batch",
    "run_streamed",
    "run_typed",
    "runs",
    "shutdown",
    "start",
    "start_batch",
    "tool",
    "tool_input_guardrail",
    "tool_output_guardrail",
    "trace",
]
