"""Workload 12: context compaction.

A run of ``TURNS`` turns (one ``remote=False`` tool call a turn, each result about 1,000
characters, model latency 0), with no compaction and with ``Compaction(trigger_tokens=8000,
keep_last_turns=4)``: the input tokens sent per turn (as raygents' estimate counts them, which
the fake model reports as its usage), the tokens sent over the whole run, the run's wall time,
and what a compaction takes in the agent actor (counting, the summariser's call, at latency 0;
its checkpoint record is in the run's wall time). raygents only: the SDK has no compaction of
its own to compare with.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any

TRIGGER = 8000
RESULT = "x" * 1000


class LoggedModel:
    """Calls ``look`` until ``turns`` calls are done, then answers; each request's size goes to
    ``log`` (one line a call), and to its usage. The summariser's request is answered with a
    short summary."""

    def __init__(self, turns: int, log: str) -> None:
        self.turns, self.log = turns, log

    async def respond(self, request: Any) -> Any:
        import raygents as rg
        from raygents.core.compaction import SUMMARY_INSTRUCTIONS
        from raygents.models.tokens import estimate

        size = estimate(request.messages, request.system, request.tools)
        summary = request.system == SUMMARY_INSTRUCTIONS
        with open(self.log, "a") as out:
            out.write(json.dumps({"tokens": size, "summary": summary}) + "\n")
        usage = rg.Usage(size, 5)
        if summary:
            return rg.ModelResponse(
                rg.Message("assistant", "looked up the earlier items"), usage=usage
            )
        last = next((m.text for m in reversed(request.messages) if m.role == "tool"), "")
        done = int(last.split()[1]) + 1 if last else 0
        if done >= self.turns:
            return rg.ModelResponse(rg.Message("assistant", f"done {done}"), usage=usage)
        call = rg.ToolCall(f"c{done}", "look", json.dumps({"n": done}))
        return rg.ModelResponse(
            rg.Message("assistant", None, tool_calls=[call]), "tool_calls", usage
        )


def look(n: int) -> str:
    """Look item n up."""
    return f"item {n} {RESULT}"


def _one(name: str, turns: int, compaction: Any, tmp: str) -> dict[str, Any]:
    import raygents as rg

    log = os.path.join(tmp, f"{name}.jsonl")
    agent = rg.Agent(
        name,
        tools=[rg.tool(remote=False)(look)],
        model=LoggedModel(turns, log),
        max_turns=turns + 10,
        max_model_calls=turns * 2,
        compaction=compaction,
    )
    t0 = time.perf_counter()
    handle = rg.start(agent, "look everything up")
    result = handle.result(timeout_s=600)
    wall = time.perf_counter() - t0
    with open(log) as lines:
        calls = [json.loads(line) for line in lines]
    sent = [c["tokens"] for c in calls if not c["summary"]]
    compacted = [e.data or {} for e in handle.events() if e.type == "compacted"]
    durations = [d["duration_s"] * 1000 for d in compacted]
    return {
        "turns": len(sent),
        "output": result.final_output,
        "wall_s": round(wall, 3),
        "ms_per_turn": round(wall * 1000 / max(len(sent), 1), 3),
        "tokens_total": sum(sent),
        "tokens_max": max(sent),
        "tokens_last": sent[-1],
        "tokens_per_turn": sent[:: max(1, len(sent) // 60)],  # (a sample, for plots)
        "compactions": len(compacted),
        "summarizer_tokens": sum(c["tokens"] for c in calls if c["summary"]),
        "compaction_ms_p50": round(statistics.median(durations), 3) if durations else None,
        "compaction_ms_max": round(max(durations), 3) if durations else None,
    }


def run(mode: str, tmp: str) -> dict[str, Any]:
    import machine

    import raygents as rg

    turns = {"smoke": 40, "quick": 300, "full": 300}[mode]
    reps = {"smoke": 1, "quick": 1, "full": 3}[mode]
    machine.init_raygents(store=f"file://{os.path.join(tmp, 'store')}")
    try:
        rows: dict[str, list[dict[str, Any]]] = {"none": [], "compaction": []}
        for rep in range(reps):
            rows["none"].append(_one(f"ctx_plain_{rep}", turns, None, tmp))
            policy = rg.Compaction(TRIGGER, keep_last_turns=4)
            rows["compaction"].append(_one(f"ctx_compact_{rep}", turns, policy, tmp))
    finally:
        rg.shutdown()
    return {"turns": turns, "trigger_tokens": TRIGGER, "rows": rows}
