"""The agent behind the golden run checkpoint in tests/golden/runs/ (format 1).

``python tests/golden/run_golden.py <dir>`` writes a suspended run's records to ``<dir>``
(never over an existing golden run); ``tests/records/test_golden_runs.py`` resumes the committed
ones with today's code.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from pathlib import Path

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

RUN_ID = "golden-v1-suspended"
FINAL = "total 6 after 3 steps"


@rg.tool(num_cpus=0)
def add_step(n: int) -> int:
    """Return n."""
    return n


def reply(request: rg.ModelRequest) -> rg.ModelResponse:
    results = [int(m.text) for m in request.messages if m.role == "tool"]
    if len(results) >= 3:
        return text(f"total {sum(results)} after {len(results)} steps")
    return calls(call("add_step", {"n": len(results) + 1}, id=f"step{len(results) + 1}"))


def agent() -> rg.Agent:
    return rg.Agent("golden_adder", "Add the steps.", tools=[add_step], model=FunctionModel(reply))


def main(out: Path) -> None:
    if (out / "runs" / RUN_ID).exists():
        raise SystemExit(f"{out} already holds {RUN_ID}; golden files are never rewritten")
    work = out.parent / "golden-work"
    rg.init(store=f"file://{work}", include_dashboard=False, log_to_driver=False)
    handle = rg.start(agent(), "add three steps", run_id=RUN_ID)
    events = iter(handle.events())
    next(e for e in events if e.type == "tool_end" and e.call_id == "step2")
    handle.suspend()
    with contextlib.suppress(rg.SuspendedError):
        handle.result()
    rg.shutdown()
    shutil.copytree(work / "runs" / RUN_ID, out / "runs" / RUN_ID)
    shutil.rmtree(work)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
