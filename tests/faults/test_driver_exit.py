"""Runs and their drivers: detached runs outlive the driver; otherwise a dead driver's runs are
left resumable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import ray

import raygents as rg
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

DRIVER = textwrap.dedent(
    """
    import sys, time
    import raygents as rg
    from raygents.testing import FunctionModel, call, calls, text

    address, namespace, store, run_id, mode = sys.argv[1:6]

    @rg.tool(num_cpus=0)
    def step(n: int) -> str:
        \"\"\"A slow step (in "hold" mode, slower than the test takes to let the driver go).\"\"\"
        time.sleep(30.0 if mode == "hold" else 0.7)
        return f"step {n}"

    def reply(request):
        done = sum(m.role == "tool" for m in request.messages)
        if done >= 3:
            return text(f"done after {done}")
        return calls(call("step", {"n": done}, id=f"s{done}"))

    agent = rg.Agent("outliving", tools=[step], model=FunctionModel(reply))
    rg.init(address, namespace=namespace, store=store, detached=(mode == "detached"))
    handle = rg.start(agent, "go", run_id=run_id)
    for event in handle.events():
        if event.type == "tool_start":
            print("STARTED", flush=True)
            break
    if mode == "kill":
        time.sleep(60)  # SIGKILLed by the test
    if mode == "hold":
        sys.stdin.readline()  # the test says when to exit (the run still going)
    """
)


@rg.tool(num_cpus=0)
def step(n: int, seconds: float = 0.0) -> str:
    """A step (as slow as asked)."""
    import time

    time.sleep(seconds)
    return f"step {n}"


def replies(seconds: float) -> Callable[[rg.ModelRequest], rg.ModelResponse]:
    """A model's replies: three steps of ``seconds`` each, one after the other, then done."""

    def reply(request: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(m.role == "tool" for m in request.messages)
        if done >= 3:
            return text(f"done after {done}")
        return calls(call("step", {"n": done, "seconds": seconds}, id=f"s{done}"))

    return reply


reply = replies(0.0)


def start_driver(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], str, str, str]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    namespace = f"exit-{mode}-{os.urandom(3).hex()}"
    store = f"file://{tmp_path / 'store'}"
    run_id = f"outlive-{os.urandom(3).hex()}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    args = [
        sys.executable,
        str(script),
        ray.get_runtime_context().gcs_address,
        namespace,
        store,
        run_id,
        mode,
    ]
    proc = subprocess.Popen(
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "STARTED", line + (proc.stderr.read() if proc.stderr else "")
    return proc, namespace, store, run_id


@pytest.mark.timeout(240)
def test_detached_runs_outlive_their_driver_and_can_be_attached(
    ray_session: None, tmp_path: Path
) -> None:
    proc, namespace, store, run_id = start_driver(tmp_path, "detached")
    proc.wait(timeout=60)  # the driver exits while its run is still going
    rg.shutdown()
    rg.init(namespace=namespace, store=store, detached=True)
    try:
        result = rg.attach(run_id).result(timeout_s=120)
        assert result.final_output == "done after 3"
        assert result.last_agent.name == "outliving"
    finally:
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["namespace"] == namespace:
                ray.kill(ray.get_actor(entry["name"], namespace=namespace))
        rg.shutdown()
        rg.init(store="memory://")


@pytest.mark.timeout(240)
def test_a_killed_drivers_runs_are_left_resumable(rt: None, tmp_path: Path) -> None:
    proc, namespace, store, run_id = start_driver(tmp_path, "kill")
    import time

    time.sleep(1.0)  # at least one batch is checkpointed
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    rg.shutdown()
    rg.init(namespace=namespace, store=store)
    try:
        info = {r.run_id: r for r in rg.runs()}[run_id]
        assert info.status == "suspended" and "resume it" in (info.last_error or "")
        agent = rg.Agent("outliving", tools=[step], model=FunctionModel(reply))
        assert rg.resume(run_id, agent=agent).result(timeout_s=60).final_output == "done after 3"
    finally:
        rg.shutdown()
        rg.init(store="memory://")


@pytest.mark.timeout(240)
def test_a_drivers_runs_go_on_when_the_driver_that_created_the_coordinator_exits(
    rt: None, tmp_path: Path
) -> None:
    """Two drivers share a (non-detached) namespace; the one that created its coordinator
    exits with a run in flight, and the coordinator and its agent actors go with it. The other
    driver's next call finds the coordinator's name free and creates a new one, its own run in
    flight is recovered from its checkpoint, with no Ray error in sight, and the run of the
    driver that exited is left resumable."""
    from raygents.runtime.driver import client

    creator, namespace, store, held = start_driver(tmp_path, "hold")
    assert creator.stdin is not None
    try:
        rg.shutdown()
        rg.init(namespace=namespace, store=store)
        assert not client.current().created  # this driver found the creator's coordinator
        agent = rg.Agent("survivor", tools=[step], model=FunctionModel(replies(1.0)))
        handle = rg.start(agent, "go")
        events = iter(handle.events())
        assert next(e for e in events if e.type == "tool_start")
        creator.stdin.close()  # the creator exits while both runs are in flight
        assert creator.wait(timeout=60) == 0

        result = handle.result(timeout_s=120)
        assert result.final_output == "done after 3"
        assert any(e.type == "recovered" for e in events)
        assert client.current().created  # this driver made the new coordinator
        again = rg.run(rg.Agent("after", model=ScriptedModel([text("fine")])), "go")
        assert again.final_output == "fine"
        table = {r.run_id: r for r in rg.runs()}
        assert table[handle.run_id].status == "completed"
        assert table[again.run_id].status == "completed"
        assert table[held].status == "suspended" and "resume it" in (table[held].last_error or "")
        left = rg.Agent("outliving", tools=[step], model=FunctionModel(reply))
        assert rg.resume(held, agent=left).result(timeout_s=60).final_output == "done after 3"
    finally:
        if creator.poll() is None:
            creator.kill()
            creator.wait(timeout=30)
        rg.shutdown()  # removes the coordinator this driver created
        rg.init(store="memory://")
