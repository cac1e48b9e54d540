"""OpenAIChatModel through an in-process httpx2 mock transport: no sockets, no real provider."""

from __future__ import annotations

import asyncio
import json
import pickle
import traceback
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from raygents.core.messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelSettingsData,
    ToolCall,
    ToolSpec,
    Usage,
)
from raygents.errors import ModelError, UserError
from raygents.models.openai import OpenAIChatModel

KEY = "sk-test-0123456789abcdef"
BASE = "http://mock.invalid/v1"
Handler = Callable[[httpx2.Request], httpx2.Response]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


class Server:
    """Scripted responses for the mock transport; records every request."""

    def __init__(self, *responses: httpx2.Response | Exception) -> None:
        self.responses = list(responses)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        if not self.responses:
            raise AssertionError("no scripted response left")
        item = self.responses.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.requests]


def make_model(server: Handler, **kwargs: Any) -> OpenAIChatModel:
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(server))
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("base_url", BASE)
    return OpenAIChatModel("gpt-test", http_client=client, **kwargs)


def completion(
    content: str | None = "Hello!",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = "stop",
    usage: dict[str, int] | None = None,
) -> httpx2.Response:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = usage
    return httpx2.Response(200, json=body)


def error(status: int, message: str = "boom", **headers: str) -> httpx2.Response:
    return httpx2.Response(
        status,
        json={"error": {"message": message, "type": "x", "code": None}},
        headers={"retry-after-ms": "1", **headers},
    )


def sse(*events: dict[str, Any] | str, done: bool = True) -> httpx2.Response:
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    if done:
        lines.append("data: [DONE]\n\n")
    return httpx2.Response(
        200, content="".join(lines).encode(), headers={"content-type": "text/event-stream"}
    )


def chunk(
    delta: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    choices = (
        [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    )
    out: dict[str, Any] = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "gpt-test",
        "choices": choices,
    }
    if usage is not None:
        out["usage"] = usage
    return out


def fn_call(id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def request(**kwargs: Any) -> ModelRequest:
    kwargs.setdefault("messages", (Message("user", "hi"),))
    return ModelRequest(agent_name="a", **kwargs)


WEATHER = ToolSpec(
    name="weather",
    description="Weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)


async def collect(model: OpenAIChatModel, req: ModelRequest) -> tuple[list[str], ModelResponse]:
    deltas: list[str] = []
    final: list[ModelResponse] = []
    async for item in model.stream(req):
        if isinstance(item, str):
            assert not final, "text after the final response"
            deltas.append(item)
        else:
            final.append(item)
    assert len(final) == 1
    return deltas, final[0]


# -- request shape -------------------------------------------------------------------------


async def test_request_body_has_system_messages_tools_format_and_settings() -> None:
    server = Server(completion())
    model = make_model(server)
    history = (
        Message("user", "weather in Paris?"),
        Message("assistant", None, tool_calls=[ToolCall("c1", "weather", '{"city":"Paris"}')]),
        Message("tool", "sunny", tool_call_id="c1"),
    )
    settings = ModelSettingsData(
        temperature=0.2,
        top_p=0.9,
        frequency_penalty=0.1,
        presence_penalty=0.3,
        max_tokens=50,
        tool_choice="required",
        parallel_tool_calls=False,
        extra={"seed": 7, "top_k": 3},
    )
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    await model.respond(
        request(
            system="Be brief.",
            messages=history,
            tools=(WEATHER,),
            response_format={"name": "Answer", "schema": schema},
            settings=settings,
        )
    )

    (sent,) = server.requests
    assert sent.method == "POST"
    assert str(sent.url) == f"{BASE}/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = json.loads(sent.content)
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        *(m.to_openai() for m in history),
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Weather for a city.",
                "parameters": WEATHER.parameters,
                "strict": True,
            },
        }
    ]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Answer", "schema": schema, "strict": True},
    }
    expected = {
        "temperature": 0.2,
        "top_p": 0.9,
        "frequency_penalty": 0.1,
        "presence_penalty": 0.3,
        "max_tokens": 50,
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "seed": 7,
        "top_k": 3,
    }
    assert {k: body[k] for k in expected} == expected
    assert not body.get("stream")


