"""raygents: LLM agents on Ray.

Each agent is a Ray actor, each tool call a Ray task; runs hand off between actors, fan out to
sub-agents in parallel, and suspend and resume from durable checkpoints. Importing raygents
starts nothing and reads no environment; ``run`` / ``start`` connect to Ray on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raygents.agent import Agent, Handoff, HandoffInputData, StopAtTools, handoff
from raygents.approvals import Approval, ApprovalDecision, PendingApproval
from raygents.errors import (
    SUSPEND_FOR_CHECKPOINT,
    ApprovalDecisionsMismatch,
    CheckpointCorrupt,
    CheckpointError,
    InputGuardrailTripped,
    MaxToolDepthExceeded,
    MaxTurnsExceeded,
    ModelError,
    OutputGuardrailTripped,
    OutputValidationError,
    RaygentsError,
    RunInterrupted,
    RunNotFound,
    SuspendedError,
    ToolNotFound,
    UserError,
)
from raygents.events import RunEvent
from raygents.guardrails import (
    GuardrailResult,
    InputGuardrail,
    OutputGuardrail,
    input_guardrail,
    output_guardrail,
)
from raygents.hooks import RunHooks
from raygents.mcp import MCPServerStdio, MCPServerStreamableHTTP
from raygents.messages import Message, ModelRequest, ModelResponse, ToolCall, Usage
from raygents.models.base import Model, ModelSettings
from raygents.result import RunResult, TypedResult
from raygents.runtime.client import init, shutdown
from raygents.runtime.coordinator import RunInfo
from raygents.runtime.handle import RunHandle, RunStatus
from raygents.runtime.runs import attach, resume, run, run_streamed, run_typed, runs, start
from raygents.sessions import MemorySession, Session, SQLiteSession, StoreSession
from raygents.tools import RunContext, Tool, ToolContext, ToolResult, tool

if TYPE_CHECKING:
    from raygents.models.openai import OpenAIChatModel


def __getattr__(name: str) -> Any:
    # The OpenAI client is imported on first use: Ray workers that only run tools skip it.
    if name == "OpenAIChatModel":
        from raygents.models.openai import OpenAIChatModel

        return OpenAIChatModel
    raise AttributeError(f"module 'raygents' has no attribute {name!r}")


__all__ = [
    "SUSPEND_FOR_CHECKPOINT",
    "Agent",
    "Approval",
    "ApprovalDecision",
    "ApprovalDecisionsMismatch",
    "CheckpointCorrupt",
    "CheckpointError",
    "GuardrailResult",
    "Handoff",
    "HandoffInputData",
    "InputGuardrail",
    "InputGuardrailTripped",
    "MCPServerStdio",
    "MCPServerStreamableHTTP",
    "MaxToolDepthExceeded",
    "MaxTurnsExceeded",
    "MemorySession",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OpenAIChatModel",
    "OutputGuardrail",
    "OutputGuardrailTripped",
    "OutputValidationError",
    "PendingApproval",
    "RaygentsError",
    "RunContext",
    "RunEvent",
    "RunHandle",
    "RunHooks",
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
    "ToolCall",
    "ToolContext",
    "ToolNotFound",
    "ToolResult",
    "TypedResult",
    "Usage",
    "UserError",
    "attach",
    "handoff",
    "init",
    "input_guardrail",
    "output_guardrail",
    "resume",
    "run",
    "run_streamed",
    "run_typed",
    "runs",
    "shutdown",
    "start",
    "tool",
]
