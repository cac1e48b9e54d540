"""B4: payloads over their caps become a typed error or an error tool message before anything
is serialised into Ray or the store; at or below the caps they pass unchanged."""

from __future__ import annotations

import resource
from typing import Any

import pytest

import raygents as rg
from raygents.agents.tools import FunctionTool
from raygents.core.envelope import RunState
from raygents.core.messages import Message, ModelRequest, ModelResponse, ToolCall
from raygents.errors import MAX_PAYLOAD_BYTES, PayloadTooLarge
from raygents.runtime.actor.modelcall import call_model
from raygents.runtime.link import wire
from raygents.runtime.worker.tasks import remote_tool, run_tool, task_body
from raygents.runtime.worker.worker import TaskReport
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

RESULT_CAP = MAX_PAYLOAD_BYTES["tool result"]
OUTPUT_CAP = MAX_PAYLOAD_BYTES["model output"]
ARGS_CAP = MAX_PAYLOAD_BYTES["tool arguments"]
CTX = rg.ToolContext("run-1", "call-1", "blob", "agent")
SIZES = {"cap-1": -1, "cap": 0}


@rg.tool(num_cpus=0)
def blob(n: int) -> str:
    """Return ``n`` bytes of text."""
    return "x" * n


@rg.tool(remote=False)
def local_blob(n: int) -> str:
    """Return ``n`` bytes of text, in the agent actor."""
    return "x" * n


