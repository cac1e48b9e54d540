"""Ray Serve's data-path options against the API's latency (finding 59).

    python benchmarks/tools/serve_paths.py [--rounds 2] [--calls 30] [--configs default,opt,haproxy]
        [--base DIR]

Each configuration runs in a fresh process on a private local Ray instance (Serve reads its
options from the environment when its controller, proxies and replicas start): ``default``
(Serve's Python proxy), ``opt`` (``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``: direct ingress, the
replica serves HTTP itself) and ``haproxy`` (``RAY_SERVE_ENABLE_HA_PROXY=1``, HAProxy in front
of the replica; needs the ``haproxy`` binary). The configurations alternate, ``--rounds``
times, so that the machine's drift hits each alike. In each process, after 5 of each to warm
up, ``--calls`` rounds of: ``rg.run`` in process, ``GET /healthz``, a ``POST /v1/runs`` with
``"wait": true`` (the serve workload's 2-turn run). Prints each process's p50s and, at the end,
the median over rounds of each configuration's p50s. ``--base DIR`` adds the configuration
``base``: Serve's defaults with the ``raygents`` package of DIR (e.g. ``git archive <commit>
raygents | tar -x -C DIR``) ahead on ``PYTHONPATH``, for a before/after of a change.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

ENV = {
    "default": {},
    "opt": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"},
    "haproxy": {"RAY_SERVE_ENABLE_HA_PROXY": "1"},
    "opt+haproxy": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_HA_PROXY": "1"},
}
TOKEN = "bench-token-0123456789abcdef"


def _p50_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


def child(calls: int) -> dict[str, Any]:
    """One configuration's measurements (this process's environment is the configuration)."""
    import fakes
    import httpx
    import machine
    from ray import serve
    from workloads.serve import _port

    import raygents as rg
    import raygents.serve as rgs

    with tempfile.TemporaryDirectory() as tmp:
        machine.init_raygents(store=f"file://{os.path.join(tmp, 'store')}")
        agent = rg.Agent(
            "serve_bench",
            tools=fakes.rg_tools("local"),
            model=fakes.rg_model(fakes.ToolTurns(), 0.0),
        )
        rg.run(agent, "k=1")
        t0 = time.perf_counter()
        url = rgs.start(agent, port=_port(), auth_token=TOKEN)
        start_s = time.perf_counter() - t0
        body = {"agent": "serve_bench", "input": "k=1", "wait": True}
        times: dict[str, list[float]] = {"rg_run": [], "healthz": [], "post_wait": []}
        try:
            with httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
            ) as http:
                for i in range(5 + calls):
                    for name, call in (
                        ("rg_run", lambda: rg.run(agent, "k=1")),
                        ("healthz", lambda: http.get("/healthz").raise_for_status()),
                        ("post_wait", lambda: http.post("/v1/runs", json=body).raise_for_status()),
                    ):
                        t = time.perf_counter()
                        call()
                        if i >= 5:
                            times[name].append(time.perf_counter() - t)
        finally:
            rgs.stop()
            serve.shutdown()
            rg.shutdown()
    out: dict[str, Any] = {k: _p50_ms(v) for k, v in times.items()}
    out["added_ms"] = round(out["post_wait"] - out["rg_run"], 2)
    out["start_s"] = round(start_s, 1)
    out["loadavg"] = round(os.getloadavg()[0], 1)
    out["raygents"] = os.path.dirname(os.path.dirname(rg.__file__))
    return out


def _measure(config: str, calls: int, base: str | None, tries: int = 2) -> dict[str, Any] | None:
    """One configuration's measurements in a fresh process (tried again when it fails: on a
    loaded machine a local Ray may not start in time)."""
    env = {**os.environ, **ENV.get(config, {})}
    if config == "base":
        assert base is not None, "--base DIR names the raygents to compare with"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (base, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--calls", str(calls)]
    for _ in range(tries):
        with tempfile.TemporaryDirectory() as cwd:  # (a checkout's raygents would come first)
            done = subprocess.run(
                cmd, env=env, capture_output=True, text=True, timeout=900, cwd=cwd
            )
        lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
        if lines:
            found: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
            return found
        print(f"{config}: failed (rc {done.returncode})\n{done.stderr[-1500:]}", flush=True)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--configs", default="default,opt,haproxy")
    parser.add_argument("--base", help="a directory holding the raygents package to compare")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.calls)), flush=True)
        return
    configs = args.configs.split(",")
    results: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    for r in range(args.rounds):
        for config in configs if r % 2 == 0 else reversed(configs):
            found = _measure(config, args.calls, args.base)
            if found is None:
                continue
            results[config].append(found)
            print(f"round {r} {config}: {found}", flush=True)
    for config, found in results.items():
        if found:
            keys = ("rg_run", "healthz", "post_wait", "added_ms")
            medians = {k: round(statistics.median(f[k] for f in found), 2) for k in keys}
            print(f"{config} (median of {len(found)} rounds' p50 ms): {medians}")


if __name__ == "__main__":
    main()
