"""A run that suspends and resumes on a session keeps what other runs saved meanwhile, and
takes the session again while it runs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

import raygents as rg
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.sessions import MemorySession, SQLiteSession, StoreSession
from raygents.testing import FunctionModel, calls, text

pytestmark = pytest.mark.usefixtures("rt")

HISTORY = [rg.Message("user", "old"), rg.Message("assistant", "old answer")]


@rg.tool(num_cpus=0)
def nap(seconds: float) -> str:
    """Sleep for ``seconds``."""
    time.sleep(seconds)
    return "rested"


def reply(request: ModelRequest) -> ModelResponse:
    """``a`` naps first (a tool turn, where a run can be suspended); others answer at once."""
    last = request.messages[-1]
    if last.role == "tool":
        return text("a done")
    if last.text == "a":
        return calls(("nap", {"seconds": 1.5}))
    return text(f"{last.text} done")


def gated(gate: Path) -> FunctionModel:
    """:func:`reply`, once the file ``gate`` exists (the test decides when a run goes on)."""

    async def wait_then_reply(request: ModelRequest) -> ModelResponse:
        while not gate.exists():
            await asyncio.sleep(0.05)
        return reply(request)

    return FunctionModel(wait_then_reply)


def suspended_run(agent: rg.Agent) -> str:
    """Start run ``a`` on session ``S`` and suspend it while its tool runs."""
    handle = rg.start(agent, "a", session_id="S")
    next(e for e in handle.events() if e.type == "tool_start")
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    return handle.run_id


A_TURN = ["a", "", "rested", "a done"]


def test_a_resumed_run_keeps_the_messages_of_a_run_that_ran_meanwhile(tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "s.db")
    session.save("S", HISTORY)
    agent = rg.Agent("resumer", model=FunctionModel(reply), tools=[nap], session=session)
    run_a = suspended_run(agent)
    assert rg.run(agent, "b", session_id="S").final_output == "b done"
    assert rg.resume(run_a, agent=agent).result(timeout_s=60).final_output == "a done"
    stored = [m.text for m in session.load("S")]
    assert stored == ["old", "old answer", "b", "b done", *A_TURN]


def test_a_resumed_run_waits_for_the_run_holding_its_session(tmp_path: Path) -> None:
    """Run B holds the session when A resumes: A waits for it (B ends first), then saves."""
    session = SQLiteSession(tmp_path / "s.db")
    session.save("S", HISTORY)
    agent = rg.Agent("waiter", model=FunctionModel(reply), tools=[nap], session=session)
    held = agent.clone(name="waiter_held", model=gated(tmp_path / "go"))
    run_a = suspended_run(agent)
    b = rg.start(held, "b", session_id="S")
    next(e for e in b.events() if e.type == "agent_start")  # B holds the session
    a = rg.resume(run_a, agent=agent)
    time.sleep(2.0)
    assert not a.done()  # its model answers at once: it waits for the session
    (tmp_path / "go").touch()
    assert a.result(timeout_s=60).final_output == "a done"
    assert b.result(timeout_s=1).final_output == "b done"  # B had ended
    stored = [m.text for m in session.load("S")]
    assert stored == ["old", "old answer", "b", "b done", *A_TURN]


def test_a_resumed_run_waiting_for_its_session_can_be_suspended(tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "s.db")
    agent = rg.Agent("patient", model=FunctionModel(reply), tools=[nap], session=session)
    held = agent.clone(name="patient_held", model=gated(tmp_path / "go"))
    run_a = suspended_run(agent)
    b = rg.start(held, "b", session_id="S")
    next(e for e in b.events() if e.type == "agent_start")
    waiting = rg.resume(run_a, agent=agent)
    time.sleep(1.0)
    waiting.suspend()
    with pytest.raises(rg.SuspendedError):
        waiting.result(timeout_s=60)
    assert not b.done()
    (tmp_path / "go").touch()
    assert b.result(timeout_s=60).final_output == "b done"
    assert rg.resume(run_a, agent=agent).result(timeout_s=60).final_output == "a done"
    assert [m.text for m in session.load("S")] == ["b", "b done", *A_TURN]


def test_a_resumed_run_holds_its_session(tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "s.db")
    agent = rg.Agent("holder", model=FunctionModel(reply), tools=[nap], session=session)
    run_a = suspended_run(agent)
    a = rg.resume(run_a, agent=agent.clone(model=gated(tmp_path / "go")))  # the same agent
    next(e for e in a.events() if e.type == "agent_start")
    other = rg.start(agent, "c", session_id="S")
    with pytest.raises(rg.UserError, match=f"in use by run '{run_a}'"):
        other.result(timeout_s=60)
    (tmp_path / "go").touch()
    assert a.result(timeout_s=60).final_output == "a done"
    assert [m.text for m in session.load("S")] == A_TURN


@rg.tool(num_cpus=0, needs_approval=True)
def send(to: str) -> str:
    """Send a message (needs approval)."""
    return f"sent to {to}"


def approve_first(request: ModelRequest) -> ModelResponse:
    """``a`` asks to send (and waits for approval); others answer at once."""
    last = request.messages[-1]
    if last.role == "tool":
        return text("a done")
    if last.text == "a":
        return calls(("send", {"to": "bob"}))
    return text(f"{last.text} done")


def test_a_run_approved_after_another_run_keeps_both_runs(tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "s.db")
    agent = rg.Agent("approver", model=FunctionModel(approve_first), tools=[send], session=session)
    a = rg.start(agent, "a", session_id="S")
    with pytest.raises(rg.RunInterrupted) as info:
        a.result(timeout_s=60)
    assert rg.run(agent, "b", session_id="S").final_output == "b done"
    decisions = {p.call_id: True for p in info.value.pending}
    done = rg.resume(a.run_id, agent=agent, approvals=decisions).result(timeout_s=60)
    assert done.final_output == "a done"
    stored = [m.text for m in session.load("S")]
    assert stored == ["b", "b done", "a", "", "sent to bob", "a done"]


LONG_HISTORY = [
    m
    for i in range(6)
    for m in (rg.Message("user", f"old {i}"), rg.Message("assistant", f"old answer {i} " * 40))
]


@pytest.mark.parametrize("kind", ["sqlite", "store", "memory"])
def test_a_run_that_compacted_and_waited_keeps_the_messages_of_a_run_that_ran_meanwhile(
    tmp_path: Path, kind: str
) -> None:
    """Run A compacts the history it loaded (a summary of all but the last answer), then waits
    for an approval; run B adds a turn; A completes: the session holds A's summary in place of
    what it stands for, the last answer, B's turn, then A's."""
    session: Any = {
        "sqlite": lambda: SQLiteSession(tmp_path / "s.db"),
        "store": lambda: StoreSession(f"file://{tmp_path}/store"),
        "memory": MemorySession,
    }[kind]()
    session.save("S", LONG_HISTORY)
    gist = FunctionModel(lambda request: text("the old questions, answered"))
    policy = rg.Compaction(300, keep_last_turns=1, summarizer=gist)
    agent = rg.Agent(
        f"compacter_{kind}",
        model=FunctionModel(approve_first),
        tools=[send],
        session=session,
        compaction=policy,
    )
    try:
        a = rg.start(agent, "a", session_id="S")
        with pytest.raises(rg.RunInterrupted) as info:
            a.result(timeout_s=60)
        assert any(e.type == "compacted" for e in a.events())
        plain = agent.clone(name=f"plain_{kind}", compaction=None)
        assert rg.run(plain, "b", session_id="S").final_output == "b done"
        decisions = {p.call_id: True for p in info.value.pending}
        done = rg.resume(a.run_id, agent=agent, approvals=decisions).result(timeout_s=60)
        assert done.final_output == "a done"
        stored = session.load("S")
        assert stored[0].summary and stored[0].text.endswith("the old questions, answered")
        assert [m.text for m in stored[1:]] == [
            LONG_HISTORY[-1].text,
            *("b", "b done"),
            *("a", "", "sent to bob", "a done"),
        ]
    finally:
        if isinstance(session, MemorySession):
            session.close()
