"""The HTTP API under load, loopback only: ``RAYGENTS_SERVE_RUNS`` runs (default 1,000) posted
by 50 concurrent clients while 200 SSE readers follow them; no run or event is lost and every
stream ends."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import httpx
import pytest
from servekit import Served

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.ray

RUNS = int(os.environ.get("RAYGENTS_SERVE_RUNS", "1000"))
CLIENTS = 50
READERS = 200


@rg.tool(num_cpus=0, remote=False)
def lookup(n: int) -> str:
    """A cheap lookup."""
    return f"found {n}"


def looker(req: rg.ModelRequest) -> rg.ModelResponse:
    if not any(m.role == "tool" for m in req.messages):
        return calls(call("lookup", {"n": 1}, id="l1"))
    return text("done")


AGENTS = [rg.Agent("looker", tools=[lookup], model=FunctionModel(looker))]


async def _post(http: httpx.AsyncClient, queue: asyncio.Queue[int], ids: list[str]) -> None:
    while not queue.empty():
        n = queue.get_nowait()
        answer = await http.post(
            "/v1/runs", json={"agent": "looker", "input": "go", "run_id": f"load-{n}"}
        )
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["run_id"])


async def _read(http: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    async with http.stream("GET", f"/v1/runs/{run_id}/events") as answer:
        assert answer.status_code == 200
        async for line in answer.aiter_lines():
            if line.startswith("data:"):
                frames.append(json.loads(line[5:]))
    return frames


async def _load(served: Served) -> tuple[list[str], list[list[dict[str, Any]]]]:
    limits = httpx.Limits(max_connections=CLIENTS + READERS)
    headers = {"Authorization": f"Bearer {served.token}"}
    async with httpx.AsyncClient(
        base_url=served.url, headers=headers, timeout=300, limits=limits
    ) as http:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for n in range(RUNS):
            queue.put_nowait(n)
        ids: list[str] = []
        posting = [asyncio.create_task(_post(http, queue, ids)) for _ in range(CLIENTS)]
        while len(ids) < min(READERS, RUNS):
            await asyncio.sleep(0.05)
        reading = [asyncio.create_task(_read(http, run_id)) for run_id in ids[:READERS]]
        await asyncio.gather(*posting)
        streams = await asyncio.gather(*reading)
    return ids, list(streams)


@pytest.mark.timeout(900)
def test_many_runs_and_readers_over_http(served: Served) -> None:
    ids, streams = asyncio.run(_load(served))
    assert sorted(ids) == sorted(f"load-{n}" for n in range(RUNS))
    for frames in streams:
        assert frames and frames[-1]["type"] == "complete", frames[-3:]
        assert [f["type"] for f in frames].count("tool_end") == 1
    for run_id in ids:
        served.until(run_id, "completed", timeout_s=300)
