"""Webhooks: a run's outcome POSTed to a local receiver when it ends, signed with the secret,
retried after failures, its delivery shown in the run's info; addresses a webhook must not
reach are refused."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from servekit import Served

import raygents as rg
from raygents.testing import FunctionModel, text

pytestmark = pytest.mark.ray

AGENTS = [rg.Agent("echo", model=FunctionModel(lambda req: text("done")))]
SERVE_TOKEN = "webhook-test-token-0123456789"


class Receiver(http.server.ThreadingHTTPServer):
    """Takes webhooks on 127.0.0.1, failing the first ``fail`` of each run's with a 500."""

    def __init__(self, fail: int = 0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fail = fail
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.tries: dict[str, int] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        run = json.loads(body)["run_id"]
        tries = self.server.tries[run] = self.server.tries.get(run, 0) + 1
        self.server.got.append((dict(self.headers), body))
        self.send_response(500 if tries <= self.server.fail else 204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[Receiver]:
    server = Receiver(getattr(request, "param", 0))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def delivered(served: Served, run_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        hook = served.get(f"/v1/runs/{run_id}").json()["webhook"]
        if hook is not None and hook["state"] != "pending":
            return hook  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, hook
        time.sleep(0.1)


def test_the_outcome_is_posted_signed(served: Served, receiver: Receiver) -> None:
    run = served.post("/v1/runs", {"agent": "echo", "input": "x", "webhook": receiver.url}).json()
    hook = delivered(served, run["run_id"])
    assert hook["state"] == "delivered" and hook["attempts"] == 1 and hook["status_code"] == 204
    ((headers, body),) = receiver.got
    doc = json.loads(body)
    assert (
        doc["run_id"] == run["run_id"] and doc["status"] == "completed" and doc["output"] == "done"
    )
    expected = hmac.new(SERVE_TOKEN.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-Raygents-Signature"] == f"sha256={expected}"


@pytest.mark.parametrize("receiver", [2], indirect=True)
def test_failed_deliveries_are_retried(served: Served, receiver: Receiver) -> None:
    run = served.post("/v1/runs", {"agent": "echo", "input": "x", "webhook": receiver.url}).json()
    hook = delivered(served, run["run_id"])
    assert hook["state"] == "delivered" and hook["attempts"] == 3, hook
    assert len(receiver.got) == 3 and len({body for _, body in receiver.got}) == 1


def test_a_delivery_that_never_succeeds_is_shown_failed(served: Served) -> None:
    with Receiver(fail=99) as dead:
        url = dead.url
    run = served.post("/v1/runs", {"agent": "echo", "input": "x", "webhook": url}).json()
    hook = delivered(served, run["run_id"], timeout_s=60)
    assert hook["state"] == "failed" and hook["attempts"] == 5 and hook["last_error"], hook
    assert served.get(f"/v1/runs/{run['run_id']}").json()["status"] == "completed"


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/x",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://10.0.0.7/hook",
        "http://192.168.1.1/hook",
        "http://[::ffff:169.254.169.254]/x",
        "http://0.0.0.0/x",
        "ftp://example.com/x",
        "http://user:pass@example.com/x",
        "http://example.com/x\r\nX-Injected: 1",
        "http://example.com/x\nHost: evil",
        "http://example.com/ x",
        "http:///nohost",
    ],
)
def test_webhooks_where_they_must_not_go_are_refused(served: Served, url: str) -> None:
    answer = served.post("/v1/runs", {"agent": "echo", "input": "x", "webhook": url})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "webhook"
