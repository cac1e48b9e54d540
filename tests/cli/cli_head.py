"""A Ray head with a detached raygents namespace for the ``raygents`` command tests: it
starts a completed run, one with two agent-as-tool children and a handoff, one awaiting
approval, a suspended one and two that run until they are suspended or cancelled, prints the
address as a JSON line, and stays up until its stdin closes.

Usage: ``python cli_head.py NAMESPACE STORE_URL``.
"""

from __future__ import annotations

import contextlib
import json
import sys

import ray
from cli_agents import BANKER, BOSS

import raygents as rg


def _runs() -> None:
    rg.start(BANKER, "hello", run_id="cli-done").result(timeout_s=120)
    rg.start(BOSS, "file it", run_id="cli-fan").result(timeout_s=120)
    with contextlib.suppress(rg.RunInterrupted):
        rg.start(BANKER, "pay alice", run_id="cli-pending").result(timeout_s=120)
    paused = rg.start(BANKER, "count to 6", run_id="cli-paused", timeout_s=0.5)
    with contextlib.suppress(rg.SuspendedError):
        paused.result(timeout_s=120)
    rg.start(BANKER, "count forever", run_id="cli-live")
    rg.start(BANKER, "count forever", run_id="cli-doomed")


def main() -> None:
    namespace, store = sys.argv[1], sys.argv[2]
    context = ray.init(address="local", num_cpus=2, include_dashboard=False)
    rg.init(namespace=namespace, store=store, detached=True, handle_sigterm=False)
    _runs()
    print(json.dumps({"address": context.address_info["address"]}), flush=True)
    sys.stdin.read()
    rg.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
