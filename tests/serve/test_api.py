"""The HTTP API over real HTTP, on Ray Serve: auth, runs and their outcomes, every error's
status and shape, OpenAPI, the health check, approvals, cancel, suspend and resume."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel
from servekit import TOKEN, Served

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.ray


def last_user(req: rg.ModelRequest) -> str:
    return next(m.text or "" for m in reversed(req.messages) if m.role == "user")


class Weather(BaseModel):
    city: str
    degrees: int


@rg.tool(num_cpus=0)
def nap(seconds: float) -> str:
    """Sleep a while."""
    time.sleep(seconds)
    return f"slept {seconds}"


@rg.tool(num_cpus=0, needs_approval=True)
def wipe(target: str) -> str:
    """Wipe a target (needs a person's approval)."""
    return f"wiped {target}"


@rg.tool(on_recovery="ask", remote=False)
def charge(ctx: rg.ToolContext, amount: int) -> str:
    """Charge a card; the first call's agent process dies in it (a crash mid-call)."""
    marker = Path(ctx.context["marker"])
    if not marker.exists():
        marker.touch()
        os._exit(1)
    return f"charged {amount}"


def cashier(req: rg.ModelRequest) -> rg.ModelResponse:
    done = [m.text for m in req.messages if m.role == "tool"]
    return text(f"result: {done[0]}") if done else calls(call("charge", {"amount": 5}, id="c1"))


def napper(req: rg.ModelRequest) -> rg.ModelResponse:
    naps = sum(m.role == "tool" for m in req.messages)
    if naps < 3:
        return calls(call("nap", {"seconds": float(last_user(req) or 0.5)}, id=f"n{naps}"))
    return text(f"napped {naps} times")


def wiper(req: rg.ModelRequest) -> rg.ModelResponse:
    done = [m.text for m in req.messages if m.role == "tool"]
    if not done:
        return calls(call("wipe", {"target": "db"}, id="w1"))
    return text(f"result: {done[0]}")


def failing(req: rg.ModelRequest) -> rg.ModelResponse:
    raise rg.ModelError("the provider is down")


AGENTS = [
    rg.Agent("echo", model=FunctionModel(lambda req: text("echo: " + last_user(req)))),
    rg.Agent(
        "weather",
        model=FunctionModel(lambda req: text('{"city": "Oslo", "degrees": 4}')),
        output_type=Weather,
    ),
    rg.Agent("napper", tools=[nap], model=FunctionModel(napper)),
    rg.Agent("wiper", tools=[wipe], model=FunctionModel(wiper)),
    rg.Agent("failing", model=FunctionModel(failing)),
    rg.Agent("cashier", tools=[charge], model=FunctionModel(cashier)),
]


def error_of(answer: httpx.Response, status: int) -> dict[str, str]:
    assert answer.status_code == status, answer.text
    doc = answer.json()
    assert set(doc) == {"error"} and {"type", "message"} <= set(doc["error"]), doc
    assert "Traceback" not in answer.text
    return doc["error"]  # type: ignore[no-any-return]


# --- auth, health, OpenAPI --------------------------------------------------------------
def test_requests_without_the_token_are_refused(served: Served) -> None:
    bare = httpx.Client(base_url=served.url, timeout=30)
    error_of(bare.get("/v1/runs"), 401)
    error_of(bare.get("/v1/runs", headers={"Authorization": "Bearer nope"}), 401)
    error_of(bare.get("/v1/runs", headers={"Authorization": f"Basic {TOKEN}"}), 401)
    error_of(bare.post("/v1/runs", json={"agent": "echo", "input": "hi"}), 401)
    error_of(bare.get("/openapi.json"), 401)
    assert bare.get("/v1/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_health_and_the_page_answer_without_the_token(served: Served) -> None:
    bare = httpx.Client(base_url=served.url, timeout=30)
    assert bare.get("/healthz").json() == {"status": "ok"}
    page = bare.get("/")
    assert page.status_code == 200 and '<table id="runs">' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert TOKEN not in page.text
    assert "access-control-allow-origin" not in page.headers


def test_the_openapi_document_names_every_route(served: Served) -> None:
    doc = served.get("/openapi.json").json()
    paths = doc["paths"]
    for path in (
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/v1/runs/{run_id}/messages",
        "/v1/runs/{run_id}/events",
        "/v1/runs/{run_id}/approvals",
        "/v1/runs/{run_id}/resolutions",
        "/v1/runs/{run_id}/cancel",
        "/v1/runs/{run_id}/suspend",
        "/v1/runs/{run_id}/resume",
        "/v1/threads/{thread_id}/runs",
        "/v1/threads/{thread_id}",
        "/healthz",
    ):
        assert path in paths, path
    body = paths["/v1/runs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"agent", "input", "wait", "webhook", "thread_id"} <= set(body["properties"])


# --- runs and outcomes ------------------------------------------------------------------
def test_a_run_with_wait_answers_with_its_outcome(served: Served) -> None:
    answer = served.post("/v1/runs", {"agent": "echo", "input": "hello", "wait": True})
    assert answer.status_code == 201, answer.text
    doc = answer.json()
    assert doc["status"] == "completed" and doc["output"] == "echo: hello"
    assert doc["last_agent"] == "echo" and doc["turns"] == 1 and doc["error"] is None
    assert doc["usage"]["requests"] == 1 and doc["pending"] == []
    messages = served.get(f"/v1/runs/{doc['run_id']}/messages").json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == "echo: hello"


def test_a_run_without_wait_answers_at_once_and_is_read_back(served: Served) -> None:
    answer = served.post("/v1/runs", {"agent": "napper", "input": "0.3", "run_id": "nap-1"})
    assert answer.status_code == 201, answer.text
    assert answer.json()["run_id"] == "nap-1"
    assert answer.json()["status"] in ("running", "completed")
    running = served.get("/v1/runs", params={"status": "running", "agent": "napper"}).json()
    if "nap-1" not in [r["run_id"] for r in running["runs"]]:  # (unless it ended already)
        assert served.get("/v1/runs/nap-1").json()["status"] == "completed"
    doc = served.until("nap-1", "completed")
    assert doc["output"] == "napped 3 times" and doc["turns"] == 4
    listed = served.get("/v1/runs", params={"agent": "napper", "status": "completed"}).json()
    assert "nap-1" in [r["run_id"] for r in listed["runs"]]
    assert served.get("/v1/runs", params={"limit": 1}).json()["runs"].__len__() == 1


def test_a_client_that_hangs_up_leaves_its_run_going(served: Served) -> None:
    # Serve cancels the request of a client that hangs up: the run it started is not the
    # request's, and goes on to its end (here mid-run, its first nap under way).
    body = {"agent": "napper", "input": "0.4", "run_id": "hung-up-1", "wait": True}
    with pytest.raises(httpx.ReadTimeout):
        served.post("/v1/runs", body, timeout=0.8)
    doc = served.until("hung-up-1", "completed", "failed", "cancelled")
    assert doc["status"] == "completed" and doc["output"] == "napped 3 times", doc


def test_typed_output_is_json(served: Served) -> None:
    doc = served.post("/v1/runs", {"agent": "weather", "input": "Oslo?", "wait": True}).json()
    assert doc["output"] == {"city": "Oslo", "degrees": 4}


def test_a_failed_run_is_an_outcome_not_an_http_error(served: Served) -> None:
    answer = served.post("/v1/runs", {"agent": "failing", "input": "x", "wait": True})
    assert answer.status_code == 201
    doc = answer.json()
    assert doc["status"] == "failed"
    assert doc["error"]["type"] == "ModelError" and "provider is down" in doc["error"]["message"]
    assert served.get(f"/v1/runs/{doc['run_id']}").json()["error"]["message"]


# --- errors -----------------------------------------------------------------------------
def test_bad_requests_get_their_status_and_one_error_shape(served: Served) -> None:
    assert error_of(served.post("/v1/runs", {"agent": "nobody", "input": "x"}), 404)["type"]
    bad = error_of(served.post("/v1/runs", {"agent": "echo"}), 422)
    assert bad["field"] == "input"
    bad = error_of(served.post("/v1/runs", {"agent": "echo", "input": "x", "max_turns": 0}), 422)
    assert bad["field"] == "max_turns"
    bad = error_of(served.post("/v1/runs", {"agent": "echo", "input": "x", "max_turns": "3"}), 422)
    assert bad["field"] == "max_turns"
    error_of(served.post("/v1/runs", {"agent": "echo", "input": "x", "colour": "red"}), 422)
    error_of(served.post("/v1/runs", [1, 2]), 422)
    error_of(served.client.post("/v1/runs", content=b"{not json"), 400)
    error_of(served.post("/v1/runs", {"agent": "echo", "input": [{"role": 3}]}), 422)
    error_of(served.get("/v1/runs/no-such-run"), 404)
    error_of(served.get("/v1/runs/no-such-run/messages"), 404)
    error_of(served.post("/v1/runs/no-such-run/cancel"), 404)
    error_of(served.get("/v1/nothing-here"), 404)
    error_of(served.client.delete("/v1/runs"), 405)
    error_of(served.get("/v1/runs", params={"limit": "lots"}), 422)


def test_a_run_id_in_use_is_a_conflict(served: Served) -> None:
    body = {"agent": "echo", "input": "x", "run_id": "taken-1", "wait": True}
    assert served.post("/v1/runs", body).status_code == 201
    assert error_of(served.post("/v1/runs", body), 409)["message"]


def test_input_over_the_payload_cap_is_413(served: Served) -> None:
    big = "x" * (rg.MAX_PAYLOAD_BYTES["run input"] + 10)
    assert error_of(served.post("/v1/runs", {"agent": "echo", "input": big}), 413)["type"]


# --- approvals, cancel, suspend, resume -------------------------------------------------
def test_a_run_awaiting_approval_goes_on_once_decided(served: Served) -> None:
    doc = served.post("/v1/runs", {"agent": "wiper", "input": "wipe it", "wait": True}).json()
    assert doc["status"] == "awaiting_approval"
    (pending,) = doc["pending"]
    assert pending["call_id"] == "w1" and pending["tool_name"] == "wipe"
    run = doc["run_id"]
    mismatch = error_of(served.post(f"/v1/runs/{run}/approvals", {"decisions": {"w9": True}}), 409)
    assert [p["call_id"] for p in mismatch["pending"]] == ["w1"]  # type: ignore[index]
    error_of(served.post(f"/v1/runs/{run}/approvals", {"decisions": {"w1": "yes"}}), 422)
    answer = served.post(f"/v1/runs/{run}/approvals", {"decisions": {"w1": True}})
    assert answer.status_code == 200, answer.text
    done = served.until(run, "completed")
    assert done["output"] == "result: wiped db"
    error_of(served.post(f"/v1/runs/{run}/approvals", {"decisions": {"w1": True}}), 409)


def test_a_run_in_doubt_goes_on_once_resolved(served: Served, tmp_path: Path) -> None:
    context = {"marker": str(tmp_path / "crashed")}
    body = {"agent": "cashier", "input": "charge 5", "context": context}
    run = served.post("/v1/runs", body).json()["run_id"]
    doc = served.until(run, "in_doubt", timeout_s=120)
    (doubt,) = doc["in_doubt"]
    assert (doubt["call_id"], doubt["tool_name"]) == ("c1", "charge")
    assert doubt["idempotency_key"] == f"{run}:c1"
    path = f"/v1/runs/{run}/resolutions"
    mismatch = error_of(served.post(path, {"resolutions": {"c9": "rerun"}}), 409)
    assert mismatch["type"] == "ResolutionsMismatch"
    assert [d["call_id"] for d in mismatch["in_doubt"]] == ["c1"]  # type: ignore[index]
    error_of(served.post(path, {"resolutions": {"c1": "again"}}), 422)
    error_of(served.post(path, {"resolutions": {"c1": {"content": 5}}}), 422)
    answer = served.post(path, {"resolutions": {"c1": {"content": "declined", "is_error": True}}})
    assert answer.status_code == 200, answer.text
    assert served.until(run, "completed")["output"] == "result: declined"
    error_of(served.post(path, {"resolutions": {"c1": "rerun"}}), 409)


def test_a_denial_with_a_message_reaches_the_model(served: Served) -> None:
    doc = served.post("/v1/runs", {"agent": "wiper", "input": "wipe", "wait": True}).json()
    decision = {"approved": False, "message": "not today"}
    served.post(f"/v1/runs/{doc['run_id']}/approvals", {"decisions": {"w1": decision}})
    assert served.until(doc["run_id"], "completed")["output"] == "result: not today"


def test_cancel_stops_a_running_run(served: Served) -> None:
    run = served.post("/v1/runs", {"agent": "napper", "input": "5"}).json()["run_id"]
    answer = served.post(f"/v1/runs/{run}/cancel")
    assert answer.status_code == 200, answer.text
    doc = served.until(run, "cancelled", timeout_s=20)
    assert doc["error"]["type"] == "RunCancelled"
    error_of(served.post(f"/v1/runs/{run}/cancel"), 409)
    error_of(served.post(f"/v1/runs/{run}/resume"), 409)


def test_suspend_then_resume(served: Served) -> None:
    run = served.post("/v1/runs", {"agent": "napper", "input": "1"}).json()["run_id"]
    assert served.post(f"/v1/runs/{run}/suspend").status_code == 200
    served.until(run, "suspended", timeout_s=20)
    assert served.post(f"/v1/runs/{run}/resume").status_code == 200
    assert served.until(run, "completed", timeout_s=30)["output"] == "napped 3 times"


class _HandsOffSlowly(rg.AgentHooks):
    """Holds a handoff until the file the run's context names exists (60 s at most), so
    that a request comes before the handoff's target has an actor."""

    async def on_handoff(self, ctx: rg.RunContext, *agents: rg.Agent) -> None:
        gate = Path(ctx.context["gate"])
        (gate.parent / "handing_off").touch()
        deadline = time.monotonic() + 60
        while not gate.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


def test_a_driver_run_suspended_over_http_on_its_way_to_a_new_actor_suspends(
    served: Served, tmp_path: Path
) -> None:
    """A suspend the coordinator passes on during a handoff to an agent that has no actor
    yet reaches the run there (the handoff's source hands the run on without it)."""
    closing = rg.Agent("http_closer", model=FunctionModel(lambda req: text("closed")))
    route = FunctionModel(lambda req: calls(call("transfer_to_http_closer", {}, id="h")))
    opener = rg.Agent("http_opener", handoffs=[closing], model=route, hooks=_HandsOffSlowly())
    gate = tmp_path / "gate"
    handle = rg.start(opener, "go", context={"gate": str(gate)})
    deadline = time.monotonic() + 60
    while not (tmp_path / "handing_off").exists():
        assert time.monotonic() < deadline, "the handoff never began"
        time.sleep(0.05)
    # (answered once the coordinator has the request: the target's actor, made after, gets it)
    assert served.post(f"/v1/runs/{handle.run_id}/suspend").status_code == 200
    gate.touch()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    doc = served.until(handle.run_id, "suspended", timeout_s=20)
    assert doc["last_agent"] == "http_closer"


def test_the_token_is_in_no_log(served: Served) -> None:
    import pathlib

    import ray

    bare = httpx.Client(base_url=served.url, timeout=30)
    bare.get("/v1/runs", headers={"Authorization": f"Bearer {TOKEN}x"})  # (a wrong one too)
    served.post("/v1/runs", {"agent": "echo", "input": "log me", "wait": True})
    logs = pathlib.Path(ray._private.worker._global_node.get_logs_dir_path())
    files = [p for p in logs.rglob("*") if p.is_file() and p.stat().st_size < 50_000_000]
    assert any("serve" in str(p) for p in files)
    leaked = [p for p in files if TOKEN.encode() in p.read_bytes()]
    assert leaked == []
