"""Kill the agent actor right after a compaction: the recovered run goes on from the compacted
history and never summarises the same span again."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from faultkit import agent_actor

import raygents as rg
from raygents.core.compaction import SUMMARY_INSTRUCTIONS
from raygents.records import checkpoint
from raygents.stores.open import open_store

pytestmark = pytest.mark.usefixtures("faulty")

PAD = "data " * 40


@rg.tool(remote=False)
def step(n: int) -> str:
    """Do step n."""
    return f"step {n} done {PAD}"


class LoggingModel:
    """Calls ``step`` until ``turns`` steps are done, slowly (so that a kill lands in a call);
    each summary it writes is logged (the digest of the span it summarised) to ``log``."""

    def __init__(self, turns: int, log: str) -> None:
        self.turns, self.log = turns, log

    async def respond(self, request: rg.ModelRequest) -> rg.ModelResponse:
        import asyncio

        await asyncio.sleep(0.05)
        text = request.messages[-1].text if request.messages else ""
        if request.system == SUMMARY_INSTRUCTIONS:
            digest = hashlib.sha256(text.encode()).hexdigest()
            with open(self.log, "a") as out:
                out.write(json.dumps({"span": digest, "pid": os.getpid()}) + "\n")
            return rg.ModelResponse(rg.Message("assistant", f"summary {digest[:8]}"))
        done = max((_step(m.text) for m in request.messages), default=-1)
        if done + 1 >= self.turns:
            return rg.ModelResponse(rg.Message("assistant", f"finished {done + 1}"))
        call = rg.ToolCall(f"s{done + 1}", "step", f'{{"n": {done + 1}}}')
        return rg.ModelResponse(rg.Message("assistant", None, tool_calls=[call]), "tool_calls")


def _step(text: str) -> int:
    words = text.split()
    return int(words[1]) if len(words) > 2 and words[0] == "step" and words[2] == "done" else -1


def _records(store_url: str, run_id: str) -> list[dict[str, Any]]:
    """The run's checkpoint records, oldest first."""
    store = open_store(store_url)
    keys = [k for k in store.list(checkpoint.run_prefix(run_id)) if checkpoint.parse_key(k)]
    records = []
    for key in keys:
        data = store.get(key)
        assert data is not None
        records.append(checkpoint.decode(data, source=key))
    return sorted(records, key=lambda r: int(r["seq"]))


def test_a_recovered_run_does_not_summarise_again(faulty: str, tmp_path: Path) -> None:
    log = tmp_path / "summaries.jsonl"
    agent = rg.Agent(
        "compact_victim",
        tools=[step],
        model=LoggingModel(40, str(log)),
        max_turns=60,
        compaction=rg.Compaction(1000, keep_last_turns=2),
    )
    handle = rg.start(agent, "go")
    events = iter(handle.events())
    next(e for e in events if e.type == "compacted")
    time.sleep(0.02)  # the next model call is in flight
    pid = ray.get(agent_actor("compact_victim").ping.remote())
    os.kill(pid, signal.SIGKILL)
    result = handle.result(timeout_s=120)
    assert result.final_output == "finished 40"
    assert any(e.type == "recovered" for e in handle.events())
    spans = [json.loads(line) for line in log.read_text().splitlines()]
    assert len({s["pid"] for s in spans}) == 2, "summaries before and after the kill"
    digests = [s["span"] for s in spans]
    assert len(digests) == len(set(digests)), "a span was summarised twice"
    assert sum(m.summary for m in result.messages) == 1
    # each compaction wrote a full record of its own; the records before it keep the
    # messages it summarised
    records = _records(faulty, handle.run_id)
    compactions = [i for i, r in enumerate(records) if r.get("cause") == "compacted"]
    assert len(compactions) == len(spans)
    first = compactions[0]
    assert records[first]["kind"] == "full"
    assert records[first]["append"][0]["summary"] is True
    earlier = [m for r in records[:first] for m in r["append"]]
    assert any(m.get("content", "").startswith("step 0 done") for m in earlier)
