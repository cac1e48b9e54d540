"""A driver that gets SIGTERM suspends its runs with checkpoints; a later driver resumes them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import ray

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")

DRIVER = textwrap.dedent(
    """
    import sys, time
    import raygents as rg
    from raygents.testing import FunctionModel, call, calls, text

    address, namespace, store, run_id = sys.argv[1:5]

    @rg.tool(num_cpus=0)
    def slow(step: int) -> str:
        \"\"\"A slow step.\"\"\"
        time.sleep(1.0)
        return f"step {step}"

    def reply(request):
        done = sum(m.role == "tool" for m in request.messages)
        if done >= 3:
            return text(f"done after {done}")
        return calls(call("slow", {"step": done}, id=f"s{done}"))

    agent = rg.Agent("sigterm_agent", tools=[slow], model=FunctionModel(reply))
    rg.init(address, namespace=namespace, store=store, sigterm_grace_s=20)
    handle = rg.start(agent, "go", run_id=run_id)
    for event in handle.events():
        if event.type == "tool_start":
            print("STARTED", flush=True)
            break
    handle.result()
    print("FINISHED WITHOUT SIGTERM", flush=True)
    """
)


@rg.tool(num_cpus=0)
def slow(step: int) -> str:
    """A slow step."""
    return f"step {step}"


def reply(request: rg.ModelRequest) -> rg.ModelResponse:
    done = sum(m.role == "tool" for m in request.messages)
    if done >= 3:
        return text(f"done after {done}")
    return calls(call("slow", {"step": done}, id=f"s{done}"))


@pytest.mark.timeout(180)
def test_sigterm_suspends_then_another_driver_resumes(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    namespace = f"sigterm-{os.urandom(3).hex()}"
    store = f"file://{tmp_path / 'store'}"
    run_id = f"sigterm-run-{os.urandom(3).hex()}"
    address = ray.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(
        [sys.executable, str(script), address, namespace, store, run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "STARTED", line + (proc.stderr.read() if proc.stderr else "")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "FINISHED WITHOUT SIGTERM" not in out
    assert "suspended with checkpoints" in err

    rg.shutdown()
    rg.init(namespace=namespace, store=store)
    try:
        assert {r.run_id: r.status for r in rg.runs()}.get(run_id) == "suspended"
        agent = rg.Agent("sigterm_agent", tools=[slow], model=FunctionModel(reply))
        result = rg.resume(run_id, agent=agent).result(timeout_s=60)
        assert result.final_output == "done after 3"
        tool_results = [m.text for m in result.messages if m.role == "tool"]
        assert tool_results[0] == "step 0", "the step in flight at SIGTERM finished before exit"
    finally:
        rg.shutdown()
        rg.init(store="memory://")
