"""OpenAIChatModel with secrets in its base URL, and answers whose parts raygents cannot carry.

Through ``httpx2.MockTransport`` and the local FakeOpenAIServer: no real provider.
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any

import httpx2
import pytest
from models.test_openai_model import Server, chunk, collect, completion, error, request, sse
from openai_server import FakeOpenAIServer, Reply

from raygents.core.messages import to_messages
from raygents.errors import ModelError, UserError
from raygents.models.openai import OpenAIChatModel

KEY = "sk-hostile-0123456789abcdef"
PASSWORD = "hunter2-pw-Secret"
QUERY_KEY = "AzSecret0123456789abcdef"
SIG = "sv2024sigXYZ987654321"
SECRETS = (KEY, PASSWORD, QUERY_KEY, SIG, "alice")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


def assert_clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked in {text!r}"


# -- how a base URL is shown ----------------------------------------------------------------

# (base URL, how repr and errors show it)
URLS: list[tuple[str, str]] = [
    (f"https://alice:{PASSWORD}@llm.example.com/v1", "https://***@llm.example.com/v1"),
    (f"https://{KEY}@llm.example.com/v1", "https://***@llm.example.com/v1"),
    ("http://alice@10.0.0.5:8000/v1", "http://***@10.0.0.5:8000/v1"),
    (
        f"https://az.example.com/openai?api-key={QUERY_KEY}&api-version=2024-06-01",
        "https://az.example.com/openai?api-key=***&api-version=2024-06-01",
    ),
    (f"https://h.example/v1?key={QUERY_KEY}", "https://h.example/v1?key=***"),
    (f"https://h.example/v1?access_token={QUERY_KEY}", "https://h.example/v1?access_token=***"),
    (f"https://h.example/v1?sig={SIG}&se=2030", "https://h.example/v1?sig=***&se=***"),
    (f"https://h.example/v1?x={QUERY_KEY}", "https://h.example/v1?x=***"),
    (f"https://h.example/v1#{QUERY_KEY}", "https://h.example/v1#***"),
    (f"alice:{PASSWORD}@localhost:8000/v1", "***@localhost:8000/v1"),
    ("http://localhost:8000/v1", "http://localhost:8000/v1"),
]


@pytest.mark.parametrize(("url", "shown"), URLS, ids=[s for _, s in URLS])
def test_repr_shows_the_base_url_without_credentials(url: str, shown: str) -> None:
    model = OpenAIChatModel("m", base_url=url, api_key=KEY)
    assert repr(model) == f"OpenAIChatModel('m', base_url={shown!r}, max_retries=3, timeout_s=60.0)"
    assert_clean(repr(model))
    assert model.base_url == url  # the model still connects to the URL it was given


def test_a_key_in_the_path_of_the_base_url_is_masked() -> None:
    model = OpenAIChatModel("m", base_url=f"https://h.example/v1/{KEY}/", api_key=KEY)
    assert "base_url='https://h.example/v1/***/'" in repr(model)


def test_a_base_url_from_the_environment_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"https://alice:{PASSWORD}@env.example/v1")
    assert "https://***@env.example/v1" in repr(OpenAIChatModel("m"))
    assert_clean(repr(OpenAIChatModel("m")))


# -- errors -----------------------------------------------------------------------------------

BASE = f"http://alice:{PASSWORD}@mock.invalid/v1?api-key={QUERY_KEY}&sig={SIG}&api-version=7"


def hostile_model(server: Server, **kwargs: Any) -> OpenAIChatModel:
    client = httpx2.AsyncClient(transport=httpx2.MockTransport(server))
    return OpenAIChatModel(
        "gpt-test", base_url=BASE, api_key=KEY, http_client=client, max_retries=0, **kwargs
    )


def no_choices() -> httpx2.Response:
    body = completion().json()
    body["choices"] = []
    return httpx2.Response(200, json=body)


def refusal() -> httpx2.Response:
    body = completion(None).json()
    body["choices"][0]["message"]["refusal"] = f"no; your url {BASE} and key {KEY}"
    return httpx2.Response(200, json=body)


ECHO = f"bad request to {BASE} with key {KEY} as {PASSWORD}"
RESPONSES: dict[str, Any] = {
    "401": lambda: error(401, ECHO),
    "404": lambda: error(404, ECHO),
    "400 echo": lambda: error(400, ECHO),
    "503": lambda: error(503, ECHO),
    "connect": lambda: httpx2.ConnectError(ECHO),
    "timeout": lambda: httpx2.ReadTimeout(ECHO),
    "no choices": no_choices,
    "refusal": refusal,
    "not json": lambda: httpx2.Response(200, content=ECHO.encode()),
}


@pytest.mark.parametrize("case", RESPONSES)
async def test_model_errors_never_show_credentials(case: str) -> None:
    server = Server(RESPONSES[case]())
    with pytest.raises(ModelError) as info:
        await hostile_model(server).respond(request())
    err = info.value
    assert "mock.invalid" in str(err)
    assert_clean(str(err))
    assert_clean(repr(err))
    assert_clean("".join(traceback.format_exception(err)))
    assert_clean(repr(pickle.loads(pickle.dumps(err)).__dict__))


STREAMS: dict[str, Any] = {
    "error event": lambda: sse(chunk({"content": "a"}), {"error": {"message": ECHO}}),
    "error event with status": lambda: sse({"error": {"message": ECHO, "code": 500}}),
    "no finish reason": lambda: sse(chunk({"content": "cut"}), done=False),
    "unknown finish reason": lambda: sse(chunk({"content": "x"}, finish_reason="odd")),
    "401": lambda: error(401, ECHO),
}


@pytest.mark.parametrize("case", STREAMS)
async def test_stream_errors_never_show_credentials(case: str) -> None:
    with pytest.raises(ModelError) as info:
        await collect(hostile_model(Server(STREAMS[case]())), request())
    assert "mock.invalid" in str(info.value)
    assert_clean(str(info.value))


async def test_query_parameters_of_the_base_url_are_sent_as_query_parameters() -> None:
    """The openai client would append the path after the query (``?api-version=7chat/...``)."""
    server = Server(completion("ok"))
    assert (await hostile_model(server).respond(request())).message.content == "ok"
    url = server.requests[0].url
    assert url.path == "/v1/chat/completions"
    assert dict(url.params) == {"api-key": QUERY_KEY, "sig": SIG, "api-version": "7"}


async def test_errors_over_real_http_never_show_credentials() -> None:
    with FakeOpenAIServer() as server:
        server.push(Reply.failure(500, f"upstream failed for {KEY}"))
        host = server.url.split("://", 1)[1]
        url = f"http://alice:{PASSWORD}@{host}"  # the fake server routes paths without queries
        model = OpenAIChatModel("fake", base_url=url, api_key=KEY, max_retries=0)
        with pytest.raises(ModelError) as info:
            await model.respond(request())
        await model.aclose()
    assert "127.0.0.1" in str(info.value) and "HTTP 500" in str(info.value)
    assert_clean(str(info.value))
    assert server.requests  # it did reach the server


def test_a_base_url_that_is_not_text_is_a_user_error() -> None:
    with pytest.raises(UserError, match="base_url must be a URL string"):
        OpenAIChatModel("m", base_url=b"http://x")  # type: ignore[arg-type]


# -- content parts ----------------------------------------------------------------------------

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


async def test_an_answer_with_an_image_part_is_a_model_error() -> None:
    body = completion().json()
    body["choices"][0]["message"]["content"] = [{"type": "text", "text": "look:"}, IMAGE]
    with pytest.raises(ModelError, match=r"content part #1 of type 'image_url'") as info:
        await hostile_model(Server(httpx2.Response(200, json=body))).respond(request())
    assert "iVBOR" not in str(info.value)


async def test_an_answer_of_text_parts_is_joined() -> None:
    body = completion().json()
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    body["choices"][0]["message"]["content"] = parts
    response = await hostile_model(Server(httpx2.Response(200, json=body))).respond(request())
    assert response.message.content == "ab"


async def test_an_answer_with_a_refusal_part_is_a_refusal() -> None:
    body = completion().json()
    body["choices"][0]["message"]["content"] = [{"type": "refusal", "refusal": "no way"}]
    with pytest.raises(ModelError, match="refused to answer: no way"):
        await hostile_model(Server(httpx2.Response(200, json=body))).respond(request())


def test_run_input_with_an_image_part_is_kept_and_an_audio_part_refused() -> None:
    message = {"role": "user", "content": [{"type": "text", "text": "what is this?"}, IMAGE]}
    (taken,) = to_messages([message])
    assert [p.kind for p in taken.parts] == ["text", "image"]  # (images are parts now)
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with pytest.raises(UserError, match="input_audio"):
        to_messages([{"role": "user", "content": [audio]}])


async def test_an_answer_whose_json_is_malformed_is_a_model_error() -> None:
    """A 200 that says it is JSON and is not: a ModelError, not a raw JSONDecodeError."""
    broken = httpx2.Response(
        200, content=b'{"choices": [', headers={"content-type": "application/json"}
    )
    with pytest.raises(ModelError, match="sent a body that is not valid JSON") as info:
        await hostile_model(Server(broken)).respond(request())
    assert not info.value.retryable
    assert_clean(str(info.value))
