"""raygents: LLM agents on Ray.

Each agent is a Ray actor, each tool call a Ray task; runs hand off between actors, fan out to
sub-agents in parallel, and suspend and resume from durable checkpoints. Importing raygents
starts nothing and reads no environment; ``run`` / ``start`` connect to Ray on first use.
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
    RunCancelled,
    RunInterrupted,
    RunNotFound,
    SuspendedError,
    ToolNotFound,
    TooManyRuns,
    UsageLimitExceeded,
    UserError,
)

if TYPE_CHECKING:
    from raygents.agent import Agent
    from raygents.approvals import Approval, ApprovalDecision, PendingApproval
    from raygents.batch import BatchHandle, BatchItem, BatchResult, run_batch, start_batch
    from raygents.batchprogress import BatchProgress
    from raygents.events import RunEvent
    from raygents.guardrails import (
        GuardrailResult,
        InputGuardrail,
        OutputGuardrail,
        input_guardrail,
        output_guardrail,
    )
    from raygents.handoffs import Handoff, HandoffInputData, handoff
    from raygents.hooks import RunHooks
    from raygents.mcp import MCPServerStdio, MCPServerStreamableHTTP
    from raygents.messages import Message, ModelRequest, ModelResponse, ToolCall, Usage
    from raygents.models.base import Model, ModelSettings
    from raygents.models.openai import OpenAIChatModel
    from raygents.ratelimit import RateLimit
    from raygents.result import RunResult, TypedResult
    from raygents.runtime.attach import attach, cancel, runs
    from raygents.runtime.client import init, shutdown
    from raygents.runtime.handle import RunHandle, RunStatus
    from raygents.runtime.runinfo import RunInfo
    from raygents.runtime.runs import resume, run, run_streamed, run_typed, start
    from raygents.sessions import MemorySession, Session, SQLiteSession, StoreSession
    from raygents.tools import RunContext, Tool, ToolContext, ToolResult, tool
    from raygents.tooluse import StopAtTools

# Where each public name lives. They are imported on first use: a Ray worker that only runs
# tool tasks loads the few modules those need (tools, messages), not the driver's runtime, the
# agent loop or the OpenAI client, and so starts faster (``docs/perf-log.md``).
_HOMES = {
    "raygents.agent": ("Agent",),
    "raygents.approvals": ("Approval", "ApprovalDecision", "PendingApproval"),
    "raygents.batch": ("BatchHandle", "BatchItem", "BatchResult", "run_batch", "start_batch"),
    "raygents.batchprogress": ("BatchProgress",),
    "raygents.events": ("RunEvent",),
    "raygents.guardrails": (
        "GuardrailResult",
        "InputGuardrail",
        "OutputGuardrail",
        "input_guardrail",
        "output_guardrail",
    ),
    "raygents.handoffs": ("Handoff", "HandoffInputData", "handoff"),
    "raygents.hooks": ("RunHooks",),
    "raygents.mcp": ("MCPServerStdio", "MCPServerStreamableHTTP"),
    "raygents.messages": ("Message", "ModelRequest", "ModelResponse", "ToolCall", "Usage"),
    "raygents.models.base": ("Model", "ModelSettings"),
    "raygents.models.openai": ("OpenAIChatModel",),
    "raygents.ratelimit": ("RateLimit",),
    "raygents.result": ("RunResult", "TypedResult"),
    "raygents.runtime.client": ("init", "shutdown"),
    "raygents.runtime.handle": ("RunHandle", "RunStatus"),
    "raygents.runtime.runinfo": ("RunInfo",),
    "raygents.runtime.attach": ("attach", "cancel", "runs"),
    "raygents.runtime.runs": ("resume", "run", "run_streamed", "run_typed", "start"),
    "raygents.sessions": ("MemorySession", "Session", "SQLiteSession", "StoreSession"),
    "raygents.tools": ("RunContext", "Tool", "ToolContext", "ToolResult", "tool"),
    "raygents.tooluse": ("StopAtTools",),
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
    "Approval",
    "ApprovalDecision",
    "ApprovalDecisionsMismatch",
    "BatchHandle",
    "BatchItem",
    "BatchProgress",
    "BatchResult",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointTooLarge",
    "GuardrailResult",
    "Handoff",
    "HandoffInputData",
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
    "OpenAIChatModel",
    "OutputGuardrail",
    "OutputGuardrailTripped",
    "OutputValidationError",
    "PayloadTooLarge",
    "PendingApproval",
    "RateLimit",
    "RaygentsError",
    "RunContext",
    "RunEvent",
    "RunHandle",
    "RunHooks",
    "RunCancelled",
    "RunInfo",
    "RunInterrupted",
    "RunNotFound",
    "RunResult",
    "RunStatus",
    "SQLiteSession",
    "Session",
    "StopAtTools",
    "StoreSession",
    "SuspendedError",
    "Tool",
    "TooManyRuns",
    "ToolCall",
    "ToolContext",
    "ToolNotFound",
    "ToolResult",
    "TypedResult",
    "Usage",
    "UsageLimitExceeded",
    "UserError",
    "attach",
    "cancel",
    "handoff",
    "init",
    "input_guardrail",
    "output_guardrail",
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
]
