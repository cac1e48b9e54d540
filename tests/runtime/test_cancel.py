"""Cancel: a run stops at once (its model call abandoned, its tool tasks cancelled through Ray,
its agent-as-tool children cancelled), its status is ``cancelled``, ``result()`` raises
``RunCancelled``, and its records stay."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
import ray
from spaces import Namespaces

import raygents as rg
from raygents.errors import CANCEL
from raygents.runtime.actor.children import child_run_id
from raygents.runtime.driver.client import current
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@pytest.fixture
def store(module_raygents: Namespaces) -> str:
    """raygents on the module's namespace over a file store (its tests share both)."""
    return module_raygents.file_store()


@rg.tool(num_cpus=1)
def long_job(ctx: rg.ToolContext, step: int) -> str:
    """Hold a CPU for a long time, noting that it started and whether it finished (in short
    sleeps: Ray's cancel raises KeyboardInterrupt between them)."""
    path = ctx.context["marks"]
    with open(f"{path}/started-{step}", "w"):
        pass
    for _ in range(600):
        time.sleep(0.1)
    with open(f"{path}/finished-{step}", "w"):
        pass
    return "done"


@rg.tool(num_cpus=0)
def quick_job(step: int) -> str:
    """Return at once."""
    return f"quick {step}"


def _one_tool_then_answer(tool: str):  # type: ignore[no-untyped-def]
    def reply(request: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        if done >= 2:
            return text("finished")
        name = "quick_job" if done == 0 else tool
        return calls(call(name, {"step": done}, id=f"c{done}"))

    return reply


def _wait_for(predicate, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _cpus_free() -> bool:
    return ray.available_resources().get("CPU", 0) == ray.cluster_resources().get("CPU", 0)


def test_cancel_stops_a_run_and_its_tool_task_and_keeps_its_records(
    store: str, tmp_path: Path
) -> None:
    agent = rg.Agent(
        "cancelled_worker",
        tools=[quick_job, long_job],
        model=FunctionModel(_one_tool_then_answer("long_job")),
    )
    handle = rg.start(agent, "go", context={"marks": str(tmp_path)})
    _wait_for(lambda: (tmp_path / "started-1").exists())
    cancelled_at = time.monotonic()
    handle.cancel()
    with pytest.raises(rg.RunCancelled) as info:
        handle.result(timeout_s=60)
    assert time.monotonic() - cancelled_at < 30, "it did not wait for the 60 s tool"
    assert info.value.run_id == handle.run_id
    assert handle.status() == "cancelled"
    assert [e.type for e in handle.events()][-1] == "error"
    _wait_for(_cpus_free, 30)  # the tool's task was cancelled: its CPU is free again
    assert not (tmp_path / "finished-1").exists()
    cancelled = {i.run_id: i for i in rg.runs(status="cancelled")}
    assert handle.run_id in cancelled
    records = Path(store.removeprefix("file://")) / "runs" / handle.run_id
    assert list(records.glob("*.ckpt")), "records stay"
    with pytest.raises(rg.UserError, match="cancelled"):
        rg.resume(handle.run_id, agent=agent)
    attached = rg.attach(handle.run_id)
    with pytest.raises(rg.RunCancelled):
        attached.result(timeout_s=30)


def test_cancel_abandons_the_model_call_in_flight(store: str) -> None:
    agent = rg.Agent("slow_thinker", model=FunctionModel(lambda r: text("late"), latency_s=60))
    handle = rg.start(agent, "go")
    time.sleep(1.0)
    started = time.monotonic()
    rg.cancel(handle.run_id)
    with pytest.raises(rg.RunCancelled):
        handle.result(timeout_s=60)
    assert time.monotonic() - started < 30


def test_cancel_reaches_agent_as_tool_children(store: str, tmp_path: Path) -> None:
    child = rg.Agent(
        "cancelled_child",
        tools=[quick_job, long_job],
        model=FunctionModel(_one_tool_then_answer("long_job")),
    )

    def parent_reply(request: rg.ModelRequest) -> rg.ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return text("parent done")
        return calls(call("helper", {"input": "work"}, id="h0"))

    parent = rg.Agent(
        "cancelled_parent",
        tools=[child.as_tool("helper", "Ask the helper.")],
        model=FunctionModel(parent_reply),
    )
    handle = rg.start(parent, "go", context={"marks": str(tmp_path)})
    _wait_for(lambda: (tmp_path / "started-1").exists())
    handle.cancel()
    with pytest.raises(rg.RunCancelled):
        handle.result(timeout_s=60)
    _wait_for(_cpus_free, 30)  # the child's tool task was cancelled too
    family = {handle.run_id, child_run_id(handle.run_id, "h0")}

    def cancelled() -> list[rg.RunInfo]:
        return [i for i in rg.runs(status="cancelled") if i.run_id in family]

    _wait_for(lambda: len(cancelled()) == 2, 30)
    assert {i.agent_name for i in cancelled()} == {
        "cancelled_parent",
        "cancelled_child",
    }


def test_a_cancel_through_the_coordinator_reaches_a_run_of_another_driver(
    store: str, tmp_path: Path
) -> None:
    """What ``raygents.cancel`` does for a run this driver has no handle of: the coordinator
    passes the request to its agent actors."""
    agent = rg.Agent(
        "remote_cancel",
        tools=[quick_job, long_job],
        model=FunctionModel(_one_tool_then_answer("long_job")),
    )
    handle = rg.start(agent, "go", context={"marks": str(tmp_path)})
    _wait_for(lambda: (tmp_path / "started-1").exists())
    rt = current()
    rt.ask(rt.directory.client.suspend([(handle.run_id, CANCEL)]))
    with pytest.raises(rg.RunCancelled):
        handle.result(timeout_s=60)
    _wait_for(_cpus_free, 30)


def test_cancel_of_an_unknown_or_ended_run(store: str) -> None:
    with pytest.raises(rg.RunNotFound):
        rg.cancel("no-such-run")
    agent = rg.Agent("ends_at_once", model=FunctionModel(lambda r: text("done")))
    handle = rg.start(agent, "go")
    assert handle.result(timeout_s=60).final_output == "done"
    handle.cancel()  # (too late: nothing changes)
    rg.cancel(handle.run_id)
    assert handle.status() == "completed"


def test_an_attached_handle_of_another_drivers_run_can_cancel_and_suspend_it(
    store: str, tmp_path: Path
) -> None:
    agent = rg.Agent(
        "attached_cancel",
        tools=[quick_job, long_job],
        model=FunctionModel(_one_tool_then_answer("long_job")),
    )
    handle = rg.start(agent, "go", context={"marks": str(tmp_path)})
    _wait_for(lambda: (tmp_path / "started-1").exists())
    current().handles.pop(handle.run_id)  # (as if another driver had started it)
    attached = rg.attach(handle.run_id)
    assert attached is not handle
    attached.cancel()
    with pytest.raises(rg.RunCancelled):
        attached.result(timeout_s=60)
    with pytest.raises(rg.RunCancelled):
        handle.result(timeout_s=60)
    _wait_for(_cpus_free, 30)


@rg.tool(num_cpus=1)
def stubborn_job(ctx: rg.ToolContext, step: int) -> str:
    """Hold a CPU, ignoring KeyboardInterrupt."""
    with open(f"{ctx.context['marks']}/started-{step}", "w"):
        pass
    for _ in range(600):
        with contextlib.suppress(KeyboardInterrupt):
            time.sleep(0.1)
    return "done"


def test_a_tool_that_ignores_the_interrupt_has_its_worker_killed(
    store: str, tmp_path: Path
) -> None:
    agent = rg.Agent(
        "stubborn_tools",
        tools=[quick_job, stubborn_job],
        model=FunctionModel(_one_tool_then_answer("stubborn_job")),
    )
    handle = rg.start(agent, "go", context={"marks": str(tmp_path)})
    _wait_for(lambda: (tmp_path / "started-1").exists())
    handle.cancel()
    with pytest.raises(rg.RunCancelled):
        handle.result(timeout_s=60)
    _wait_for(_cpus_free, 45)  # (after the grace, its worker is killed)