async def test_request_leaves_out_what_is_not_set() -> None:
    server = Server(completion())
    settings = ModelSettingsData(tool_choice={"type": "function"}, parallel_tool_calls=True)
    await make_model(server).respond(request(settings=settings))
    body = server.bodies[0]
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    for absent in (
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "temperature",
        "top_p",
        "max_tokens",
        "frequency_penalty",
        "presence_penalty",
    ):
        assert absent not in body


async def test_named_tool_choice_and_parameterless_tool() -> None:
    server = Server(completion())
    choice = {"type": "function", "function": {"name": "ping"}}
    await make_model(server).respond(
        request(tools=(ToolSpec(name="ping"),), settings=ModelSettingsData(tool_choice=choice))
    )
    body = server.bodies[0]
    assert body["tool_choice"] == choice
    assert body["tools"][0]["function"]["parameters"] == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    assert body["tools"][0]["function"]["strict"] is True


async def test_response_format_without_schema_is_a_user_error() -> None:
    model = make_model(Server())
    with pytest.raises(UserError, match="'name' and 'schema'"):
        await model.respond(request(response_format={"name": "x"}))


# -- responses -----------------------------------------------------------------------------


async def test_text_reply_and_usage() -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    server = Server(completion("Hello!", usage=usage))
    response = await make_model(server).respond(request())
    assert response == ModelResponse(Message("assistant", "Hello!"), "stop", Usage(12, 3))


async def test_missing_usage_counts_zero() -> None:
    response = await make_model(Server(completion("x"))).respond(request())
    assert response.usage == Usage(0, 0)


async def test_tool_call_reply() -> None:
    calls = [fn_call("c1", "weather", '{"city":"Paris"}'), fn_call("c2", "weather", "{}")]
    server = Server(completion(None, tool_calls=calls, finish_reason="tool_calls"))
    response = await make_model(server).respond(request(tools=(WEATHER,)))
    assert response.finish_reason == "tool_calls"
    assert response.message.content is None
    assert response.message.tool_calls == (
        ToolCall("c1", "weather", '{"city":"Paris"}'),
        ToolCall("c2", "weather", "{}"),
    )


async def test_tool_calls_without_ids_get_unique_ids() -> None:
    calls = [
        {"function": {"name": "weather", "arguments": {"city": "Oslo"}}},
        {"function": {"name": "weather", "arguments": "{}"}},
    ]
    stream = sse(
        chunk({"tool_calls": [{"index": 0, "function": {"name": "now", "arguments": ""}}]}),
        chunk({}, finish_reason="tool_calls"),
    )
    model = make_model(
        Server(completion(None, tool_calls=calls, finish_reason="tool_calls"), stream)
    )
    first, second = (await model.respond(request())).message.tool_calls
    assert first.id.startswith("call_") and second.id.startswith("call_")
    assert first.id != second.id
    assert (first.name, first.arguments) == ("weather", '{"city": "Oslo"}')
    _, response = await collect(model, request())
    (streamed,) = response.message.tool_calls
    assert streamed.id.startswith("call_") and streamed.arguments == "{}"


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_calls"),
        ("function_call", "tool_calls"),
        ("content_filter", "content_filter"),
    ],
)
async def test_finish_reasons(wire: str, expected: str) -> None:
    response = await make_model(Server(completion("x", finish_reason=wire))).respond(request())
    assert response.finish_reason == expected


async def test_missing_finish_reason_is_inferred() -> None:
    calls = [fn_call("c1", "weather", "{}")]
    server = Server(
        completion("x", finish_reason=None), completion(None, tool_calls=calls, finish_reason=None)
    )
    model = make_model(server)
    assert (await model.respond(request())).finish_reason == "stop"
    assert (await model.respond(request())).finish_reason == "tool_calls"


