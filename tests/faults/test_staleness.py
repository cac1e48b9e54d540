"""A busy agent actor keeps its runs; a wedged one is replaced (heartbeats and beats)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import raygents as rg
from raygents.runtime.link import directory
from raygents.runtime.link.handles import actor_key
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("faulty")


def slow_turns(turns: int, latency_s: float) -> FunctionModel:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(1 for m in req.messages if m.role == "tool")
        if done >= turns - 1:
            return text(f"done after {done} tool calls")
        return calls(call("note", {"n": done}, id=f"note{done}"))

    return FunctionModel(reply, latency_s=latency_s)


@rg.tool(remote=False)
def note(n: int) -> str:
    """Note a number."""
    return f"noted {n}"


@pytest.fixture
def late_pings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Pings of agent actors that are never answered after the first (as when Ray holds the
    calls to a busy actor); yields what each look at the actor's beats found."""
    real_ping = directory._ping
    answered: set[str] = set()
    found: list[bool] = []

    async def late_ping(actor: Any) -> Any:
        key = actor_key(actor)
        if key not in answered:
            answered.add(key)
            return await real_ping(actor)
        await asyncio.Event().wait()

    real_beats = directory.Directory._beats

    async def beats(self: directory.Directory, key: str, limit: float) -> bool:
        alive = await real_beats(self, key, limit)
        found.append(alive)
        return alive

    monkeypatch.setattr(directory, "_ping", late_ping)
    monkeypatch.setattr(directory.Directory, "_beats", beats)
    yield found


def test_an_actor_whose_pings_are_late_but_that_beats_keeps_its_run(
    late_pings: list[bool],
) -> None:
    # stale_after_s is 5 s here; the run takes about 12 s, its pings never come back
    agent = rg.Agent("busy_beater", tools=[note], model=slow_turns(4, latency_s=3.0))
    handle = rg.start(agent, "go")
    result = handle.result(timeout_s=120)
    assert result.final_output == "done after 3 tool calls"
    assert not [e for e in handle.events() if e.type == "recovered"]
    assert late_pings and all(late_pings), "the late pings were judged by the actor's beats"


def test_an_actor_whose_event_loop_is_wedged_is_replaced(tmp_path: Path) -> None:
    flag = tmp_path / "blocked-once"

    @rg.tool(remote=False)
    async def block(ctx: rg.ToolContext) -> str:
        """Block the agent actor's event loop (the first time only)."""
        if not Path(ctx.context["flag"]).exists():
            Path(ctx.context["flag"]).touch()
            time.sleep(12)  # blocks the event loop: the point of the test
        return "unblocked"

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        if req.messages[-1].role == "tool":
            return text(req.messages[-1].text)
        return calls(call("block", {}))

    agent = rg.Agent("wedged", tools=[block], model=FunctionModel(reply))
    handle = rg.start(agent, "go", context={"flag": str(flag)})
    result = handle.result(timeout_s=120)
    assert result.final_output == "unblocked"
    recovered = [e for e in handle.events() if e.type == "recovered"]
    assert recovered and "stopped answering" in (recovered[0].error or "")
