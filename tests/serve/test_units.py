"""The HTTP API's pure parts, without Ray or Serve: bodies, auth, webhook URLs and
signatures, settings and the error mapping."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http.server
import socket
import threading
from collections.abc import AsyncIterator

import pytest

import raygents as rg
from raygents.runtime.driver import snapshot
from raygents.serve import auth, body, webhook
from raygents.serve.problems import Problem, problem_of
from raygents.serve.settings import agents_by_name, is_loopback, packed, settings, unpacked
from raygents.testing import FunctionModel, text

TOKEN = "x" * 24


def test_agents_are_named_as_requests_name_them() -> None:
    a, b = rg.Agent("a"), rg.Agent("b")
    assert agents_by_name(a) == {"a": a}
    assert agents_by_name([a, b]) == {"a": a, "b": b}
    assert agents_by_name({"alias": a}) == {"alias": a}
    for bad in ([], [a, rg.Agent("a")], "a", [object()], {"": a}):
        with pytest.raises(rg.UserError):
            agents_by_name(bad)  # type: ignore[arg-type]


def test_every_process_of_an_app_loads_agents_with_the_same_fingerprints() -> None:
    """Replicas and the keeper load the app's settings from one pickle: their agents are one
    graph (their runs share agent actors), and the same definitions as the original's (the
    actors of a driver that runs the original are never retired for them)."""
    greeting = "hi"

    @rg.tool(remote=False)
    def shout(word: str) -> str:
        """Shout a word."""
        return word.upper() + greeting

    agent = rg.Agent("packed", tools=[shout], model=FunctionModel(lambda r: text(greeting)))
    app = settings(agent, auth_token=TOKEN, webhook_secret=None, route_prefix="/")
    blob = packed(app)
    loaded = [snapshot.snapshot(unpacked(blob).agents["packed"]) for _ in range(2)]
    assert loaded[0][2:] == loaded[1][2:]
    assert loaded[0][3] == snapshot.snapshot(agent)[3]


def test_the_token_comes_from_the_argument_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAYGENTS_API_TOKEN", "e" * 20)
    built = settings(rg.Agent("a"), auth_token=None, webhook_secret=None, route_prefix="/")
    assert built.auth_token == "e" * 20 and built.signing_key == "e" * 20
    built = settings(rg.Agent("a"), auth_token=TOKEN, webhook_secret="s", route_prefix="/x/")
    assert built.auth_token == TOKEN and built.signing_key == "s" and built.route_prefix == "/x"
    for bad in ("short", "has space in the token", "tab\there-is-a-long-one"):
        with pytest.raises(rg.UserError):
            settings(rg.Agent("a"), auth_token=bad, webhook_secret=None, route_prefix="/")
    for prefix in ("api", "/a//b", "/a?b"):
        with pytest.raises(rg.UserError):
            settings(rg.Agent("a"), auth_token=None, webhook_secret=None, route_prefix=prefix)


def test_without_a_token_only_a_loopback_host_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    import raygents.serve as rgs

    monkeypatch.delenv("RAYGENTS_API_TOKEN", raising=False)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
    with pytest.raises(rg.UserError, match="needs an auth token"):
        rgs.start(rg.Agent("a"), host="0.0.0.0")


def test_auth_compares_the_bearer_token() -> None:
    auth.check(TOKEN, f"Bearer {TOKEN}", "10.0.0.1")
    auth.check(TOKEN, f"bearer {TOKEN}", None)
    for header in (None, "", TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer \u00e9"):
        with pytest.raises(Problem) as refused:
            auth.check(TOKEN, header, "127.0.0.1")
        assert refused.value.status == 401
    auth.check(None, None, "127.0.0.1")
    with pytest.raises(Problem) as refused:
        auth.check(None, None, "10.1.2.3")
    assert refused.value.status == 403


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def test_bodies_are_capped_by_length_and_while_read() -> None:
    limit = body.MAX_BODY_BYTES
    with pytest.raises(Problem) as refused:
        asyncio.run(body.read_body({"content-length": str(limit + 1)}, _chunks()))
    assert refused.value.status == 413
    with pytest.raises(Problem) as refused:
        asyncio.run(body.read_body({}, _chunks(b"x" * limit, b"y")))
    assert refused.value.status == 413
    assert asyncio.run(body.read_body({}, _chunks(b"{", b"}"))) == b"{}"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"[" * 65 + b"]" * 65, "nests"),
        (b"[" * 50_000 + b"]" * 50_000, "nests"),
        (b'{"a": ' + b"1" * 65 + b"}", "digits"),
        (b'{"a": 1e999}', "range"),
        (b'{"a": NaN}', "not JSON"),
        (b'{"a": "\\ud800"}', "surrogate"),
        (b'{"\\udc00": 1}', "surrogate"),
        (b"\xff", "UTF-8"),
        (b"{", "not JSON"),
    ],
)
def test_hostile_json_is_refused(text: bytes, why: str) -> None:
    with pytest.raises(Problem) as refused:
        body.parse_json(text)
    assert refused.value.status == 400 and why in refused.value.message


def test_valid_json_is_parsed() -> None:
    assert body.parse_json(b'{"a": [1, 2.5, "\\ud83d\\ude00", null]}') == {
        "a": [1, 2.5, "\U0001f600", None]
    }


def test_bodies_are_validated_naming_the_field() -> None:
    ok = body.validated(body.RunRequest, {"agent": "a", "input": "x"})
    assert ok.wait is False and ok.if_busy == "reject"
    for doc, field in (
        ({"agent": "a"}, "input"),
        ({"agent": "a", "input": "x", "more": 1}, "more"),
        ({"agent": "a", "input": "x", "wait": 1}, "wait"),
        ({"agent": "a", "input": "x", "max_tokens": 1.0}, "max_tokens"),
    ):
        with pytest.raises(Problem) as refused:
            body.validated(body.RunRequest, doc)
        assert refused.value.status == 422 and refused.value.fields["field"] == field


def test_webhook_urls_are_checked() -> None:
    assert webhook.check_url("https://hooks.example.com/x?y=1", ())
    assert webhook.check_url("http://127.0.0.1:9000/x", ["127.0.0.0/8"])
    for url in (
        "http://127.0.0.1/x",
        "http://169.254.169.254/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
        "http://metadata.google.internal/",
        "http://a.example/\r\nX: y",
        "gopher://a.example/",
    ):
        with pytest.raises(Problem):
            webhook.check_url(url, ())


class _Receiver:
    """An HTTP server on ``host`` that notes the Host header of each POST it takes."""

    def __init__(self, host: str, port: int = 0) -> None:
        hosts = self.hosts = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                hosts.append(self.headers["Host"])
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_a_webhook_goes_to_the_address_its_name_was_vetted_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS rebinding: a name that resolves to an allowed address when checked, and to an
    internal one when connected, still reaches only the address checked."""
    hook = _Receiver("127.0.0.1")
    internal = _Receiver("127.0.0.2", hook.port)
    answers = iter(["127.0.0.1"])
    real = socket.getaddrinfo

    def rebinding(host: str | bytes, port: object, *args: object, **kwargs: object) -> object:
        if (host.decode() if isinstance(host, bytes) else host) != "hooks.example":
            return real(host, port, *args, **kwargs)  # type: ignore[arg-type]
        address = next(answers, "127.0.0.2")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, hook.port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    try:
        url = f"http://hooks.example:{hook.port}/done"
        delivery = webhook.Delivery(url)
        await webhook.deliver(delivery, {"run_id": "r"}, None, ["127.0.0.1/32"], attempts=1)
    finally:
        hook.close()
        internal.close()
    assert delivery.state == "delivered", delivery.last_error
    assert hook.hosts == [f"hooks.example:{hook.port}"] and internal.hosts == []


def test_signatures_are_hmac_sha256_of_the_body() -> None:
    expected = hmac.new(b"k", b"body", hashlib.sha256).hexdigest()
    assert webhook.sign(b"body", "k") == f"sha256={expected}"
    assert webhook.sign(b"body", None) == ""


def test_raygents_errors_map_to_statuses() -> None:
    cases = [
        (rg.RunNotFound("x"), 404),
        (rg.TooManyRuns("x"), 429),
        (rg.PayloadTooLarge(kind="run input", size=10, limit=5), 413),
        (rg.ApprovalDecisionsMismatch("x"), 409),
        (rg.UserError("run id 'a' is already in use (completed); pick another"), 409),
        (rg.UserError("invalid run id"), 422),
        (rg.RaygentsError("x"), 500),
    ]
    for error, status in cases:
        problem = problem_of(error)
        assert problem.status == status
        assert problem.document()["error"]["type"] == type(error).__name__
