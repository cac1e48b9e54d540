"""OpenAIChatModel end to end over real HTTP against the local FakeOpenAIServer."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai_server import FakeOpenAIServer, Reply

from raygents.core.messages import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec, Usage
from raygents.errors import ModelError
from raygents.models.openai import OpenAIChatModel

ADD = ToolSpec(
    name="add",
    description="Add two numbers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeOpenAIServer() as fake:
        yield fake


def model_for(server: FakeOpenAIServer, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel("fake-model", base_url=server.url, **kwargs)


def request(text: str = "hi", **kwargs: Any) -> ModelRequest:
    return ModelRequest(agent_name="a", messages=(Message("user", text),), **kwargs)


async def stream_all(model: OpenAIChatModel, req: ModelRequest) -> tuple[list[str], ModelResponse]:
    deltas: list[str] = []
    final: list[ModelResponse] = []
    async for item in model.stream(req):
        if isinstance(item, str):
            deltas.append(item)
        else:
            final.append(item)
    assert len(final) == 1
    return deltas, final[0]


async def test_respond_text(server: FakeOpenAIServer) -> None:
    server.push(Reply(text="Hello there!", usage=(7, 3)))
    model = model_for(server)
    response = await model.respond(request(system="Be nice."))
    assert response == ModelResponse(Message("assistant", "Hello there!"), "stop", Usage(7, 3))
    (body,) = server.requests
    assert body["model"] == "fake-model"
    assert body["messages"] == [
        {"role": "system", "content": "Be nice."},
        {"role": "user", "content": "hi"},
    ]
    assert server.headers[0]["authorization"] == "Bearer not-needed"
    await model.aclose()


async def test_respond_tool_calls_then_text(server: FakeOpenAIServer) -> None:
    server.push(
        [{"id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}],
        "The sum is 3.",
    )
    model = model_for(server)
    first = await model.respond(request("1+2?", tools=(ADD,)))
    assert first.finish_reason == "tool_calls"
    assert first.message.tool_calls == (ToolCall("c1", "add", '{"a": 1, "b": 2}'),)
    history = (
        Message("user", "1+2?"),
        first.message,
        Message("tool", "3", tool_call_id="c1"),
    )
    second = await model.respond(ModelRequest(agent_name="a", messages=history, tools=(ADD,)))
    assert second.message.content == "The sum is 3."
    assert server.requests[0]["tools"][0]["function"]["strict"] is True
    assert server.requests[1]["messages"][-1] == {
        "role": "tool",
        "content": "3",
        "tool_call_id": "c1",
    }
    await model.aclose()


async def test_stream_text(server: FakeOpenAIServer) -> None:
    server.push(Reply(text="Streaming works fine.", usage=(4, 6)))
    deltas, response = await stream_all(model_for(server), request())
    assert len(deltas) > 1
    assert "".join(deltas) == "Streaming works fine."
    assert response == ModelResponse(
        Message("assistant", "Streaming works fine."), "stop", Usage(4, 6)
    )
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}


async def test_stream_tool_calls(server: FakeOpenAIServer) -> None:
    calls = [
        ToolCall("c1", "add", json.dumps({"a": 10, "b": 20})),
        ToolCall("c2", "add", json.dumps({"a": 3, "b": 4})),
    ]
    server.push(calls)
    deltas, response = await stream_all(model_for(server), request(tools=(ADD,)))
    assert deltas == []
    assert response.finish_reason == "tool_calls"
    assert response.message.tool_calls == tuple(calls)
    assert response.usage == Usage(10, 5)


async def test_http_errors_are_model_errors(server: FakeOpenAIServer) -> None:
    server.push(
        Reply.failure(503, "warming up", retry_after_ms="1"),
        "ready",
        Reply.failure(404, "no such model"),
    )
    model = model_for(server, max_retries=2)
    assert (await model.respond(request())).message.content == "ready"
    with pytest.raises(ModelError, match="'fake-model' was not found") as info:
        await model.respond(request())
    assert (info.value.status_code, info.value.retryable) == (404, False)
    assert len(server.requests) == 3


async def test_pickled_model_after_use_reaches_the_server(server: FakeOpenAIServer) -> None:
    server.push("one", "two")
    model = model_for(server)
    await model.respond(request())
    copy = pickle.loads(pickle.dumps(model))
    assert (await copy.respond(request())).message.content == "two"
    await model.aclose()
    await copy.aclose()


async def test_scripted_function_and_running_out(server: FakeOpenAIServer) -> None:
    with FakeOpenAIServer(lambda body: f"echo {body['messages'][-1]['content']}") as echo:
        model = OpenAIChatModel("m", base_url=echo.url)
        assert (await model.respond(request("ping"))).message.content == "echo ping"
        await model.aclose()
    with pytest.raises(ModelError, match="no scripted reply left") as info:
        await model_for(server, max_retries=0).respond(request())
    assert info.value.status_code == 500


def test_server_answers_plain_http(server: FakeOpenAIServer) -> None:
    server.push("plain")
    reply = httpx.post(
        f"{server.url}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] == "plain"
    assert httpx.post(f"{server.url}/nope", json={}).status_code == 404
