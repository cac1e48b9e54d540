"""A hostile MCP server behind an agent running in its actor: a stdio server process that never
answers a call (``tests/mcp_hostile_server.py``). The call times out, the run goes on, and a
graceful suspend requested meanwhile ends the run as soon as the call has."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytest.importorskip("mcp", reason="needs the mcp extra")

pytestmark = pytest.mark.usefixtures("rt")

SERVER = str(Path(__file__).parents[1] / "mcp_hostile_server.py")
TIMEOUT_S = 2.0
TIMED_OUT = f'Error: cannot execute tool "hang": timed out after {TIMEOUT_S} s'


def hanging_server() -> rg.MCPServerStdio:
    return rg.MCPServerStdio(
        "hangs", sys.executable, args=[SERVER, "hang"], tool_timeout_s=TIMEOUT_S
    )


def reply(req: rg.ModelRequest) -> rg.ModelResponse:
    results = [m.text for m in req.messages if m.role == "tool"]
    if not results:
        return calls(call("hang", {"x": "1"}, id="h1"), call("echo", {"x": "2"}, id="e1"))
    return text(" | ".join(results))


def test_a_call_the_server_never_answers_times_out_and_the_run_goes_on() -> None:
    agent = rg.Agent("patient", model=FunctionModel(reply), mcp_servers=[hanging_server()])
    started = time.monotonic()
    result = rg.run(agent, "go")
    hung, echoed = result.final_output.split(" | ")
    assert hung == TIMED_OUT
    assert '"arguments": {"x": "2"}' in echoed
    assert time.monotonic() - started < 60


def test_a_graceful_suspend_waits_for_the_timeout_not_for_ever() -> None:
    agent = rg.Agent("suspends", model=FunctionModel(reply), mcp_servers=[hanging_server()])
    handle = rg.start(agent, "go")
    next(e for e in handle.events() if e.type == "tool_start" and e.tool_name == "hang")
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    result = rg.resume(handle.run_id, agent=agent).result(timeout_s=60)
    assert result.final_output.startswith(TIMED_OUT)  # the timed-out call is not run again
