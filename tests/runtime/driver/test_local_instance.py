"""A local Ray instance that raygents starts keeps idle tool workers warm between turns, and
asks for new workers a few at a time (the driver below runs with those settings, so Ray
accepts them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    import raygents as rg
    from raygents.testing import FunctionModel, call, calls, text

    @rg.tool(num_cpus=0)
    def where(i: int) -> str:
        \"\"\"The worker process that ran the call.\"\"\"
        time.sleep(2.0)  # four calls at once need four workers (each starts within 2 s)
        return str(os.getpid())

    def reply(request):
        results = [m.text for m in request.messages if m.role == "tool"]
        if results:
            return text(" ".join(results))
        return calls(*(call("where", {"i": i}, id=f"w{i}") for i in range(4)))

    rg.init(num_cpus=2, include_dashboard=False, store=sys.argv[1], handle_sigterm=False)
    agent = rg.Agent("where_agent", tools=[where], model=FunctionModel(reply))
    first = set(rg.run(agent, "go").final_output.split())
    time.sleep(3.0)  # Ray kills idle workers beyond its soft limit after about a second
    alive = []
    for pid in first:
        try:
            os.kill(int(pid), 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    print(json.dumps({"workers": sorted(first), "alive": sorted(alive)}), flush=True)
    rg.shutdown()
    """
)


@pytest.mark.timeout(180)
def test_idle_tool_workers_stay_warm(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAYGENTS_STORE")}
    done = subprocess.run(
        [sys.executable, str(script), f"file://{tmp_path / 'store'}"],
        capture_output=True,
        text=True,
        timeout=170,
        env=env,
        cwd=tmp_path,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(lines[-1])
    # More idle workers than CPUs (2) outlive Ray's default of one per CPU.
    assert len(report["workers"]) > 2, report
    assert report["alive"] == report["workers"], "idle tool workers were killed"


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("cpus", "soft_limit", "leases"),
    [(1, 8, 1), (2, 8, 1), (3, 12, 1), (16, 64, 8), (64, 256, 10)],
)
def test_local_instance_asks_for_workers_a_few_at_a_time(
    cpus: int, soft_limit: int, leases: int
) -> None:
    from raygents.runtime.driver.startup import local_defaults

    got = local_defaults({"num_cpus": cpus, "include_dashboard": False})
    assert got["num_cpus"] == cpus and got["include_dashboard"] is False
    assert got["_system_config"] == {
        "num_workers_soft_limit": soft_limit,
        "max_pending_lease_requests_per_scheduling_category": leases,
    }


@pytest.mark.timeout(10)
def test_settings_given_to_init_win_over_local_defaults() -> None:
    from raygents.runtime.driver.startup import local_defaults

    mine = {"max_pending_lease_requests_per_scheduling_category": 4, "x": 1}
    got = local_defaults({"num_cpus": 2, "_system_config": mine})
    assert got["_system_config"] == {**mine, "num_workers_soft_limit": 8}
    assert mine == {"max_pending_lease_requests_per_scheduling_category": 4, "x": 1}
