"""History, fork and replay over HTTP: a run's checkpoints, a fork that re-asks a completed
run and one from an earlier checkpoint, replay with the same and with changed agent code, and
the errors (unknown run or agent, taken id, bad body, a seq the run lacks)."""

from __future__ import annotations

import pytest
from servekit import Served

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.ray


@rg.tool(num_cpus=0)
def look(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


@rg.tool(num_cpus=0, name="lookup")
def look_renamed(city: str) -> str:
    """The weather in a city (the new name of look)."""
    raise AssertionError("a replay runs no tool")


def weather(req: rg.ModelRequest) -> rg.ModelResponse:
    """Looks the weather up once, then answers with every user message it has seen."""
    if not any(m.role == "tool" for m in req.messages):
        return calls(call("look", {"city": "Paris"}))
    return text("answers to: " + " | ".join(m.text or "" for m in req.messages if m.role == "user"))


AGENTS = {
    "forecaster": rg.Agent("forecaster", tools=[look], model=FunctionModel(weather)),
    # the same agent's next version, whose tool was renamed (served for replay only)
    "forecaster-v2": rg.Agent("forecaster", tools=[look_renamed], model=FunctionModel(weather)),
}


def _completed(served: Served, text_in: str = "Weather in Paris?") -> dict[str, object]:
    body = {"agent": "forecaster", "input": text_in, "wait": True}
    doc = served.post("/v1/runs", body).json()
    assert doc["status"] == "completed", doc
    return doc  # type: ignore[no-any-return]


def test_history_lists_a_runs_checkpoints(served: Served) -> None:
    run = _completed(served)
    answer = served.get(f"/v1/runs/{run['run_id']}/history")
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert doc["run_id"] == run["run_id"]
    (final,) = doc["checkpoints"]  # (a completed run keeps its final state by default)
    assert final["reason"] == "final" and final["agent_name"] == "forecaster"
    assert final["messages"] == 4 and final["last"].startswith("assistant: answers to:")
    assert final["turn"] == 2 and final["seq"] >= 1 and "T" in final["at"]


def test_fork_re_asks_a_completed_run(served: Served) -> None:
    run = _completed(served)
    body = {"agent": "forecaster", "input": "And tomorrow?", "run_id": "fork-1", "wait": True}
    answer = served.post(f"/v1/runs/{run['run_id']}/fork", body)
    assert answer.status_code == 201, answer.text
    fork = answer.json()
    assert fork["run_id"] == "fork-1" and fork["status"] == "completed"
    assert fork["output"] == "answers to: Weather in Paris? | And tomorrow?"
    source = served.get(f"/v1/runs/{run['run_id']}").json()
    assert source["output"] == run["output"]  # (the source is untouched)
    again = served.post(f"/v1/runs/{run['run_id']}/fork", {"agent": "forecaster"})
    assert again.status_code == 201 and again.json()["status"] in ("queued", "running", "completed")
    assert again.json()["run_id"] not in (run["run_id"], "fork-1")
    served.until(again.json()["run_id"], "completed")


def test_replay_reports_whether_served_code_makes_the_same_decisions(served: Served) -> None:
    run = _completed(served)
    same = served.post(f"/v1/runs/{run['run_id']}/replay", {"agent": "forecaster"})
    assert same.status_code == 200, same.text
    assert same.json() == {
        "run_id": run["run_id"],
        "ok": True,
        "turn": None,
        "expected": None,
        "got": None,
        "checked": 4,
    }
    renamed = served.post(f"/v1/runs/{run['run_id']}/replay", {"agent": "forecaster-v2"}).json()
    assert renamed["ok"] is False and renamed["turn"] == 1
    assert "unknown tool 'look'" in renamed["got"]


def _error(answer: object, status: int, kind: str | None = None) -> dict[str, object]:
    assert answer.status_code == status, answer.text  # type: ignore[attr-defined]
    error = answer.json()["error"]  # type: ignore[attr-defined]
    assert set(error) >= {"type", "message"} and "Traceback" not in error["message"]
    if kind is not None:
        assert error["type"] == kind, error
    return error  # type: ignore[no-any-return]


def test_errors_are_the_apis(served: Served) -> None:
    run = _completed(served)["run_id"]
    for method, path, body in [
        ("get", "/v1/runs/nobody-here/history", None),
        ("post", "/v1/runs/nobody-here/fork", {"agent": "forecaster"}),
        ("post", "/v1/runs/nobody-here/replay", {"agent": "forecaster"}),
    ]:
        answer = served.get(path) if method == "get" else served.post(path, body)
        _error(answer, 404, "RunNotFound")
    _error(served.post(f"/v1/runs/{run}/fork", {"agent": "nobody"}), 404, "AgentNotFound")
    _error(served.post(f"/v1/runs/{run}/replay", {"agent": "nobody"}), 404, "AgentNotFound")
    for taken in (run, _completed(served, "other")["run_id"]):
        body = {"agent": "forecaster", "run_id": taken}
        _error(served.post(f"/v1/runs/{run}/fork", body), 409, "RunExists")
    for bad in [
        {},
        {"agent": "forecaster", "at": 0},
        {"agent": "forecaster", "at": "1"},
        {"agent": "forecaster", "unknown": 1},
        {"agent": "forecaster", "run_id": "a/../b"},
        {"agent": "forecaster", "input": [{"role": "wizard"}]},
        {"agent": "forecaster", "webhook": "http://169.254.169.254/x"},
    ]:
        _error(served.post(f"/v1/runs/{run}/fork", bad), 422)
    missing = _error(served.post(f"/v1/runs/{run}/fork", {"agent": "forecaster", "at": 99}), 422)
    assert missing["type"] == "CheckpointNotFound" and missing["field"] == "at"
    _error(served.post(f"/v1/runs/{run}/replay", {"agent": "forecaster", "at": 1}), 422)
    _error(served.post(f"/v1/runs/{run}/replay", [1]), 422)
    _error(served.get("/v1/runs/a..b/history"), 422)
    _error(served.post(f"/v1/runs/{run}/replay", content=b"{", headers={}), 400, "InvalidJSON")


def test_the_routes_are_in_the_openapi_document(served: Served) -> None:
    paths = served.get("/openapi.json").json()["paths"]
    assert set(paths["/v1/runs/{run_id}/history"]) == {"get"}
    fork = paths["/v1/runs/{run_id}/fork"]["post"]
    assert "201" in fork["responses"] and "409" in fork["responses"]
    schema = fork["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["agent"] and "at" in schema["properties"]
    replay = paths["/v1/runs/{run_id}/replay"]["post"]
    assert replay["requestBody"]["content"]["application/json"]["schema"]["required"] == ["agent"]
