"""Agents the ``raygents`` command tests import by ``--agent cli_agents:BANKER`` (the head
process and the command build the same graph from here)."""

from __future__ import annotations

import time

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text


@rg.tool(num_cpus=0, needs_approval=True)
def wire_money(to: str) -> str:
    """Wire money to someone."""
    return f"wired to {to}"


@rg.tool(num_cpus=0)
def tick(n: int) -> str:
    """Count one step."""
    time.sleep(0.2)
    return f"tick {n}"


def _reply(req: rg.ModelRequest) -> rg.ModelResponse:
    """``hello``: answers; ``pay alice``: a call that needs approval; ``count to N``: N
    ticks, one a turn; ``count forever``: ticks until it is stopped."""
    asked = next(m.text for m in req.messages if m.role == "user")
    results = [m.text for m in req.messages if m.role == "tool"]
    if asked == "hello":
        return text("hi there")
    if asked == "pay alice":
        return (
            calls(call("wire_money", {"to": "alice"}, id="c_wire"))
            if not results
            else text(" | ".join(results))
        )
    limit = 10**6 if asked == "count forever" else int(asked.rpartition(" ")[2])
    if len(results) >= limit:
        return text(f"counted to {limit}")
    n = len(results) + 1
    return calls(call("tick", {"n": n}, id=f"c_tick_{n}"))


BANKER = rg.Agent(
    "banker", tools=[wire_money, tick], model=FunctionModel(_reply), max_turns=100_000
)


def _clerk(req: rg.ModelRequest) -> rg.ModelResponse:
    return text("filed")


def _boss(req: rg.ModelRequest) -> rg.ModelResponse:
    """Asks the banker twice (two child runs), then hands the run to the clerk."""
    results = [m for m in req.messages if m.role == "tool"]
    if not results:
        ask = [("c_a", "hello"), ("c_b", "count to 1")]
        return calls(*[call("ask_banker", {"input": said}, id=cid) for cid, said in ask])
    return calls(call("transfer_to_clerk", {}, id="c_h"))


CLERK = rg.Agent("clerk", model=FunctionModel(_clerk))
BOSS = rg.Agent(
    "boss",
    tools=[BANKER.as_tool("ask_banker", "Ask the banker.")],
    handoffs=[CLERK],
    model=FunctionModel(_boss),
)


BANKER_NO_WIRE = rg.Agent("banker", tools=[tick], model=FunctionModel(_reply), max_turns=100_000)
"""The banker's new code with ``wire_money`` removed (what ``raygents replay`` must catch)."""
