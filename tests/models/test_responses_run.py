"""OpenAIResponsesModel in runs on a real local Ray, against the local Responses API server:
tools run as Ray tasks, deltas stream as ``llm_delta`` events, and reasoning items go back to
the server on later turns, after a handoff and after an approval suspended the run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from responses_server import FakeResponsesServer, RReply, reasoning_item

import raygents as rg
from raygents.core.messages import ToolCall

pytestmark = pytest.mark.timeout(180)


@rg.tool(num_cpus=0)
def add(ctx: rg.ToolContext, a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


@rg.tool(num_cpus=0, needs_approval=True)
def lookup(ctx: rg.ToolContext, key: str) -> str:
    """Look a key up (a person approves each call)."""
    return f"value of {key}"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResponsesServer]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeResponsesServer() as fake:
        yield fake


def _kinds(body: dict[str, Any]) -> list[str]:
    return [item.get("type", item.get("role")) for item in body["input"]]


def _sent_reasoning(body: dict[str, Any]) -> list[str]:
    return [i["encrypted_content"] for i in body["input"] if i.get("type") == "reasoning"]


def test_a_tool_calling_run_streams_and_counts_reasoning_tokens(
    rt: None, server: FakeResponsesServer
) -> None:
    server.push(
        RReply(
            reasoning=(reasoning_item("enc-a"),),
            tool_calls=(ToolCall("c1", "add", '{"a": 2, "b": 3}'),),
            reasoning_tokens=11,
            usage=(20, 15),
        ),
        RReply(text="The sum is 5.", reasoning_tokens=4, cached_tokens=16, usage=(40, 6)),
    )
    model = rg.OpenAIResponsesModel("fake-reasoner", base_url=server.url)
    agent = rg.Agent("responses_adder", instructions="Add.", tools=[add], model=model)
    handle = rg.run_streamed(agent, "2+3?")
    deltas = "".join(e.delta or "" for e in handle.events() if e.type == "llm_delta")
    result = handle.result(timeout_s=60)
    assert result.final_output == "The sum is 5."
    assert deltas == "The sum is 5."
    assert (result.usage.reasoning_tokens, result.usage.cached_input_tokens) == (15, 16)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (60, 21)
    first, second = server.requests
    assert first["instructions"] == "Add." and first["stream"] is True
    assert first["tools"][0]["name"] == "add" and first["tools"][0]["strict"] is True
    assert _kinds(second) == ["user", "reasoning", "function_call", "function_call_output"]
    assert _sent_reasoning(second) == ["enc-a"]
    assert second["input"][3] == {"type": "function_call_output", "call_id": "c1", "output": "5"}


def test_the_next_run_from_to_input_list_sends_the_reasoning_back(
    rt: None, server: FakeResponsesServer
) -> None:
    server.push(
        RReply(reasoning=(reasoning_item("enc-kept"),), text="It is 5."),
        RReply(text="Still 5."),
    )
    model = rg.OpenAIResponsesModel("fake-reasoner", base_url=server.url)
    agent = rg.Agent("responses_chat", instructions="Answer.", model=model)
    first = rg.run(agent, "2+3?")
    items = first.to_input_list()
    assert items[-1]["reasoning"][0]["data"]["encrypted_content"] == "enc-kept"
    second = rg.run(agent, [*items, {"role": "user", "content": "sure?"}])
    assert second.final_output == "Still 5."
    assert _kinds(server.requests[1]) == ["user", "reasoning", "message", "user"]
    assert _sent_reasoning(server.requests[1]) == ["enc-kept"]


class Answer(BaseModel):
    n: int


def test_structured_output_through_a_run(rt: None, server: FakeResponsesServer) -> None:
    server.push('{"n": 7}')
    model = rg.OpenAIResponsesModel("fake-reasoner", base_url=server.url)
    agent = rg.Agent("responses_typed", model=model, output_type=Answer)
    assert rg.run(agent, "seven").final_output == Answer(n=7)
    text_format = server.requests[0]["text"]["format"]
    assert (text_format["type"], text_format["strict"]) == ("json_schema", True)
    assert text_format["schema"]["properties"]["n"]["type"] == "integer"


@pytest.fixture
def file_store(own_raygents: None, rt: None, tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "store"
    rg.shutdown()
    rg.init(namespace=f"responses-{os.urandom(3).hex()}", store=f"file://{root}")
    yield root
    rg.shutdown()


def test_reasoning_survives_a_suspend_resume_and_a_handoff(file_store: Path) -> None:
    def reply(body: dict[str, Any]) -> RReply:
        outputs = [i for i in body["input"] if i.get("type") == "function_call_output"]
        if not outputs:
            call = ToolCall("c1", "lookup", '{"key": "k"}')
            return RReply(reasoning=(reasoning_item("enc-1"),), tool_calls=(call,))
        if len(outputs) == 1:
            call = ToolCall("c2", "transfer_to_responses_expert", "{}")
            return RReply(reasoning=(reasoning_item("enc-2"),), tool_calls=(call,))
        return RReply(reasoning=(reasoning_item("enc-3"),), text="expert answer")

    with FakeResponsesServer(reply) as server:
        _suspend_resume_and_hand_off(server, file_store)


def _suspend_resume_and_hand_off(server: FakeResponsesServer, file_store: Path) -> None:
    model = rg.OpenAIResponsesModel("fake-reasoner", base_url=server.url, reasoning="high")
    expert = rg.Agent("responses_expert", model=model)
    triage = rg.Agent("responses_triage", tools=[lookup], handoffs=[expert], model=model)
    handle = rg.start(triage, "question")
    with pytest.raises(rg.RunInterrupted):
        handle.result(timeout_s=60)
    stored = "".join(
        p.read_bytes().decode("utf-8", "replace") for p in file_store.rglob("*") if p.is_file()
    )
    assert "enc-1" in stored, "the reasoning item is in the run's checkpoint"
    resumed = rg.resume(handle.run_id, agent=triage, approvals={"c1": True})
    result = resumed.result(timeout_s=60)
    assert result.final_output == "expert answer"
    first, after_resume, after_handoff = server.requests
    assert _sent_reasoning(first) == []
    assert _sent_reasoning(after_resume) == ["enc-1"]
    assert _sent_reasoning(after_handoff) == ["enc-1", "enc-2"]
    assert all(body["reasoning"] == {"effort": "high"} for body in server.requests)
    last = result.messages[-1]
    assert last.reasoning and last.reasoning[0].data["encrypted_content"] == "enc-3"
