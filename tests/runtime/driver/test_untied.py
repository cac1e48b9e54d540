"""A run is not the Ray task's that started it: cancelling that task (as Serve does to a
request whose HTTP client hung up) leaves the run going to its end."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import ray

import raygents as rg
from raygents.runtime.driver.client import current
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.ray


@rg.tool(num_cpus=0)
def nap(ctx: rg.ToolContext, seconds: float) -> str:
    """Sleep a while."""
    Path(ctx.context["marker"]).touch()
    time.sleep(seconds)
    return "rested"


def napper(req: rg.ModelRequest) -> rg.ModelResponse:
    naps = sum(m.role == "tool" for m in req.messages)
    return calls(call("nap", {"seconds": 0.5}, id=f"n{naps}")) if naps < 3 else text("rested")


@ray.remote(num_cpus=0)
class Starter:
    """Another driver in an async actor, as a Serve replica is."""

    def __init__(self, namespace: str, store: str) -> None:
        rg.init(namespace=namespace, store=store, detached=True, handle_sigterm=False)

    def ready(self) -> bool:
        return True

    async def run(self, agent: rg.Agent, run_id: str, marker: str) -> str:
        handle = rg.start(agent, "rest", run_id=run_id, context={"marker": marker})
        return str((await handle).final_output)


def test_cancelling_the_task_that_started_a_run_leaves_the_run_going(
    rt: None, tmp_path: Path
) -> None:
    runtime = current()
    starter = Starter.remote(runtime.namespace, runtime.settings.store)
    ray.get(starter.ready.remote(), timeout=60)
    agent = rg.Agent("untied-napper", tools=[nap], model=FunctionModel(napper))
    marker = tmp_path / "napping"
    waiting = starter.run.remote(agent, "untied-1", str(marker))
    deadline = time.monotonic() + 60
    while not marker.exists():  # (mid-run: the first nap under way)
        assert time.monotonic() < deadline
        time.sleep(0.02)
    ray.cancel(waiting)  # (recursive, as Serve's is)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(waiting, timeout=30)
    result = rg.attach("untied-1").result(timeout_s=60)
    assert result.final_output == "rested" and result.turns == 4
    ray.kill(starter)
