"""OpenAIResponsesModel over real HTTP against the local FakeResponsesServer: requests, answers,
streaming, usage, reasoning items carried back, retries and errors."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from typing import Any

import pytest
from responses_server import FakeResponsesServer, RReply, reasoning_item

from raygents.core.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningItem,
    ToolCall,
    ToolSpec,
    Usage,
)
from raygents.errors import ModelError, UserError
from raygents.models.base import ModelSettings
from raygents.models.responses import REASONING_API, OpenAIResponsesModel

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
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResponsesServer]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeResponsesServer() as fake:
        yield fake


def model_for(server: FakeResponsesServer, **kwargs: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("fake-model", base_url=server.url, **kwargs)


def request(text: str = "hi", **kwargs: Any) -> ModelRequest:
    return ModelRequest(agent_name="a", messages=(Message("user", text),), **kwargs)


async def stream_all(
    model: OpenAIResponsesModel, req: ModelRequest
) -> tuple[list[str], ModelResponse]:
    deltas: list[str] = []
    final: list[ModelResponse] = []
    async for item in model.stream(req):
        (deltas if isinstance(item, str) else final).append(item)  # type: ignore[arg-type]
    assert len(final) == 1
    return deltas, final[0]


async def test_text_answer_request_shape_and_usage(server: FakeResponsesServer) -> None:
    server.push(RReply(text="Hello!", usage=(7, 30), cached_tokens=4, reasoning_tokens=20))
    model = model_for(server, reasoning="high")
    response = await model.respond(request(system="Be nice."))
    assert response == ModelResponse(
        Message("assistant", "Hello!"),
        "stop",
        Usage(7, 30, cached_input_tokens=4, reasoning_tokens=20),
    )
    (body,) = server.requests
    assert body["model"] == "fake-model"
    assert body["instructions"] == "Be nice."
    assert body["input"] == [{"role": "user", "content": "hi"}]
    assert body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["reasoning"] == {"effort": "high"}
    assert server.headers[0]["authorization"] == "Bearer not-needed"
    await model.aclose()


async def test_tool_calls_then_their_outputs(server: FakeResponsesServer) -> None:
    server.push([ToolCall("c1", "add", '{"a": 1, "b": 2}')], "The sum is 3.")
    model = model_for(server)
    settings = ModelSettings(
        tool_choice={"type": "function", "function": {"name": "add"}},
        parallel_tool_calls=False,
        temperature=0.5,
        max_tokens=99,
    ).to_data()
    first = await model.respond(request("1+2?", tools=(ADD,), settings=settings))
    assert first.finish_reason == "tool_calls"
    assert first.message.tool_calls == (ToolCall("c1", "add", '{"a": 1, "b": 2}'),)
    assert first.message.content is None
    body = server.requests[0]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "add",
            "description": "Add two numbers.",
            "parameters": ADD.parameters,
            "strict": True,
        }
    ]
    assert body["tool_choice"] == {"type": "function", "name": "add"}
    assert (body["parallel_tool_calls"], body["temperature"], body["max_output_tokens"]) == (
        False,
        0.5,
        99,
    )
    history = (Message("user", "1+2?"), first.message, Message("tool", "3", tool_call_id="c1"))
    second = await model.respond(ModelRequest(agent_name="a", messages=history, tools=(ADD,)))
    assert second.message.content == "The sum is 3."
    assert server.requests[1]["input"] == [
        {"role": "user", "content": "1+2?"},
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}'},
        {"type": "function_call_output", "call_id": "c1", "output": "3"},
    ]
    await model.aclose()


async def test_structured_output_is_a_strict_json_schema_text_format(
    server: FakeResponsesServer,
) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    server.push('{"n": 3}')
    model = model_for(server)
    response = await model.respond(request(response_format={"name": "Out", "schema": schema}))
    assert json.loads(response.message.text) == {"n": 3}
    assert server.requests[0]["text"] == {
        "format": {"type": "json_schema", "name": "Out", "schema": schema, "strict": True}
    }
    with pytest.raises(UserError, match="'name' and 'schema'"):
        await model.respond(request(response_format={"schema": schema}))
    await model.aclose()


async def test_reasoning_items_are_kept_and_sent_back_before_their_calls(
    server: FakeResponsesServer,
) -> None:
    first_item = reasoning_item("enc-1", summary="thinking about sums")
    server.push(
        RReply(reasoning=(first_item,), tool_calls=(ToolCall("c1", "add", "{}"),)),
        RReply(reasoning=(reasoning_item("enc-2"),), text="3"),
        "done",
    )
    model = model_for(server)
    first = await model.respond(request("1+2?", tools=(ADD,)))
    follows = {"raygents:next": {"type": "function_call", "id": "fc_c1", "call_id": "c1"}}
    assert first.message.reasoning == (
        ReasoningItem(api=REASONING_API, data={**first_item, **follows}),
    )
    history = (Message("user", "1+2?"), first.message, Message("tool", "3", tool_call_id="c1"))
    second = await model.respond(ModelRequest(agent_name="a", messages=history, tools=(ADD,)))
    sent_back = {
        "type": "reasoning",
        "id": "rs_enc-1",
        "summary": [{"type": "summary_text", "text": "thinking about sums"}],
        "encrypted_content": "enc-1",
    }
    assert server.requests[1]["input"][1] == sent_back
    assert server.requests[1]["input"][2] == {  # right after its reasoning, with its id
        "type": "function_call",
        "call_id": "c1",
        "name": "add",
        "arguments": "{}",
        "id": "fc_c1",
    }
    # a later turn sends every reasoning item of the history, each before its own answer
    history = (*history, second.message, Message("user", "again"))
    await model.respond(ModelRequest(agent_name="a", messages=history))
    kinds = [i.get("type", i.get("role")) for i in server.requests[2]["input"]]
    assert kinds == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
        "user",
    ]
    answer = server.requests[2]["input"][5]
    assert (answer["id"], answer["status"], answer["content"][0]["text"]) == (
        "msg_1",
        "completed",
        "3",
    )
    await model.aclose()


async def test_reasoning_of_other_apis_or_without_encrypted_content_is_not_sent(
    server: FakeResponsesServer,
) -> None:
    server.push("ok")
    foreign = ReasoningItem(api="other.api", data={"thought": "x"})
    unencrypted = ReasoningItem(api=REASONING_API, data={"type": "reasoning", "id": "rs_1"})
    history = (
        Message("user", "q"),
        Message("assistant", "a", reasoning=(foreign, unencrypted)),
        Message("user", "q2"),
    )
    model = model_for(server)
    await model.respond(ModelRequest(agent_name="a", messages=history))
    assert server.requests[0]["input"] == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "q2"},
    ]
    await model.aclose()


def test_chat_completions_messages_leave_reasoning_out() -> None:
    item = ReasoningItem(api=REASONING_API, data=reasoning_item("enc"))
    message = Message("assistant", "a", reasoning=(item,))
    assert message.to_openai() == {"role": "assistant", "content": "a"}
    assert Message.model_validate_json(message.model_dump_json()) == message


async def test_stream_text_deltas_then_the_whole_response(server: FakeResponsesServer) -> None:
    server.push(
        RReply(text="Streaming works.", reasoning=(reasoning_item("enc"),), reasoning_tokens=9)
    )
    deltas, response = await stream_all(model_for(server), request())
    assert len(deltas) > 1
    assert "".join(deltas) == "Streaming works."
    assert response.message.text == "Streaming works."
    assert response.message.reasoning[0].data["encrypted_content"] == "enc"
    assert response.usage == Usage(10, 5, reasoning_tokens=9)
    assert server.requests[0]["stream"] is True


async def test_stream_of_tool_calls(server: FakeResponsesServer) -> None:
    server.push([ToolCall("c1", "add", '{"a": 1, "b": 2}')])
    deltas, response = await stream_all(model_for(server), request(tools=(ADD,)))
    assert deltas == []
    assert response.finish_reason == "tool_calls"
    assert response.message.tool_calls == (ToolCall("c1", "add", '{"a": 1, "b": 2}'),)


@pytest.mark.parametrize(
    ("reason", "expected"), [("max_output_tokens", "length"), ("content_filter", "content_filter")]
)
async def test_incomplete_answers(server: FakeResponsesServer, reason: str, expected: str) -> None:
    server.push(RReply(text="cut", response_status="incomplete", incomplete_reason=reason))
    server.push(RReply(text="cut", response_status="incomplete", incomplete_reason=reason))
    model = model_for(server)
    assert (await model.respond(request())).finish_reason == expected
    assert (await stream_all(model, request()))[1].finish_reason == expected


async def test_refusal_is_a_model_error(server: FakeResponsesServer) -> None:
    refusal = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "I cannot help with that."}],
    }
    server.push(RReply(output=[refusal]))
    with pytest.raises(ModelError, match="refused to answer: I cannot help") as info:
        await model_for(server).respond(request())
    assert not info.value.retryable


async def test_429_and_5xx_are_retried(server: FakeResponsesServer) -> None:
    server.push(
        RReply.failure(429, "slow down", retry_after_ms="1"),
        RReply.failure(503, "warming up", retry_after_ms="1"),
        "ready",
    )
    model = model_for(server, max_retries=2)
    assert (await model.respond(request())).message.text == "ready"
    assert len(server.requests) == 3
    assert [h["x-stainless-retry-count"] for h in server.headers] == ["0", "1", "2"]


async def test_errors_after_retries_are_translated(server: FakeResponsesServer) -> None:
    server.push(*[RReply.failure(500, "boom", retry_after_ms="1")] * 2)
    with pytest.raises(ModelError, match=r"HTTP 500 for model 'fake-model': boom") as info:
        await model_for(server, max_retries=1).respond(request())
    assert (info.value.status_code, info.value.retryable) == (500, True)
    assert "retried up to 1 times" in str(info.value)
    server.push(RReply.failure(404, "no such model"))
    with pytest.raises(ModelError, match="'fake-model' was not found") as info:
        await model_for(server).respond(request())
    assert (info.value.status_code, info.value.retryable) == (404, False)


async def test_stream_errors(server: FakeResponsesServer) -> None:
    error = b'event: error\ndata: {"type": "error", "code": "server_error", "message": "oops"}\n\n'
    server.push(RReply(raw=error))
    with pytest.raises(
        ModelError, match="sent an error for model 'fake-model': server_error: oops"
    ):
        await stream_all(model_for(server), request())
    cut = b'event: response.created\ndata: {"type": "response.created", "response": {}}\n\n'
    server.push(RReply(raw=cut))
    with pytest.raises(ModelError, match="without its final event") as info:
        await stream_all(model_for(server), request())
    assert info.value.retryable


async def test_failed_response_is_a_model_error(server: FakeResponsesServer) -> None:
    failed = {
        "type": "response.failed",
        "response": {"status": "failed", "error": {"code": "server_error", "message": "down"}},
    }
    server.push(RReply(raw=f"data: {json.dumps(failed)}\n\n".encode()))
    with pytest.raises(ModelError, match="server_error: down"):
        await stream_all(model_for(server), request())


async def test_credentials_never_shown(server: FakeResponsesServer) -> None:
    key = "sk-secret-key-123456"
    url = server.url.replace("http://", "http://user:pa55word@") + "?token=t0psecret"
    model = OpenAIResponsesModel("fake-model", base_url=url, api_key=key)
    server.push(RReply.failure(400, f"bad key {key} at {url}"), RReply.failure(401, key))
    for _ in range(2):
        with pytest.raises(ModelError) as info:
            await model.respond(request())
        text = f"{info.value!s}{info.value!r}{model!r}"
        for secret in (key, "pa55word", "t0psecret"):
            assert secret not in text
    assert len(server.requests) == 2  # (the errors came from the server, not the client)


async def test_pickled_model_reaches_the_server(server: FakeResponsesServer) -> None:
    server.push("one", "two")
    model = model_for(server, reasoning={"effort": "low", "summary": "auto"})
    await model.respond(request())
    copy = pickle.loads(pickle.dumps(model))
    assert (await copy.respond(request())).message.text == "two"
    assert server.requests[1]["reasoning"] == {"effort": "low", "summary": "auto"}
    await model.aclose()
    await copy.aclose()


async def test_settings_the_responses_api_lacks_are_user_errors(
    server: FakeResponsesServer,
) -> None:
    settings = ModelSettings(frequency_penalty=0.5).to_data()
    with pytest.raises(UserError, match="frequency_penalty is not a setting of the Responses"):
        await model_for(server).respond(request(settings=settings))
    assert server.requests == []


@pytest.mark.parametrize(
    "kwargs",
    [{"reasoning": 3}, {"reasoning": ""}, {"max_retries": -1}, {"timeout_s": 0}, {"base_url": 1}],
)
def test_invalid_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UserError):
        OpenAIResponsesModel("m", **kwargs)


def test_repr() -> None:
    model = OpenAIResponsesModel("gpt-5", base_url="http://h/v1", api_key="sk-1234567890")
    assert repr(model) == (
        "OpenAIResponsesModel('gpt-5', base_url='http://h/v1', max_retries=3, timeout_s=60.0, "
        "reasoning=None)"
    )


async def test_missing_key_and_base_url_is_a_user_error_on_first_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    model = OpenAIResponsesModel("gpt-5")
    with pytest.raises(UserError, match=r"OpenAIResponsesModel\('gpt-5'\) has no API key"):
        await model.respond(request())


def test_a_model_name_chooses_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    from raygents.models.base import resolve_model
    from raygents.models.openai import OpenAIChatModel

    monkeypatch.delenv("RAYGENTS_MODEL", raising=False)
    chosen = [resolve_model(n) for n in ("gpt-4o", "chat:gpt-4o", "responses:gpt-5")]
    assert [(type(m), m.model) for m in chosen] == [  # type: ignore[attr-defined]
        (OpenAIChatModel, "gpt-4o"),
        (OpenAIChatModel, "gpt-4o"),
        (OpenAIResponsesModel, "gpt-5"),
    ]
    monkeypatch.setenv("RAYGENTS_MODEL", "responses:o4-mini")
    default = resolve_model(None)
    assert isinstance(default, OpenAIResponsesModel) and default.model == "o4-mini"
    with pytest.raises(UserError, match="no model after 'responses:'"):
        resolve_model("responses:")


def test_reasoning_items_are_kept_by_a_session(tmp_path: Any) -> None:
    from raygents.sessions import SQLiteSession

    item = ReasoningItem(api=REASONING_API, data=reasoning_item("enc-s", summary="why"))
    history = [Message("user", "q"), Message("assistant", "a", reasoning=(item,))]
    session = SQLiteSession(tmp_path / "s.db")
    session.save("t1", history)
    assert session.load("t1") == history


async def test_settings_extra_overrides_the_request(server: FakeResponsesServer) -> None:
    """For a server without encrypted reasoning: ``extra`` replaces what raygents sends."""
    server.push("ok")
    settings = ModelSettings(extra={"include": [], "service_tier": "flex"}).to_data()
    model = model_for(server)
    await model.respond(request(settings=settings))
    body = server.requests[0]
    assert (body["include"], body["service_tier"], body["store"]) == ([], "flex", False)
    await model.aclose()


async def test_interleaved_reasoning_goes_back_in_output_order(
    server: FakeResponsesServer,
) -> None:
    def fc(call_id: str) -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": f"fc_{call_id}",
            "call_id": call_id,
            "name": "add",
            "arguments": "{}",
        }

    output = [reasoning_item("r1"), fc("c1"), reasoning_item("r2"), fc("c2")]
    server.push(RReply(output=output), "ok")
    model = model_for(server)
    first = await model.respond(request(tools=(ADD,)))
    # a call id the run renamed (unique_call_ids) is sent without the provider's id
    renamed = first.message.model_copy(
        update={"tool_calls": (first.message.tool_calls[0], ToolCall("c2~1", "add", "{}"))}
    )
    history = (
        Message("user", "hi"),
        renamed,
        Message("tool", "1", tool_call_id="c1"),
        Message("tool", "2", tool_call_id="c2~1"),
    )
    await model.respond(ModelRequest(agent_name="a", messages=history, tools=(ADD,)))
    sent = server.requests[1]["input"]
    assert [(i.get("type"), i.get("id"), i.get("call_id")) for i in sent[1:5]] == [
        ("reasoning", "rs_r1", None),
        ("function_call", "fc_c1", "c1"),
        ("reasoning", "rs_r2", None),
        ("function_call", None, "c2~1"),
    ]
    await model.aclose()
