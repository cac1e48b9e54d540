"""``raygents.cli.main.main`` called in a process that already uses Ray (a test, a notebook): a
command that cannot join its cluster leaves that process's Ray and raygents as they were."""

from __future__ import annotations

import io

import pytest
import ray

import raygents as rg
from raygents.cli.main import main
from raygents.testing import FunctionModel, text


@pytest.mark.parametrize(
    ("address", "status"),
    [("not-an-address", 2), ("http://127.0.0.1:1", 2), ("127.0.0.1:1", 1)],
)
def test_a_command_that_cannot_join_leaves_this_process_ray_running(
    rt: None, address: str, status: int
) -> None:
    context = ray.get_runtime_context().get_node_id()
    assert main(["runs", "--address", address], out=io.StringIO()) == status
    assert ray.is_initialized()
    assert ray.get_runtime_context().get_node_id() == context
    agent = rg.Agent("after_cli", model=FunctionModel(lambda request: text("still here")))
    assert rg.run(agent, "hi").final_output == "still here"
