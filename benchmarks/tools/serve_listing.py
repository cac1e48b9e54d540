"""What ``GET /v1/runs`` (the run inspector page's poll) costs at a given size of the run table.

    cd benchmarks && [PYTHONPATH=DIR] python tools/serve_listing.py [--runs 10000] [--calls 30]

A private local Ray instance with raygents on a fresh ``file://`` store, one served agent,
``--runs`` 1-turn runs in the run table (10,000 is the most completed runs it keeps), then
p50 of ``--calls`` listings each (after 5 to warm up): the newest 50, the newest 50 of a
status no run has, and the newest 1,000. ``PYTHONPATH=DIR`` with ``DIR`` holding the
``raygents`` package of another commit (``git archive <commit> raygents | tar -x -C DIR``)
measures that commit, for a before/after (run from ``benchmarks/``: Ray's workers put the
driver's working directory first on their path).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fakes
import machine

TOKEN = "bench-token-0123456789abcdef"
QUERIES = ({"limit": 50}, {"limit": 50, "status": "failed"}, {"limit": 1000})


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()

    import httpx
    from ray import serve

    import raygents as rg
    import raygents.serve as rgs

    machine.init_raygents(store=f"file://{tempfile.mkdtemp(prefix='serve-listing-')}")
    agent = rg.Agent(
        "serve_bench", tools=fakes.rg_tools("local"), model=fakes.rg_model(fakes.ToolTurns(), 0.0)
    )
    rg.run(agent, "k=1")  # (its graph pickled here before Serve is imported)
    url = rgs.start(agent, port=_port(), auth_token=TOKEN)
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
    try:
        while (missing := args.runs - len(rg.runs())) > 0:
            for handle in [rg.start(agent, "k=0") for _ in range(min(missing, 500))]:
                handle.result()
        print(f"runs in the table: {len(rg.runs())}")
        for params in QUERIES:
            times = []
            for i in range(5 + args.calls):
                t = time.perf_counter()
                answer = http.get("/v1/runs", params=params)
                answer.raise_for_status()
                if i >= 5:
                    times.append(time.perf_counter() - t)
            listed = len(answer.json()["runs"])
            p50 = statistics.median(times) * 1000
            print(f"GET /v1/runs {params}: p50 {p50:.2f} ms ({listed} runs listed)")
    finally:
        http.close()
        rgs.stop()
        serve.shutdown()
        rg.shutdown()


if __name__ == "__main__":
    main()
