"""A run past its tenant's limit of runs in flight is 429 ``TooManyRuns`` over HTTP (the app
on a namespace of its own whose coordinator admits one run at a time)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from servekit import TOKEN, Served, client, start

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.ray


@rg.tool(num_cpus=0)
def hold(seconds: float) -> str:
    """Hold the run in flight a while."""
    time.sleep(seconds)
    return "held"


def holder(req: rg.ModelRequest) -> rg.ModelResponse:
    if not any(m.role == "tool" for m in req.messages):
        return calls(call("hold", {"seconds": 3.0}, id="h1"))
    return text("released")


AGENTS = [rg.Agent("holder", tools=[hold], model=FunctionModel(holder))]


@pytest.fixture(scope="module")
def limited(ray_session: None, request: pytest.FixtureRequest) -> Iterator[Served]:
    from ray import cloudpickle, serve

    import raygents.serve as rgs

    cloudpickle.register_pickle_by_value(request.module)
    rg.shutdown()
    rg.init(
        namespace=f"serve-limited-{os.urandom(3).hex()}", store="memory://", max_concurrent_runs=1
    )
    url = start(AGENTS, auth_token=TOKEN)
    http = client(url, TOKEN)
    try:
        yield Served(url, TOKEN, http)
    finally:
        http.close()
        rgs.stop()
        serve.shutdown()
        rg.shutdown()
        rg.init(store="memory://")  # (the session's raygents, as the other tests expect)


def test_a_run_past_the_limit_is_429(limited: Served) -> None:
    first = limited.post("/v1/runs", {"agent": "holder", "input": "go"})
    assert first.status_code == 201, first.text
    second = limited.post("/v1/runs", {"agent": "holder", "input": "go"})
    assert second.status_code == 429, second.text
    assert second.json()["error"]["type"] == "TooManyRuns"
    limited.until(first.json()["run_id"], "completed", timeout_s=60)
    third = limited.post("/v1/runs", {"agent": "holder", "input": "go", "wait": True})
    assert third.status_code == 201 and third.json()["output"] == "released"
