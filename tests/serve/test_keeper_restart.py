"""The keeper's queue and webhook deliveries are durable: the keeper actor killed with thread
messages queued and a webhook delivery under way comes back (Ray restarts it), reads them back
from the store, runs the messages in order and makes the delivery with the same body and
signature (at least once)."""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servekit import TOKEN, Served, client, start

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.ray


@rg.tool(num_cpus=0)
def think(seconds: float) -> str:
    """Think a while."""
    time.sleep(seconds)
    return "thought"


def replier(req: rg.ModelRequest) -> rg.ModelResponse:
    """Thinks (as long as a user message 'slow N' says) once, then answers with every user
    message it has seen, in order."""
    users = [m.text or "" for m in req.messages if m.role == "user"]
    if req.messages[-1].role == "user" and users[-1].startswith("slow "):
        return calls(call("think", {"seconds": float(users[-1].split()[1])}, id=f"t{len(users)}"))
    return text(" | ".join(users))


AGENTS = [
    rg.Agent("chat", tools=[think], model=FunctionModel(replier), session=rg.MemorySession()),
    rg.Agent("echo", model=FunctionModel(lambda req: text("done"))),
]


@pytest.fixture(scope="module")
def durable(
    ray_session: None, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[Served, str]]:
    """The module's agents served on a namespace of their own with a ``file://`` store (a
    memory store keeps nothing across a restart of the keeper), in ``async`` durability (the
    replicas and the keeper join the coordinator with its durability, whatever it is)."""
    from ray import cloudpickle, serve

    import raygents.serve as rgs

    cloudpickle.register_pickle_by_value(request.module)
    store: Path = tmp_path_factory.mktemp("keeper") / "store"
    namespace = f"keeper-{os.urandom(3).hex()}"
    rg.shutdown()
    rg.init(namespace=namespace, store=f"file://{store}", durability="async")
    url = start(AGENTS, auth_token=TOKEN, webhook_networks=["127.0.0.0/8"])
    http = client(url, TOKEN)
    try:
        yield Served(url, TOKEN, http), namespace
    finally:
        http.close()
        rgs.stop()
        serve.shutdown()
        rg.shutdown()


def kill_keeper(namespace: str) -> None:
    """Kill the app's keeper actor (Ray restarts it: it is the app's, and has no limit of
    restarts)."""
    import ray

    keeper = ray.get_actor("raygents-serve-keeper:/", namespace=namespace)
    ray.kill(keeper, no_restart=False)


def post(served: Served, thread: str, message: str, **options: Any) -> Any:
    return served.post(f"/v1/threads/{thread}/runs", {"agent": "chat", "input": message, **options})


def until_answers(served: Served, path: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """``path``'s document once the app answers it (while the keeper restarts, it may not)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = served.get(path)
        if answer.status_code == 200:
            return answer.json()  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.2)


def test_queued_messages_run_in_order_after_the_keeper_restarts(
    durable: tuple[Served, str],
) -> None:
    served, namespace = durable
    first = post(served, "t-durable", "slow 6").json()["run_id"]
    queued = [post(served, "t-durable", f"m{i}", if_busy="enqueue").json() for i in range(3)]
    assert all(q["status"] == "queued" for q in queued), queued
    kill_keeper(namespace)
    thread = until_answers(served, "/v1/threads/t-durable")
    assert [r["run_id"] for r in thread["runs"]] == [first, *(q["run_id"] for q in queued)]
    busy = post(served, "t-durable", "too soon")  # (the restarted keeper knows what runs)
    assert busy.status_code == 409 and busy.json()["error"]["type"] == "ThreadBusy", busy.text
    for q in queued:
        served.until(q["run_id"], "completed", timeout_s=90)
    thread = served.get("/v1/threads/t-durable").json()
    users = [m["content"] for m in thread["messages"] if m["role"] == "user"]
    assert users == ["slow 6", "m0", "m1", "m2"]  # each message once, in order
    last = served.get(f"/v1/runs/{queued[-1]['run_id']}").json()
    assert last["output"] == "slow 6 | m0 | m1 | m2"


class Receiver(http.server.ThreadingHTTPServer):
    """Takes webhooks on 127.0.0.1, answering the first ``fail`` with a 500."""

    def __init__(self, fail: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fail = fail
        self.got: list[tuple[dict[str, str], bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.got.append((dict(self.headers), body))
        self.send_response(500 if len(self.server.got) <= self.server.fail else 204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(fail=3)  # (retries after 1, 2 and 4 s: the keeper dies in between)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_pending_webhook_is_delivered_after_the_keeper_restarts(
    durable: tuple[Served, str], receiver: Receiver
) -> None:
    served, namespace = durable
    body = {"agent": "echo", "input": "x", "webhook": receiver.url}
    run = served.post("/v1/runs", body).json()["run_id"]
    deadline = time.monotonic() + 30
    while not receiver.got:  # (the first attempt failed: the delivery is under way)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    kill_keeper(namespace)
    deadline = time.monotonic() + 60
    while True:
        hook = until_answers(served, f"/v1/runs/{run}")["webhook"]
        if hook is not None and hook["state"] != "pending":
            break
        assert time.monotonic() < deadline, hook
        time.sleep(0.2)
    assert hook["state"] == "delivered", hook
    assert len(receiver.got) >= 4  # (three failures, then the delivery)
    assert len({b for _, b in receiver.got}) == 1  # the same body every time,
    assert len({h["X-Raygents-Signature"] for h, _ in receiver.got}) == 1  # so the same signature
    assert json.loads(receiver.got[0][1])["run_id"] == run
    seen = len(receiver.got)
    kill_keeper(namespace)  # a delivery made is not made again
    hook = until_answers(served, f"/v1/runs/{run}")["webhook"]
    assert hook is not None and hook["state"] == "delivered", hook
    time.sleep(1.0)
    assert len(receiver.got) == seen