async def test_unknown_finish_reason_is_a_model_error() -> None:
    server = Server(completion("x", finish_reason="eaten_by_llama"))
    with pytest.raises(ModelError, match="'eaten_by_llama'") as info:
        await make_model(server).respond(request())
    assert info.value.retryable is not True


async def test_no_choices_is_a_model_error() -> None:
    body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
    with pytest.raises(ModelError, match="no choices"):
        await make_model(Server(httpx2.Response(200, json=body))).respond(request())


async def test_choice_without_message_is_a_model_error() -> None:
    body = completion().json()
    body["choices"][0]["message"] = None
    with pytest.raises(ModelError, match="without a message"):
        await make_model(Server(httpx2.Response(200, json=body))).respond(request())


async def test_refusal_is_a_model_error() -> None:
    response = completion(None)
    body = response.json()
    body["choices"][0]["message"]["refusal"] = "I can't help with that."
    with pytest.raises(ModelError, match="refused to answer: I can't help"):
        await make_model(Server(httpx2.Response(200, json=body))).respond(request())


# -- errors and retries --------------------------------------------------------------------


async def test_429_is_retried_then_succeeds() -> None:
    server = Server(error(429, "slow down"), completion("ok"))
    response = await make_model(server, max_retries=3).respond(request())
    assert response.message.content == "ok"
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [408, 409, 500, 503])
async def test_transient_status_exhausts_retries(status: int) -> None:
    server = Server(*(error(status, "overloaded") for _ in range(3)))
    with pytest.raises(ModelError) as info:
        await make_model(server, max_retries=2).respond(request())
    err = info.value
    assert err.status_code == status
    assert err.retryable is True
    assert "overloaded" in err.message and "gpt-test" in err.message
    assert len(server.requests) == 3  # the first try and max_retries=2 retries


async def test_max_retries_zero_sends_one_request() -> None:
    server = Server(error(500))
    with pytest.raises(ModelError):
        await make_model(server, max_retries=0).respond(request())
    assert len(server.requests) == 1


async def test_401_is_not_retried_and_hides_the_key() -> None:
    server = Server(error(401, f"Incorrect API key provided: {KEY}"))
    with pytest.raises(ModelError, match="key was rejected") as info:
        await make_model(server).respond(request())
    err = info.value
    assert (err.status_code, err.retryable) == (401, False)
    assert KEY not in str(err) and KEY not in repr(err)
    assert len(server.requests) == 1
    # The openai exception is not chained: tracebacks (Ray logs them) cannot show it.
    assert err.__cause__ is None and err.__suppress_context__
    assert KEY not in "".join(traceback.format_exception(err))


async def test_server_echo_of_the_key_is_masked() -> None:
    server = Server(error(400, f"bad request for key {KEY}"))
    with pytest.raises(ModelError) as info:
        await make_model(server).respond(request())
    assert KEY not in str(info.value)
    assert "bad request for key ***" in str(info.value)
    assert (info.value.status_code, info.value.retryable) == (400, False)


async def test_404_names_the_model() -> None:
    server = Server(error(404, "The model does not exist"))
    with pytest.raises(ModelError, match="model 'gpt-test' was not found") as info:
        await make_model(server).respond(request())
    assert (info.value.status_code, info.value.retryable) == (404, False)


async def test_connection_error_is_retried_then_translated() -> None:
    server = Server(httpx2.ConnectError("refused"), httpx2.ConnectError("refused"))
    with pytest.raises(ModelError, match=r"could not connect to http://mock\.invalid/v1") as info:
        await make_model(server, max_retries=1).respond(request())
    assert info.value.retryable is True
    assert info.value.status_code is None
    assert len(server.requests) == 2


async def test_timeout_is_translated() -> None:
    server = Server(httpx2.ReadTimeout("slow"))
    with pytest.raises(ModelError, match=r"timed out after 0\.5s") as info:
        await make_model(server, max_retries=0, timeout_s=0.5).respond(request())
    assert info.value.retryable is True


