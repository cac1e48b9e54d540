"""Threads over HTTP: a conversation across runs, and a message to a busy thread rejected,
queued in order, or interrupting the run in flight; nothing lost or interleaved."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import httpx
import pytest
from servekit import Served

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.ray


@rg.tool(num_cpus=0)
def think(seconds: float) -> str:
    """Think a while."""
    time.sleep(seconds)
    return "thought"


def replier(req: rg.ModelRequest) -> rg.ModelResponse:
    """Thinks (as long as the last user message says after 'slow ') once per message, then
    answers with every user message it has seen, in order."""
    users = [m.text or "" for m in req.messages if m.role == "user"]
    last = req.messages[-1]
    if last.role == "user" and users[-1].startswith("slow "):
        return calls(call("think", {"seconds": float(users[-1].split()[1])}, id=f"t{len(users)}"))
    return text(" | ".join(users))


AGENTS = [rg.Agent("chat", tools=[think], model=FunctionModel(replier), session=rg.MemorySession())]


def post(
    served: Served, thread: str, message: str, timeout: float | None = None, **options: Any
) -> Any:
    body = {"agent": "chat", "input": message, **options}
    return served.post(
        f"/v1/threads/{thread}/runs", body, **({"timeout": timeout} if timeout else {})
    )


def test_a_thread_keeps_its_conversation(served: Served) -> None:
    first = post(served, "t-conv", "hello", wait=True).json()
    assert first["output"] == "hello" and first["thread_id"] == "t-conv"
    second = post(served, "t-conv", "again", wait=True).json()
    assert second["output"] == "hello | again"
    thread = served.get("/v1/threads/t-conv").json()
    assert [r["run_id"] for r in thread["runs"]] == [first["run_id"], second["run_id"]]
    assert [m["content"] for m in thread["messages"] if m["role"] == "user"] == ["hello", "again"]
    listed = served.get("/v1/runs", params={"thread_id": "t-conv"}).json()["runs"]
    assert {r["run_id"] for r in listed} == {first["run_id"], second["run_id"]}


def test_thread_id_in_a_run_body_is_the_same_thread(served: Served) -> None:
    body = {"agent": "chat", "input": "via runs", "thread_id": "t-body", "wait": True}
    assert served.post("/v1/runs", body).json()["output"] == "via runs"
    assert post(served, "t-body", "then", wait=True).json()["output"] == "via runs | then"


def test_a_busy_thread_rejects_by_default(served: Served) -> None:
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda m: post(served, "t-rej", m), ["slow 2", "b", "c", "d"]))
    assert sorted(a.status_code for a in answers).count(201) >= 1
    refused = [a for a in answers if a.status_code == 409]
    assert refused and all(a.json()["error"]["type"] == "ThreadBusy" for a in refused)
    started = [a.json()["run_id"] for a in answers if a.status_code == 201]
    for run in started:
        served.until(run, "completed", timeout_s=30)
    thread = served.get("/v1/threads/t-rej").json()
    users = [m["content"] for m in thread["messages"] if m["role"] == "user"]
    assert len(users) == len(started)


def test_enqueued_messages_run_in_order(served: Served) -> None:
    assert post(served, "t-q", "slow 1").status_code == 201
    messages = [f"m{i}" for i in range(5)]
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(lambda m: post(served, "t-q", m, if_busy="enqueue"), messages))
    assert all(a.status_code == 201 for a in answers), [a.text for a in answers]
    runs = [a.json()["run_id"] for a in answers]
    for run in runs:
        served.until(run, "completed", timeout_s=60)
    thread = served.get("/v1/threads/t-q").json()
    users = [m["content"] for m in thread["messages"] if m["role"] == "user"]
    order = [r["run_id"] for r in thread["runs"]]
    sent = [m for _, m in sorted(zip([order.index(r) for r in runs], messages, strict=True))]
    assert users == ["slow 1", *sent]  # every message once, in the order the thread took them
    last = served.get(f"/v1/runs/{order[-1]}").json()
    assert last["output"] == " | ".join(users)


def test_an_interrupt_cancels_the_run_in_flight_and_keeps_its_history(served: Served) -> None:
    first = post(served, "t-int", "slow 20").json()["run_id"]
    served.until(first, "running")
    time.sleep(0.5)
    second = post(served, "t-int", "stop that", if_busy="interrupt", wait=True).json()
    assert served.get(f"/v1/runs/{first}").json()["status"] == "cancelled"
    assert second["status"] == "completed"
    assert second["output"] == "slow 20 | stop that"
    users = [
        m["content"]
        for m in served.get("/v1/threads/t-int").json()["messages"]
        if m["role"] == "user"
    ]
    assert users == ["slow 20", "stop that"]


def test_a_client_that_hangs_up_on_a_thread_leaves_its_run_and_the_thread_going(
    served: Served,
) -> None:
    with pytest.raises(httpx.ReadTimeout):
        post(served, "t-hung", "slow 1", run_id="t-hung-1", wait=True, timeout=0.5)
    assert served.until("t-hung-1", "completed")["output"] == "slow 1"
    assert post(served, "t-hung", "next", wait=True).json()["output"] == "slow 1 | next"


def test_threads_refuse_bad_ids_and_unknown_threads(served: Served) -> None:
    assert served.get("/v1/threads/nobody-here").status_code == 404
    assert post(served, "a..b", "x").status_code == 422
    assert post(served, "%2E%2E", "x").status_code in (404, 422)
    assert post(served, "a%2F..%2Fb", "x").status_code in (404, 422)
    bad = served.post("/v1/threads/t-x/runs", {"agent": "chat", "input": "x", "thread_id": "y"})
    assert bad.status_code == 422
