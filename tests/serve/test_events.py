"""A run's events over SSE: history then live events, ids in sequence, the end after the
terminal event, reconnecting with Last-Event-ID, heartbeats, and a replica killed mid-stream."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import ray
from servekit import Frame, Served, read_sse

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.ray


@rg.tool(num_cpus=0)
def step(n: int, seconds: float) -> str:
    """A step that takes a while."""
    time.sleep(seconds)
    return f"step {n}"


def stepper(req: rg.ModelRequest) -> rg.ModelResponse:
    done = sum(m.role == "tool" for m in req.messages)
    seconds = float(next(m.text for m in req.messages if m.role == "user") or 0)
    if done < 3:
        return calls(call("step", {"n": done, "seconds": seconds}, id=f"s{done}"))
    return text(f"done after {done}")


AGENTS = {"stepper": rg.Agent("stepper", tools=[step], model=FunctionModel(stepper))}


def check_sequence(frames: list[Frame]) -> None:
    """The frames' ids count up by one from the first, which is 1 unless a client asked for
    what came after an id."""
    ids = [f.id for f in frames if f.id is not None]
    assert ids
    assert ids == list(range(ids[0], ids[0] + len(ids)))


def test_an_ended_runs_events_replay_in_order_and_end(served: Served) -> None:
    run = served.post("/v1/runs", {"agent": "stepper", "input": "0", "wait": True}).json()
    frames, _ = read_sse(served.client, f"/v1/runs/{run['run_id']}/events")
    check_sequence(frames)
    assert next(f.id for f in frames if f.id is not None) == 1
    assert frames[-1].event == "complete" and frames[-1].data["output"] == "done after 3"
    assert [f.data["tool_name"] for f in frames if f.event == "tool_end"] == ["step"] * 3
    assert all(f.data["run_id"] == run["run_id"] and f.event == f.data["type"] for f in frames)


def test_last_event_id_gives_only_what_came_after(served: Served) -> None:
    run = served.post("/v1/runs", {"agent": "stepper", "input": "0", "wait": True}).json()
    path = f"/v1/runs/{run['run_id']}/events"
    everything, _ = read_sse(served.client, path)
    numbered = [f for f in everything if f.id is not None]
    later, _ = read_sse(served.client, path, last_id=numbered[2].id)
    assert [f.id for f in later] == [f.id for f in numbered[3:]]
    assert [f.data for f in later] == [f.data for f in numbered[3:]]
    assert read_sse(served.client, path, last_id=numbered[-1].id)[0] == []


def test_a_live_run_streams_until_it_ends_with_heartbeats(served: Served) -> None:
    run = served.post("/v1/runs", {"agent": "stepper", "input": "1.2"}).json()
    frames, comments = read_sse(served.client, f"/v1/runs/{run['run_id']}/events")
    check_sequence(frames)
    assert frames[-1].event == "complete"
    assert "heartbeat" in comments  # (1 s heartbeats here; a step takes 1.2 s)


def test_reconnecting_through_a_new_replica_misses_nothing(served: Served) -> None:
    run = served.post("/v1/runs", {"agent": "stepper", "input": "1.5"}).json()["run_id"]
    path = f"/v1/runs/{run}/events"
    first, _ = read_sse(served.client, path, limit=2)
    check_sequence(first)
    replicas = [
        a
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("SERVE_REPLICA::raygents#")
    ]
    assert replicas, "no replica of the app"
    for replica in replicas:
        ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=False)
    rest = _reconnect(served, path, first[-1].id)
    check_sequence(first + rest)
    assert rest[-1].event == "complete" and rest[-1].data["output"] == "done after 3"


def _reconnect(served: Served, path: str, last_id: int) -> list[Frame]:
    deadline = time.monotonic() + 60
    while True:
        try:
            frames, _ = read_sse(served.client, path, last_id=last_id)
            return frames
        except (httpx.HTTPError, AssertionError):
            assert time.monotonic() < deadline, "the app did not come back"
            time.sleep(0.5)


def test_events_of_an_unknown_run_are_404(served: Served) -> None:
    assert served.get("/v1/runs/nobody/events").status_code == 404


def test_many_readers_of_one_run_get_the_same_events(served: Served) -> None:
    run = served.post("/v1/runs", {"agent": "stepper", "input": "0.5"}).json()["run_id"]
    seen: list[list[int]] = []

    def read() -> None:
        frames, _ = read_sse(served.client, f"/v1/runs/{run}/events")
        seen.append([f.id for f in frames])

    readers = [threading.Thread(target=read) for _ in range(8)]
    for r in readers:
        r.start()
    for r in readers:
        r.join(60)
    assert len(seen) == 8 and all(ids == seen[0] for ids in seen) and seen[0]