async def test_model_error_survives_pickle() -> None:
    with pytest.raises(ModelError) as info:
        await make_model(Server(error(503)), max_retries=0).respond(request())
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.message, copy.status_code, copy.retryable) == (
        info.value.message,
        503,
        True,
    )


# -- streaming -----------------------------------------------------------------------------


async def test_stream_text_deltas() -> None:
    server = Server(
        sse(
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({"content": "!"}, finish_reason="stop"),
            chunk(usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}),
        )
    )
    deltas, response = await collect(make_model(server), request(system="s"))
    assert deltas == ["Hel", "lo", "!"]
    assert response == ModelResponse(Message("assistant", "Hello!"), "stop", Usage(5, 2))
    body = server.bodies[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"][0] == {"role": "system", "content": "s"}


async def test_stream_tool_call_deltas_split_across_chunks() -> None:
    def call_delta(index: int, **fields: Any) -> dict[str, Any]:
        function = {k: v for k, v in fields.items() if k in ("name", "arguments")}
        out: dict[str, Any] = {"index": index, "function": function}
        if "id" in fields:
            out.update(id=fields["id"], type="function")
        return {"tool_calls": [out]}

    server = Server(
        sse(
            chunk({"role": "assistant", "content": None}),
            chunk(call_delta(0, id="c1", name="wea", arguments="")),
            chunk(call_delta(0, name="ther", arguments='{"ci')),
            chunk(call_delta(1, id="c2", name="weather", arguments='{"city"')),
            chunk(call_delta(0, arguments='ty": "Paris"}')),
            chunk(call_delta(1, arguments=': "Rome"}')),
            chunk(call_delta(2, id="c3", name="now")),
            chunk({}, finish_reason="tool_calls"),
            chunk(usage={"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}),
        )
    )
    deltas, response = await collect(make_model(server), request(tools=(WEATHER,)))
    assert deltas == []
    assert response.finish_reason == "tool_calls"
    assert response.message.content is None
    assert response.message.tool_calls == (
        ToolCall("c1", "weather", '{"city": "Paris"}'),
        ToolCall("c2", "weather", '{"city": "Rome"}'),
        ToolCall("c3", "now", "{}"),
    )
    assert response.usage == Usage(9, 4)


async def test_stream_text_and_tool_call_together() -> None:
    server = Server(
        sse(
            chunk({"content": "Let me check."}),
            chunk({"tool_calls": [{"index": 0, **fn_call("c1", "weather", "{}")}]}),
            chunk({}, finish_reason="tool_calls"),
        )
    )
    deltas, response = await collect(make_model(server), request(tools=(WEATHER,)))
    assert deltas == ["Let me check."]
    assert response.message == Message(
        "assistant", "Let me check.", tool_calls=[ToolCall("c1", "weather", "{}")]
    )
    assert response.usage == Usage()


async def test_stream_error_event_is_a_model_error() -> None:
    server = Server(sse(chunk({"content": "a"}), {"error": {"message": "engine died"}}))
    with pytest.raises(ModelError, match="engine died"):
        await collect(make_model(server), request())


async def test_stream_error_event_with_a_status_code() -> None:
    event = {"error": {"message": "overloaded", "code": 503}}
    with pytest.raises(ModelError) as info:
        await collect(make_model(Server(sse(event))), request())
    assert (info.value.status_code, info.value.retryable) == (503, True)


async def test_stream_without_finish_reason_is_a_retryable_model_error() -> None:
    server = Server(sse(chunk({"content": "cut"}), done=False))
    with pytest.raises(ModelError, match="without a finish reason") as info:
        await collect(make_model(server), request())
    assert info.value.retryable is True


async def test_stream_unknown_finish_reason() -> None:
    server = Server(sse(chunk({"content": "x"}, finish_reason="mystery")))
    with pytest.raises(ModelError, match="'mystery'"):
        await collect(make_model(server), request())


async def test_stream_malformed_event() -> None:
    with pytest.raises(ModelError, match="malformed"):
        await collect(make_model(Server(sse("{not json"))), request())


async def test_stream_status_error_is_retried() -> None:
    server = Server(error(429), sse(chunk({"content": "ok"}, finish_reason="stop")))
    deltas, _ = await collect(make_model(server), request())
    assert deltas == ["ok"]
    assert len(server.requests) == 2


async def test_stream_401() -> None:
    with pytest.raises(ModelError, match="key was rejected") as info:
        await collect(make_model(Server(error(401, KEY))), request())
    assert KEY not in str(info.value)


async def test_stream_stopped_early_closes_cleanly() -> None:
    server = Server(sse(chunk({"content": "a"}), chunk({"content": "b"}, finish_reason="stop")))
    gen = make_model(server).stream(request())
    assert await gen.__anext__() == "a"
    await gen.aclose()


# -- configuration, pickling, event loops --------------------------------------------------


async def test_pickle_before_and_after_use() -> None:
    server = Server(completion("one"), completion("two"))
    model = make_model(server, max_retries=1, timeout_s=5)
    fresh = pickle.loads(pickle.dumps(model))
    assert repr(fresh) == repr(model)
    assert await model.respond(request()) == ModelResponse(Message("assistant", "one"))

    used = pickle.loads(pickle.dumps(model))
    assert (used.model, used.base_url, used.max_retries, used.timeout_s) == (
        "gpt-test",
        BASE,
        1,
        5.0,
    )
    assert used._client is None and used._http_client is None
    # Pickling leaves the original working.
    assert (await model.respond(request())).message.content == "two"


async def test_missing_key_and_base_url_is_a_user_error_on_first_use() -> None:
    model = OpenAIChatModel("gpt-4o-mini")  # constructing is fine
    pickle.dumps(model)
    with pytest.raises(UserError, match="OPENAI_API_KEY") as info:
        await model.respond(request())
    assert "OPENAI_BASE_URL" in str(info.value)
    with pytest.raises(UserError):
        await collect(model, request())


async def test_base_url_without_key_sends_a_placeholder() -> None:
    server = Server(completion())
    await make_model(server, api_key=None).respond(request())
    assert server.requests[0].headers["authorization"] == "Bearer not-needed"


async def test_environment_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-123456")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env.invalid/v1")
    server = Server(completion())
    model = make_model(server, api_key=None, base_url=None)
    assert model.base_url == "http://env.invalid/v1"
    await model.respond(request())
    sent = server.requests[0]
    assert sent.headers["authorization"] == "Bearer sk-env-key-123456"
    assert str(sent.url) == "http://env.invalid/v1/chat/completions"
    assert "sk-env-key" not in repr(model)


def test_repr_hides_the_key() -> None:
    model = OpenAIChatModel("m", api_key=KEY)
    assert KEY not in repr(model)
    assert repr(model) == "OpenAIChatModel('m', base_url=None, max_retries=3, timeout_s=60.0)"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": ""},
        {"max_retries": -1},
        {"max_retries": 1.5},
        {"timeout_s": 0},
        {"timeout_s": "10"},
    ],
)
def test_invalid_arguments(kwargs: dict[str, Any]) -> None:
    kwargs = {"model": "m", **kwargs}
    with pytest.raises(UserError):
        OpenAIChatModel(kwargs.pop("model"), **kwargs)


def test_one_model_serves_several_event_loops() -> None:
    server = Server(completion("a"), completion("b"))
    model = make_model(server)
    assert asyncio.run(model.respond(request())).message.content == "a"
    assert asyncio.run(model.respond(request())).message.content == "b"


async def test_aclose_leaves_a_callers_client_open() -> None:
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(Server(completion())))
    model = OpenAIChatModel("m", api_key=KEY, base_url=BASE, http_client=client)
    await model.respond(request())
    await model.aclose()
    assert not client.is_closed
    await client.aclose()
