"""Tool guardrails: checks of a function tool's calls in the agent actor, before the task
starts and after it returns, with the SDK's outcomes (allow, reject content, raise)."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

import raygents as rg
from raygents.testing import ScriptedModel, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@rg.tool_input_guardrail
def no_secrets(data: rg.ToolInputGuardrailData) -> rg.ToolGuardrailFunctionOutput:
    """The SDK's tool guardrails example: refuse arguments that look like secrets."""
    args = json.loads(data.context.tool_arguments or "{}")
    if "sk-" in json.dumps(args):
        return rg.ToolGuardrailFunctionOutput.reject_content(
            "Remove the secret and call again.", output_info={"agent": data.agent.name}
        )
    return rg.ToolGuardrailFunctionOutput.allow()


@rg.tool_input_guardrail(name="no_deletes")
async def forbid_delete(data: rg.ToolInputGuardrailData) -> rg.ToolGuardrailFunctionOutput:
    if "delete" in data.context.tool_arguments:
        return rg.ToolGuardrailFunctionOutput.raise_exception(output_info={"why": "delete"})
    return rg.ToolGuardrailFunctionOutput(output_info=None)


@rg.tool_output_guardrail
def redact_phone(data: rg.ToolOutputGuardrailData) -> rg.ToolGuardrailFunctionOutput:
    if "555-" in str(data.output):
        return rg.ToolGuardrailFunctionOutput.reject_content("[redacted: a phone number]")
    return rg.ToolGuardrailFunctionOutput.allow()


@rg.tool_output_guardrail
def no_passwords(data: rg.ToolOutputGuardrailData) -> rg.ToolGuardrailFunctionOutput:
    if "password" in str(data.output):
        return rg.ToolGuardrailFunctionOutput.raise_exception(output_info=data.context.call_id)
    return rg.ToolGuardrailFunctionOutput.allow()


@rg.tool(
    num_cpus=0,
    tool_input_guardrails=[no_secrets, forbid_delete],
    tool_output_guardrails=[redact_phone, no_passwords],
)
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def _run(name: str, arguments: dict[str, Any], tool: Any = lookup) -> rg.RunResult:
    agent = rg.Agent(
        name, tools=[tool], model=ScriptedModel([calls((tool.name, arguments)), text("done")])
    )
    return rg.run(agent, "go")


def _tool_text(result: rg.RunResult) -> str:
    return next(m.text for m in result.messages if m.role == "tool")


def test_allowed_calls_run_and_keep_their_result() -> None:
    assert _tool_text(_run("tg_allow", {"query": "weather"})) == "found weather"


def test_rejected_input_does_not_run_the_call_and_the_model_gets_the_message() -> None:
    agent = rg.Agent(
        "tg_reject_in",
        tools=[lookup],
        model=ScriptedModel([calls(("lookup", {"query": "sk-123"})), text("done")]),
    )
    handle = rg.start(agent, "go")
    events = list(handle.events())
    result = handle.result(timeout_s=60)
    assert _tool_text(result) == "Remove the secret and call again."
    assert result.final_output == "done", "the run goes on"
    assert not [e for e in events if e.type == "tool_start"], "the call never started"


def test_raise_exception_on_input_fails_the_run() -> None:
    with pytest.raises(rg.ToolInputGuardrailTripped) as info:
        _run("tg_raise_in", {"query": "delete everything"})
    error = info.value
    assert (error.guardrail, error.tool_name, error.output_info) == (
        "no_deletes",
        "lookup",
        {"why": "delete"},
    )
    assert error.call_id and error.run_id
    again = pickle.loads(pickle.dumps(error))
    assert again.guardrail == "no_deletes" and again.output_info == {"why": "delete"}


def test_rejected_output_is_replaced() -> None:
    assert _tool_text(_run("tg_reject_out", {"query": "555-1234"})) == (
        "[redacted: a phone number]"
    )


def test_raise_exception_on_output_fails_the_run() -> None:
    with pytest.raises(rg.ToolOutputGuardrailTripped) as info:
        _run("tg_raise_out", {"query": "the password"})
    assert info.value.guardrail == "no_passwords" and info.value.output_info == info.value.call_id


@rg.tool_input_guardrail
def broken(data: rg.ToolInputGuardrailData) -> rg.ToolGuardrailFunctionOutput:
    raise RuntimeError("guardrail bug")


@rg.tool(num_cpus=0, tool_input_guardrails=[broken])
def guarded(query: str) -> str:
    """Guarded by a broken guardrail."""
    return query


def test_a_guardrail_that_raises_fails_the_run_naming_it() -> None:
    with pytest.raises(
        rg.RaygentsError, match=r"guardrail 'broken' of tool 'guarded' raised"
    ) as info:
        _run("tg_broken", {"query": "x"}, guarded)
    assert "RuntimeError: guardrail bug" in str(info.value)


@rg.tool_output_guardrail
def returns_a_bool(data: rg.ToolOutputGuardrailData) -> Any:
    return True


@rg.tool(num_cpus=0, tool_output_guardrails=[returns_a_bool])
def sloppy(query: str) -> str:
    """Guarded by a guardrail that returns the wrong thing."""
    return query


def test_a_guardrail_that_returns_something_else_fails_the_run() -> None:
    with pytest.raises(rg.UserError, match="must return a ToolGuardrailFunctionOutput"):
        _run("tg_sloppy", {"query": "x"}, sloppy)


def test_guardrail_lists_are_checked_when_the_tool_is_made() -> None:
    def plain(data: Any) -> Any:
        return None

    with pytest.raises(rg.UserError, match=r"tool_input_guardrails\[0\].*@tool_input_guardrail"):
        rg.tool(tool_input_guardrails=[plain])(lambda q: q)
    with pytest.raises(rg.UserError, match=r"tool_input_guardrails\[0\].*ToolInputGuardrail"):
        rg.tool(tool_input_guardrails=[redact_phone])(lambda q: q)
    with pytest.raises(rg.UserError, match="must be a list"):
        rg.tool(tool_output_guardrails=redact_phone)(lambda q: q)  # type: ignore[arg-type]
    assert lookup.tool_input_guardrails == (no_secrets, forbid_delete)
    assert forbid_delete.get_name() == "no_deletes" and no_secrets.get_name() == "no_secrets"
