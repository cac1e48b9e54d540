"""A tool whose task no node of the cluster can hold fails its call with a clear error, rather
than waiting for ever (on the session's one-node Ray, which has no GPU and no ``tpu_pod``)."""

from __future__ import annotations

import pytest

import raygents as rg
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@rg.tool(num_gpus=1)
def on_gpu() -> str:
    """Use the GPU."""
    return "on a GPU"


@rg.tool(resources={"tpu_pod": 1}, timeout_s=1.0)
def on_pod() -> str:
    """Use the pod."""
    return "on a pod"


@rg.tool(num_cpus=0.5)
def anywhere() -> str:
    """Run anywhere."""
    return "ran"


def _each_tool_once(req: ModelRequest) -> ModelResponse:
    results = [m.text or "" for m in req.messages if m.role == "tool"]
    if results:
        return text("\n".join(results))
    return calls(call("on_gpu", id="g"), call("on_pod", id="p"), call("anywhere", id="a"))


def test_a_task_no_node_can_hold_fails_its_call_and_the_run_goes_on() -> None:
    agent = rg.Agent(
        "placement", tools=[on_gpu, on_pod, anywhere], model=FunctionModel(_each_tool_once)
    )
    result = rg.run(agent, "go", timeout_s=60)
    gpu, pod, ran = result.final_output.split("\n")
    assert "it cannot run: no node of the cluster can hold what its task reserves (GPU 1)" in gpu
    assert "the most any of its 1 node(s) has: GPU 0" in gpu
    # (with a timeout, it waits that long for a node, as on an autoscaling cluster)
    assert "timed out after 1.0 s: no node of the cluster can hold" in pod and "tpu_pod 1" in pod
    assert ran == "ran"
