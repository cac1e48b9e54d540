"""The load workload: runs of 3 to 5 turns over a fake model that answers in 5 to 50 ms, one
tool task per turn, the answer each run must give, and the figures of a batch of runs.

Shared by the load tests (``tests/load``) and the soak script (``benchmarks/soak.py``). Memory
and processes are read from ``/proc`` (Linux), so nothing beyond the test extra is needed.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from faults.faultkit import apply_effect_once, record

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

_PROMPT = re.compile(r"run (\d+) turns (\d+)")


def turns_of(i: int) -> int:
    """Run ``i``'s model calls: 3, 4 or 5 (2 to 4 of them ask for a tool)."""
    return 3 + i % 3


def prompt(i: int, tag: str = "", turns: int | None = None) -> str:
    """The input of run ``i``; the model reads its number and turns from it."""
    return f"{tag}run {i} turns {turns or turns_of(i)}"


def expected(i: int, turns: int | None = None) -> str:
    """The final answer run ``i`` must give: every tool result, in order."""
    results = " ".join(f"{i}.{k}" for k in range((turns or turns_of(i)) - 1))
    return f"run {i}: {results}"


def delay_s(i: int, turn: int) -> float:
    """A model latency from 5 to 50 ms, fixed per run and turn (reproducible)."""
    return 0.005 + zlib.crc32(f"{i}/{turn}".encode()) % 46 / 1000


async def reply(request: rg.ModelRequest) -> rg.ModelResponse:
    """The fake model: a tool call per turn, then the answer (see :func:`expected`)."""
    found = _PROMPT.search(request.messages[0].text or "")
    assert found, request.messages[0].text
    i, turns = int(found.group(1)), int(found.group(2))
    results = [m.text or "" for m in request.messages if m.role == "tool"]
    await asyncio.sleep(delay_s(i, len(results)))
    if len(results) >= turns - 1:
        return text(f"run {i}: {' '.join(results)}")
    turn = len(results)
    return calls(call("step", {"run": i, "turn": turn}, id=f"s{turn}"))


def model() -> FunctionModel:
    """The fake model of every load run."""
    return FunctionModel(reply)


def step_tool(num_cpus: float = 0.25, *, hold_s: float = 0.0) -> rg.Tool:
    """The tool of every turn: returns ``"<run>.<turn>"``. With a ledger path in the run's
    context (``{"ledger": path}``) it records its start and applies an idempotent effect per
    idempotency key there (``faultkit``); ``hold_s`` keeps it busy that long first."""

    @rg.tool(num_cpus=num_cpus)
    def step(ctx: rg.ToolContext, run: int, turn: int) -> str:
        """Do one step of a run."""
        path = ctx.context.get("ledger") if isinstance(ctx.context, dict) else None
        if path:
            record(path, "start", ctx.idempotency_key)
            time.sleep(hold_s)
            apply_effect_once(path, ctx.idempotency_key)
        else:
            time.sleep(hold_s)
        return f"{run}.{turn}"

    return step


# --------------------------------------------------------------------------------------------
# Processes and memory, from /proc
# --------------------------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(name))
    return tree


def descendants(root: int | None = None) -> list[int]:
    """``root`` (this process by default) and every process below it (with ``address="local"``,
    all of Ray's processes)."""
    tree = _children()
    out, todo = [], [root or os.getpid()]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(tree.get(pid, ()))
    return out


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def ray_workers() -> dict[str, int]:
    """Ray worker processes below this driver, by title (``ray::IDLE``, ``ray::AgentActor``...)."""
    seen: dict[str, int] = {}
    for pid in descendants():
        title = cmdline(pid).split(" ", 1)[0]
        if title.startswith("ray::"):
            seen[title] = seen.get(title, 0) + 1
    return seen


def tree_rss(pids: Sequence[int] | None = None) -> int:
    """Resident memory of this driver and its descendants, summed."""
    return sum(rss_bytes(pid) for pid in (pids or descendants()))


class PeakRSS:
    """Samples :func:`tree_rss` in a thread every ``interval_s`` while in the ``with`` block."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self.by_title: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        total = 0
        for pid in descendants():
            rss = rss_bytes(pid)
            total += rss
            title = cmdline(pid).split(" ", 1)[0].rsplit("/", 1)[-1] or "?"
            self.by_title[title] = max(self.by_title.get(title, 0), rss)
        self.peak = max(self.peak, total)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> PeakRSS:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


# --------------------------------------------------------------------------------------------
# A batch of runs
# --------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """What a batch of runs gave: per run (by index) its answer or error, and its latency."""

    outputs: dict[int, str] = field(default_factory=dict)
    errors: dict[int, BaseException] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    run_ids: dict[int, str] = field(default_factory=dict)
    wall_s: float = 0.0
    peak_rss: int = 0
    turns: int | None = None
    """The model calls of every run, if not :func:`turns_of` its index."""

    def wrong(self) -> dict[int, str]:
        """Runs whose answer is not the expected one (errors included)."""
        bad = {i: f"{type(e).__name__}: {e}" for i, e in self.errors.items()}
        bad.update({i: o for i, o in self.outputs.items() if o != expected(i, self.turns)})
        return bad

    def figures(self) -> dict[str, Any]:
        """Throughput, p50 / p99 latency and peak RSS, for printing (never asserted)."""
        lat = sorted(self.latencies)
        n = len(self.outputs) + len(self.errors)
        return {
            "runs": n,
            "wall_s": round(self.wall_s, 2),
            "runs_per_s": round(n / self.wall_s, 1) if self.wall_s else None,
            "p50_ms": round(statistics.median(lat) * 1000) if lat else None,
            "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000) if lat else None,
            "peak_rss_mb": round(self.peak_rss / 2**20),
        }


async def wait_all(
    handles: dict[int, rg.RunHandle], started: dict[int, float] | float | None = None
) -> Batch:
    """Wait for every run (by index); latencies count from ``started`` (per run, or one time
    for all; else from now)."""
    now = time.perf_counter()
    started = started if isinstance(started, dict) else dict.fromkeys(handles, started or now)
    batch = Batch(run_ids={i: h.run_id for i, h in handles.items()})

    async def one(i: int, handle: rg.RunHandle) -> None:
        try:
            batch.outputs[i] = (await handle).final_output
        except Exception as exc:  # every error is kept and reported, none is swallowed
            batch.errors[i] = exc
        batch.latencies.append(time.perf_counter() - started[i])

    await asyncio.gather(*(one(i, h) for i, h in handles.items()))
    batch.wall_s = time.perf_counter() - now
    return batch


def run_batch(
    agent: rg.Agent,
    indices: Sequence[int],
    *,
    context: Any = None,
    tag: str = "",
    turns: int | None = None,
) -> Batch:
    """Start a run for each index at once (``turns`` model calls each, else
    :func:`turns_of`), wait for all, and measure."""
    with PeakRSS() as peak:
        t0 = time.perf_counter()
        handles: dict[int, rg.RunHandle] = {}
        started: dict[int, float] = {}
        for i in indices:
            started[i] = time.perf_counter()
            handles[i] = rg.start(agent, prompt(i, tag, turns), context=context)
        batch = asyncio.run(wait_all(handles, started))
        batch.wall_s = time.perf_counter() - t0
    batch.peak_rss, batch.turns = peak.peak, turns
    return batch
