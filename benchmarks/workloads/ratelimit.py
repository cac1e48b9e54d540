"""Workload 9: a cluster-wide model rate limit against a provider that enforces it.

A local OpenAI-compatible server (in a child process, so the driver's busy threads never delay
its clock) answers 429 with ``Retry-After: 1`` once more requests than 1.1x the limit arrived in
the last second, and records when each request arrived. raygents runs N one-call runs at once
on three agent actors with ``rate_limits={model: RateLimit(requests_per_minute=L)}``.

Reported per limit: the rate the server saw (requests after the first / the time between the
first and the last), its ratio to the limit, the busiest one-second window, the 429s the server
sent and the runs that failed.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import machine
import stats

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMITS_RPM = (1_200, 3_000, 6_000)
SECONDS = 10
"""Each limit's runs last about this long at the limit."""


def run(mode: str, tmp: str) -> dict[str, Any]:
    import ray

    import raygents as rg

    sys.path.insert(0, os.path.join(ROOT, "tests"))  # (the rate-enforcing server)
    from rate_server import ServerProcess

    limits = LIMITS_RPM if mode != "smoke" else (1_200,)
    reps = {"smoke": 1, "quick": 2, "full": 5}[mode]
    seconds = SECONDS if mode != "smoke" else 3
    machine.init_raygents(
        store="memory://",
        rate_limits={f"m{rpm}": rg.RateLimit(requests_per_minute=rpm) for rpm in limits},
    )
    rows = []
    for rpm in limits:
        per_s = rpm / 60
        n = int(per_s * seconds)
        outs = []
        for rep in range(reps):
            server = ServerProcess(per_s * 1.1)
            with server as url:
                model = rg.OpenAIChatModel(f"m{rpm}", base_url=url, max_retries=3)
                agent = rg.Agent(f"rated_{rpm}", model=model, replicas=3)
                rg.run(agent, "warm up")  # the agent actors and their gates
                time.sleep(60 / rpm)  # (the warm-up's turn is over)
                server.ask("clear")
                handles = [rg.start(agent, f"q{i}") for i in range(n)]
                failed = 0
                for handle in handles:
                    try:
                        handle.result(timeout_s=600)
                    except rg.RaygentsError:
                        failed += 1
            arrivals = sorted(server.arrivals)
            span = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0.0
            achieved = (len(arrivals) - 1) / span if span > 0 else 0.0
            outs.append(
                {
                    "achieved_per_s": achieved,
                    "peak_1s": server.peak(),
                    "refused": server.refused,
                    "failed": failed,
                    "requests": len(arrivals),
                }
            )
            machine.log(
                f"ratelimit: {rpm}/min, rep {rep + 1}: {achieved:.1f}/s of {per_s:.1f}/s, "
                f"peak 1 s {server.peak()}, 429s {server.refused}, failed {failed}"
            )
        achieved = stats.summary([o["achieved_per_s"] for o in outs])
        rows.append(
            {
                "limit_per_min": rpm,
                "limit_per_s": per_s,
                "runs": n,
                "achieved_per_s": achieved,
                "ratio_to_limit": stats.ratio(achieved["p50"], per_s),
                "peak_1s": max(o["peak_1s"] for o in outs),
                "refused": sum(o["refused"] for o in outs),
                "failed": sum(o["failed"] for o in outs),
            }
        )
    rg.shutdown()
    ray.shutdown()
    checks = {}
    for row in rows:
        ratio = row["ratio_to_limit"] or 0.0
        checks[f"{row['limit_per_min']:,}/min: achieved rate within 10% of the limit"] = {
            "value": ratio,
            "target": "0.9 to 1.0",
            "pass": 0.9 <= ratio <= 1.0,
        }
        checks[f"{row['limit_per_min']:,}/min: no run failed"] = {
            "value": row["failed"],
            "target": "0",
            "pass": row["failed"] == 0,
        }
    return {
        "config": {"replicas": 3, "seconds_at_limit": seconds, "reps": reps},
        "rows": rows,
        "checks": checks,
    }
