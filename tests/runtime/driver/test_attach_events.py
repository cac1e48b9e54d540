"""``attach`` to a run this driver holds no handle of (another driver's, or one whose handle is
gone): its ``events()`` replay what the run's newest checkpoint records, then the final event."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest

import raygents as rg
from raygents.agents.tools import ToolResult
from raygents.core.events import RunEvent
from raygents.core.messages import Message, ToolCall
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@rg.tool(num_cpus=0)
def lookup(city: str) -> str:
    """Look up a city."""
    return f"{city} is sunny"


@rg.tool(num_cpus=0, needs_approval=True)
def book(city: str) -> str:
    """Book a trip."""
    return f"booked {city}"


def _agent() -> rg.Agent:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = [m for m in req.messages if m.role == "tool"]
        if len(done) == 0:
            return calls(call("lookup", {"city": "Oslo"}, id="c_1"))
        if len(done) == 1:
            return calls(call("lookup", {"city": "Rome"}, id="c_2"))
        if len(done) == 2:
            return calls(call("book", {"city": "Rome"}, id="c_3"))
        return text("done")

    return rg.Agent("planner", tools=[lookup, book], model=FunctionModel(reply))


def _interrupted_run(agent: rg.Agent, *, finish: bool = False) -> str:
    """Start a run that stops for approval (with ``finish``: then approve it to the end);
    returns its id, holding no handle of it, as another driver would not have one."""
    handle = rg.start(agent, "plan a trip")
    with pytest.raises(rg.RunInterrupted):
        handle.result(timeout_s=60)
    run_id = handle.run_id
    if finish:
        resumed = rg.resume(run_id, agent=agent, approvals={"c_3": True})
        assert resumed.result(timeout_s=60).final_output == "done"
        del resumed
    del handle
    gc.collect()
    from raygents.runtime.driver.client import current

    assert current().handles.get(run_id) is None, "this driver still holds the run's handle"
    return run_id


def _shape(events: list[RunEvent]) -> list[tuple[str, str | None]]:
    return [(e.type, e.call_id or e.to_agent) for e in events]


def test_attach_replays_the_recorded_tool_calls_of_a_run_awaiting_approval() -> None:
    agent = _agent()
    run_id = _interrupted_run(agent)

    attached = rg.attach(run_id)
    with pytest.raises(rg.RunInterrupted):
        attached.result(timeout_s=60)
    events = list(attached.events())
    assert _shape(events) == [
        ("agent_start", None),
        ("tool_start", "c_1"),
        ("tool_end", "c_1"),
        ("tool_start", "c_2"),
        ("tool_end", "c_2"),
        ("checkpoint", None),
        ("interrupted", None),
    ]
    ends = [e for e in events if e.type == "tool_end"]
    assert [e.result for e in ends] == ["Oslo is sunny", "Rome is sunny"]
    assert [e.arguments for e in events if e.type == "tool_start"] == [
        '{"city": "Oslo"}',
        '{"city": "Rome"}',
    ]
    assert all(e.agent_name == "planner" and e.run_id == run_id for e in events)
    assert all(e.data and e.data.get("replayed") for e in events[:-1])
    (checkpoint,) = [e for e in events if e.type == "checkpoint"]
    assert checkpoint.data is not None and checkpoint.data["seq"] >= 1
    result = rg.resume(run_id, agent=agent, approvals={"c_3": True}).result(timeout_s=60)
    assert result.final_output == "done"


def test_attach_replays_a_completed_run_then_its_complete_event() -> None:
    run_id = _interrupted_run(_agent(), finish=True)

    attached = rg.attach(run_id)
    assert attached.result(timeout_s=60).final_output == "done"
    calls_seen = [e.call_id for e in attached.events() if e.type == "tool_end"]
    assert calls_seen == ["c_1", "c_2", "c_3"]
    assert [e.type for e in attached.events()][-1] == "complete"


def test_history_events_follow_handoffs_and_take_results_from_the_journal() -> None:
    from raygents.runtime.driver.attach import _HistoryReplay

    messages = [
        Message("user", "hi"),
        Message("assistant", tool_calls=[ToolCall("c_1", "lookup", '{"city": "Oslo"}')]),
        Message("tool", "Oslo is sunny", tool_call_id="c_1"),
        Message("assistant", tool_calls=[ToolCall("h_1", "transfer_to_writer")]),
        Message("tool", "Transferred to writer", tool_call_id="h_1"),
        Message(
            "assistant",
            tool_calls=[ToolCall("c_2", "lookup", '{"city": "Rome"}'), ToolCall("c_3", "book")],
        ),
    ]
    journal = {"c_2": ToolResult("Rome is sunny")}
    replay = _HistoryReplay("r1")
    events = replay.events("writer", messages, journal)
    assert _shape(events) == [
        ("tool_start", "c_1"),
        ("tool_end", "c_1"),
        ("handoff", "writer"),
        ("agent_start", None),
        ("tool_start", "c_2"),
        ("tool_end", "c_2"),
    ]
    assert [e.agent_name for e in events] == ["", "", "", "writer", "writer", "writer"]
    # a second look, once the run went on, gives only what is new
    messages.append(Message("tool", "booked", tool_call_id="c_3"))
    later = replay.events("writer", messages, {})
    assert _shape(later) == [("tool_start", "c_3"), ("tool_end", "c_3")]


def test_attach_to_a_running_run_replays_its_past_then_what_it_recorded_until_its_end(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "go"

    @rg.tool(num_cpus=0)
    def wait_for_gate(city: str) -> str:
        """Wait until the test opens the gate."""
        deadline = time.monotonic() + 60
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return f"{city} opened"

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = [m for m in req.messages if m.role == "tool"]
        if len(done) == 0:
            return calls(call("lookup", {"city": "Oslo"}, id="c_1"))
        if len(done) == 1:
            return calls(call("wait_for_gate", {"city": "Rome"}, id="c_2"))
        return text("done")

    agent = rg.Agent("walker", tools=[lookup, wait_for_gate], model=FunctionModel(reply))
    own = rg.start(agent, "walk")
    seen: list[str] = []
    for event in own.events():  # the starting driver's live events
        seen.append(event.type)
        if event.type == "tool_start" and event.call_id == "c_2":
            break
    from raygents.runtime.driver.client import current

    current().handles.pop(own.run_id)  # as if another driver attached: no handle here
    attached = rg.attach(own.run_id)
    assert attached is not own
    gate.touch()
    assert attached.result(timeout_s=60).final_output == "done"
    events = list(attached.events())
    tools = [(e.type, e.call_id) for e in events if e.type in ("tool_start", "tool_end")]
    assert tools == [
        ("tool_start", "c_1"),
        ("tool_end", "c_1"),
        ("tool_start", "c_2"),
        ("tool_end", "c_2"),
    ]
    assert events[0].type == "agent_start" and events[-1].type == "complete"
    assert [e.result for e in events if e.type == "tool_end"] == ["Oslo is sunny", "Rome opened"]
