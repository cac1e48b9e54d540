"""A suspend request reaches the dispatch of a run it was made for, never a later one: a copy
that arrives after the run suspended does not suspend its resume."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import raygents as rg
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.errors import SUSPEND_FOR_CHECKPOINT
from raygents.runtime.driver.client import current
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@pytest.fixture
def store(own_raygents: None, tmp_path: Path) -> Iterator[str]:
    url = f"file://{tmp_path / 'ckpt'}"
    rg.shutdown()
    rg.init(namespace=f"stale-{os.urandom(3).hex()}", store=url)
    yield url
    rg.shutdown()


@rg.tool
def note(ctx: rg.ToolContext) -> str:
    """Mark that the run got this far."""
    Path(ctx.context["marks"], "noted").touch()
    return "noted"


def _note_then_answer(req: ModelRequest) -> ModelResponse:
    if any(m.role == "tool" for m in req.messages):
        return text("done")
    return calls(call("note"))


def test_a_suspend_request_that_arrives_after_the_run_suspended_spares_its_resume(
    store: str, tmp_path: Path
) -> None:
    agent = rg.Agent("stale_suspend", tools=[note], model=FunctionModel(_note_then_answer))
    handle = rg.start(agent, "go", context={"marks": str(tmp_path)})
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    # a copy of the request (another driver's, the CLI's) comes after the run suspended
    rt = current()
    rt.ask(rt.directory.client.suspend([(handle.run_id, SUSPEND_FOR_CHECKPOINT)]))
    resumed = rg.resume(handle.run_id, agent=agent, context={"marks": str(tmp_path)})
    assert resumed.result(timeout_s=60).final_output == "done"