class BlobTool(rg.Tool):
    """A custom tool whose ``execute`` returns ``n`` bytes (non-ASCII: two bytes a character)."""

    name = "blob_tool"
    description = "Return n bytes."
    parameters: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}  # noqa: RUF012

    async def execute(self, ctx: rg.ToolContext, arguments: str) -> rg.ToolResult:
        import json

        n = json.loads(arguments)["n"]
        return rg.ToolResult("é" * (n // 2) + "x" * (n % 2))


def run_body(tool: rg.Tool, n: int) -> TaskReport:
    payload: Any = f'{{"n": {n}}}'
    if isinstance(tool, FunctionTool):
        payload = tool.parse_arguments(payload)
    report: TaskReport = wire.loads(task_body(tool)(wire.dumps((CTX, payload))))
    return report


# -- tool results, in the tool's task -----------------------------------------------------------


@pytest.mark.parametrize("tool", [blob, BlobTool()], ids=["function", "custom"])
@pytest.mark.parametrize("extra", SIZES.values(), ids=SIZES.keys())
def test_a_tool_result_at_or_below_the_cap_is_returned(tool: rg.Tool, extra: int) -> None:
    report = run_body(tool, RESULT_CAP + extra)
    assert not report.is_error
    assert PayloadTooLarge.size_of(report.content) == RESULT_CAP + extra


@pytest.mark.parametrize("tool", [blob, BlobTool()], ids=["function", "custom"])
@pytest.mark.parametrize("times", [1, 10], ids=["cap+2", "10x cap"])
def test_a_tool_result_over_the_cap_becomes_an_error_message(tool: rg.Tool, times: int) -> None:
    size = RESULT_CAP * times + (2 if times == 1 else 0)
    report = run_body(tool, size)
    assert report.is_error and len(report.content) < 1000
    assert f'cannot execute tool "{tool.name}"' in report.content
    assert f"tool result is {size} bytes, over the limit of {RESULT_CAP} bytes" in report.content
    assert len(wire.dumps(report)) < 2000  # what the task hands to Ray


@pytest.mark.parametrize("extra", [0, 1, RESULT_CAP * 9], ids=["cap", "cap+1", "10x cap"])
async def test_an_in_actor_tool_result_is_capped_too(extra: int) -> None:
    out = await run_tool(local_blob, CTX, f'{{"n": {RESULT_CAP + extra}}}', {})
    assert out.result.is_error is (extra > 0)
    if extra:
        assert "over the limit of" in out.result.content and len(out.result.content) < 1000
    else:
        assert len(out.result.content) == RESULT_CAP


# -- model output and tool arguments, as the answer reaches the agent actor --------------------


def state() -> RunState:
    return RunState(
        run_id="r1", agent_name="capped", messages=(Message("user", "go"),), input_len=1
    )


async def answer(response: ModelResponse, stream: bool = False) -> ModelResponse:
    model = FunctionModel(lambda request: response)
    request = ModelRequest(agent_name="capped", messages=state().messages)
    return await call_model(model, "capped", request, (lambda delta: None) if stream else None)


@pytest.mark.parametrize("stream", [False, True], ids=["respond", "stream"])
@pytest.mark.parametrize("extra", SIZES.values(), ids=SIZES.keys())
async def test_model_output_at_or_below_the_cap_is_accepted(stream: bool, extra: int) -> None:
    response = await answer(text("y" * (OUTPUT_CAP + extra)), stream)
    assert len(response.message.text) == OUTPUT_CAP + extra


@pytest.mark.parametrize("stream", [False, True], ids=["respond", "stream"])
@pytest.mark.parametrize("times", [1, 10], ids=["cap+1", "10x cap"])
async def test_model_output_over_the_cap_is_payload_too_large(stream: bool, times: int) -> None:
    size = OUTPUT_CAP * times + (1 if times == 1 else 0)
    with pytest.raises(PayloadTooLarge) as caught:
        await answer(text("y" * size), stream)
    error = caught.value
    assert (error.kind, error.size, error.limit) == ("model output", size, OUTPUT_CAP)
    assert "capped" in str(error) and len(str(error)) < 1000


def args_of(n: int) -> str:
    """A JSON object text of exactly ``n`` bytes."""
    return '{"s": "' + "z" * (n - 9) + '"}'


@pytest.mark.parametrize("extra", SIZES.values(), ids=SIZES.keys())
async def test_tool_arguments_at_or_below_the_cap_are_accepted(extra: int) -> None:
    response = await answer(calls(ToolCall("c1", "blob", args_of(ARGS_CAP + extra))))
    assert len(response.message.tool_calls[0].arguments) == ARGS_CAP + extra


@pytest.mark.parametrize("times", [1, 10], ids=["cap+1", "10x cap"])
async def test_tool_arguments_over_the_cap_are_payload_too_large(times: int) -> None:
    size = ARGS_CAP * times + (1 if times == 1 else 0)
    big = ToolCall("c2", "blob", args_of(size))
    with pytest.raises(PayloadTooLarge) as caught:
        await answer(calls(ToolCall("c1", "blob", "{}"), big))
    error = caught.value
    assert (error.kind, error.size, error.limit) == ("tool arguments", size, ARGS_CAP)
    assert "'blob'" in str(error) and "c2" in str(error)


# -- a tool returning 200 MB, on Ray ------------------------------------------------------------

HUGE = 200 * 1024 * 1024


@pytest.mark.usefixtures("rt")
def test_a_200_mb_tool_result_never_reaches_the_object_store() -> None:
    import ray

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    ref = remote_tool(blob).remote(wire.dumps((CTX, blob.parse_arguments(f'{{"n": {HUGE}}}'))))
    returned = ray.get(ref, timeout=120)
    assert len(returned) < 2000  # the task's return value: all it put in the object store
    report: TaskReport = wire.loads(returned)
    assert report.is_error and f"{HUGE} bytes, over the limit" in report.content

    model = ScriptedModel([calls(call("blob", {"n": HUGE})), text("done")])
    agent = rg.Agent("hoarder", model=model, tools=[blob])
    result = rg.run(agent, "fetch it all", timeout_s=120)
    assert result.final_output == "done"
    [tool_message] = [m for m in result.messages if m.role == "tool"]
    assert "over the limit of" in tool_message.text and len(tool_message.text) < 1000
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 100, f"the driver grew by {grown_mib:.0f} MiB"


def test_each_cap_is_below_the_checkpoint_cap() -> None:
    assert max(OUTPUT_CAP, ARGS_CAP, RESULT_CAP) < MAX_PAYLOAD_BYTES["checkpoint"]


# -- run input, at start --------------------------------------------------------------------------

INPUT_CAP = MAX_PAYLOAD_BYTES["run input"]


class _Started(Exception):
    """Raised where ``start`` would reach the runtime: the input was accepted."""


@pytest.fixture
def no_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise _Started

    monkeypatch.setattr("raygents.runtime.driver.runs.current", refuse)


def quiet_agent() -> rg.Agent:
    return rg.Agent("quiet", model=ScriptedModel([text("x")]))


@pytest.mark.usefixtures("no_runtime")
def test_run_input_at_the_cap_is_accepted() -> None:
    half = INPUT_CAP // 2
    with pytest.raises(_Started):
        rg.start(quiet_agent(), [{"role": "user", "content": "x" * half}] * 2)


@pytest.mark.usefixtures("no_runtime")
@pytest.mark.parametrize("times", [1, 10], ids=["cap+1", "10x cap"])
def test_run_input_over_the_cap_is_refused_before_anything_starts(times: int) -> None:
    size = INPUT_CAP * times + (1 if times == 1 else 0)
    with pytest.raises(PayloadTooLarge) as caught:
        rg.start(quiet_agent(), "x" * size)
    assert (caught.value.kind, caught.value.size) == ("run input", size)
