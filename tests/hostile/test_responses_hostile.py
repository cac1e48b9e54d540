"""OpenAIResponsesModel against a Responses API server that answers badly: malformed JSON,
unknown output items and content parts, odd statuses, broken streams, nonsense usage and
echoed credentials. Each is a clear ModelError (nothing dropped silently, no raw exception)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from responses_server import FakeResponsesServer, RReply

from raygents.core.messages import Message, ModelRequest, ReasoningItem, Usage
from raygents.errors import ModelError
from raygents.models.responses import REASONING_API, OpenAIResponsesModel

KEY = "sk-hostile-key-0123456789"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeResponsesServer]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeResponsesServer() as fake:
        yield fake


def model_for(server: FakeResponsesServer) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("fake-model", base_url=server.url, api_key=KEY, max_retries=0)


REQUEST = ModelRequest(agent_name="a", messages=(Message("user", "hi"),))


async def answer(server: FakeResponsesServer, reply: RReply, *, stream: bool = False) -> Any:
    server.push(reply)
    model = model_for(server)
    try:
        if not stream:
            return await model.respond(REQUEST)
        return [item async for item in model.stream(REQUEST)][-1]
    finally:
        await model.aclose()


def _message(*parts: Any) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": list(parts)}


@pytest.mark.parametrize(
    ("output", "match"),
    [
        ([{"type": "web_search_call", "id": "ws_1"}], "output #0 of type 'web_search_call'"),
        ([42], "output #0 of type 'int'"),
        ([_message({"type": "output_image", "url": "x"})], "part #0 of output #0 of type"),
        ([_message({"type": "output_text", "text": 7})], "of type 'output_text'"),
        ([{"type": "function_call", "call_id": "c1", "arguments": "{}"}], "malformed function"),
        ([{"type": "function_call", "name": "f", "arguments": {"a": 1}}], "malformed function"),
        ("not a list", "without an output list"),
    ],
)
async def test_output_raygents_cannot_carry_is_a_model_error(
    server: FakeResponsesServer, output: Any, match: str
) -> None:
    with pytest.raises(ModelError, match=match):
        await answer(server, RReply(output=output))


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b'"text"', b"null"])
async def test_a_body_that_is_not_a_response_object_is_a_model_error(
    server: FakeResponsesServer, raw: bytes
) -> None:
    with pytest.raises(ModelError, match="fake-model"):
        await answer(server, RReply(raw=raw))


async def test_statuses_raygents_does_not_know(server: FakeResponsesServer) -> None:
    with pytest.raises(ModelError, match="status 'cancelled'"):
        await answer(server, RReply(text="x", response_status="cancelled"))
    with pytest.raises(ModelError, match="reason raygents does not know: 'tired'"):
        await answer(
            server, RReply(text="x", response_status="incomplete", incomplete_reason="tired")
        )


async def test_nonsense_usage_counts_zero(server: FakeResponsesServer) -> None:
    raw = {
        "status": "completed",
        "output": [_message({"type": "output_text", "text": "ok"})],
        "usage": {
            "input_tokens": -5,
            "output_tokens": "many",
            "input_tokens_details": [],
            "output_tokens_details": {"reasoning_tokens": True},
        },
    }
    response = await answer(server, RReply(raw=json.dumps(raw).encode()))
    assert response.usage == Usage()


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"data: {not json}\n\n", "malformed stream event"),
        (b'data: {"type": "response.completed"}\n\n', "response.completed event without"),
        (b'data: {"type": "response.completed", "response": {"output": 3}}\n\n', "output list"),
    ],
)
async def test_broken_streams_are_model_errors(
    server: FakeResponsesServer, raw: bytes, match: str
) -> None:
    with pytest.raises(ModelError, match=match):
        await answer(server, RReply(raw=raw), stream=True)


async def test_unknown_stream_events_are_passed_over(server: FakeResponsesServer) -> None:
    done = {"type": "response.completed", "response": {"status": "completed", "output": []}}
    raw = (
        b'data: {"type": "response.something_new", "x": 1}\n\n'
        b'data: {"type": "response.output_text.delta", "delta": 5}\n\n'
        + f"data: {json.dumps(done)}\n\n".encode()
    )
    response = await answer(server, RReply(raw=raw), stream=True)
    assert response.message.text == ""


async def test_an_echoed_key_never_shows(server: FakeResponsesServer) -> None:
    error = {"type": "error", "code": "bad", "message": f"key {KEY} rejected"}
    with pytest.raises(ModelError) as info:
        await answer(server, RReply(raw=f"data: {json.dumps(error)}\n\n".encode()), stream=True)
    assert KEY not in str(info.value)
    failed = {"status": "failed", "error": {"code": "x", "message": f"{KEY} at {server.url}"}}
    with pytest.raises(ModelError) as info:
        await answer(server, RReply(raw=json.dumps(failed).encode()))
    assert KEY not in str(info.value) and "***" in str(info.value)


async def test_only_the_fields_of_a_reasoning_input_item_are_sent_back(
    server: FakeResponsesServer,
) -> None:
    planted = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "encrypted_content": "enc",
        "status": "completed",
        "tools": [{"type": "web_search"}],
    }
    history = (
        Message("user", "q"),
        Message("assistant", "a", reasoning=(ReasoningItem(api=REASONING_API, data=planted),)),
        Message("user", "q2"),
    )
    server.push("ok")
    model = model_for(server)
    await model.respond(ModelRequest(agent_name="a", messages=history))
    assert server.requests[0]["input"][1] == {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "encrypted_content": "enc",
    }
    await model.aclose()


async def test_an_oversized_reasoning_item_is_over_the_model_output_cap(
    server: FakeResponsesServer,
) -> None:
    """Reasoning items go into checkpoints, sessions and every later request: they are held to
    the model output cap like the answer's text."""
    from responses_server import reasoning_item

    from raygents.errors import MAX_PAYLOAD_BYTES, PayloadTooLarge
    from raygents.models.base import check_response

    huge = reasoning_item("x" * (MAX_PAYLOAD_BYTES["model output"] + 1))
    response = await answer(server, RReply(reasoning=(huge,), text="short"))
    with pytest.raises(PayloadTooLarge, match="reasoning") as info:
        check_response(response, "thinker")
    assert info.value.kind == "model output"
