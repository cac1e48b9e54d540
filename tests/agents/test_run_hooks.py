"""Run-level hooks (``run(..., hooks=)``): one object in the driver sees every agent of the
run, across a handoff and a fan-out of agent-as-tool children."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import raygents as rg
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


class Tally(rg.RunHooks):
    """Counts each hook call by kind and agent; the state a user keeps on the hooks object."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[str, str]] = Counter()
        self.order: list[str] = []
        self.end: Any = None

    def _add(self, kind: str, agent: rg.Agent) -> None:
        self.seen[kind, agent.name] += 1
        self.order.append(kind)

    async def on_run_start(self, ctx, agent, messages):  # type: ignore[no-untyped-def]
        self._add("run_start", agent)

    async def on_agent_start(self, ctx, agent):  # type: ignore[no-untyped-def]
        self._add("agent_start", agent)

    def on_tool_start(self, ctx, agent, call):  # type: ignore[no-untyped-def]
        self._add("tool_start", agent)

    def on_tool_end(self, ctx, agent, call, result):  # type: ignore[no-untyped-def]
        self._add("tool_end", agent)

    async def on_handoff(self, ctx, source, target):  # type: ignore[no-untyped-def]
        self._add("handoff", source)

    async def on_agent_end(self, ctx, agent, output):  # type: ignore[no-untyped-def]
        self._add("agent_end", agent)

    async def on_run_end(self, ctx, agent, output, error):  # type: ignore[no-untyped-def]
        self._add("run_end", agent)
        self.end = (output, error)


def analyst(name: str) -> rg.Agent:
    return rg.Agent(name, model=FunctionModel(lambda request: text(f"{name} says ok")))


def test_one_hooks_object_counts_a_handoff_and_a_fan_out() -> None:
    children = [analyst(f"hk_analyst_{i}") for i in range(3)]

    def lead(request: rg.ModelRequest) -> rg.ModelResponse:
        if any(m.tool_call_id == "c0" for m in request.messages):  # (the children answered)
            return text("all agree")
        return calls(*(call(c.name, {"input": "look"}, id=f"c{i}") for i, c in enumerate(children)))

    target = rg.Agent("hk_lead", model=FunctionModel(lead), tools=[c.as_tool() for c in children])
    triage = rg.Agent(
        "hk_triage",
        handoffs=[target],
        model=ScriptedModel([calls(call("transfer_to_hk_lead", {}))]),
    )
    hooks = Tally()
    result = rg.run(triage, "go", hooks=hooks)
    assert result.final_output == "all agree" and result.last_agent is target
    expected = Counter(
        {
            ("run_start", "hk_triage"): 1,
            ("agent_start", "hk_triage"): 1,
            ("handoff", "hk_triage"): 1,
            ("agent_start", "hk_lead"): 1,
            ("tool_start", "hk_lead"): 3,
            ("tool_end", "hk_lead"): 3,
            ("agent_end", "hk_lead"): 1,
            ("run_end", "hk_lead"): 1,
        }
    )
    for child in children:
        expected["agent_start", child.name] = 1
        expected["agent_end", child.name] = 1
    assert hooks.seen == expected  # every call ran before run() returned
    assert hooks.order[0] == "run_start" and hooks.order[-1] == "run_end"
    assert hooks.end == ("all agree", None)


def test_run_end_gets_the_typed_output_or_the_error() -> None:
    class Score(rg.RunHooks):
        end: Any = None

        def on_run_end(self, ctx, agent, output, error):  # type: ignore[no-untyped-def]
            self.end = (output, type(error).__name__)

    hooks = Score()
    agent = rg.Agent("hk_turns", model=FunctionModel(lambda r: calls(("missing", {}))))
    with pytest.raises(rg.ToolNotFound):
        rg.run(agent, "go", hooks=[hooks])
    assert hooks.end == (None, "ToolNotFound")


@rg.tool(remote=False, needs_approval=True)
def refund(amount: int) -> str:
    """Refund an amount."""
    return f"refunded {amount}"


def test_hooks_given_to_resume_see_the_rest_of_the_run() -> None:
    agent = rg.Agent(
        "hk_refunds",
        tools=[refund],
        model=ScriptedModel([calls(call("refund", {"amount": 5}, id="r1")), text("done")]),
    )
    before = Tally()
    with pytest.raises(rg.RunInterrupted) as info:
        rg.run(agent, "refund me", hooks=before)
    assert before.end is not None and isinstance(before.end[1], rg.RunInterrupted)
    after = Tally()
    handle = rg.resume(info.value.run_id, agent=agent, approvals={"r1": True}, hooks=after)
    assert handle.result(timeout_s=120).final_output == "done"
    assert after.seen == Counter(
        {
            ("run_start", "hk_refunds"): 1,
            ("agent_start", "hk_refunds"): 1,
            ("tool_start", "hk_refunds"): 1,
            ("tool_end", "hk_refunds"): 1,
            ("agent_end", "hk_refunds"): 1,
            ("run_end", "hk_refunds"): 1,
        }
    )


def test_hooks_of_a_run_started_inside_the_callers_event_loop_run_on_raygents_loop() -> None:
    import asyncio
    import threading

    class Where(rg.RunHooks):
        def __init__(self) -> None:
            self.threads: set[str] = set()

        def on_run_start(self, ctx, agent, messages):  # type: ignore[no-untyped-def]
            self.threads.add(threading.current_thread().name)

        def on_run_end(self, ctx, agent, output, error):  # type: ignore[no-untyped-def]
            self.threads.add(threading.current_thread().name)

    hooks = Where()
    agent = rg.Agent("hk_async", model=FunctionModel(lambda r: text("hi")))

    async def main() -> str:
        result = await rg.start(agent, "go", hooks=hooks)
        return str(result.final_output)

    assert asyncio.run(main()) == "hi"
    assert hooks.threads == {"raygents"}  # one thread: never the caller's loop
