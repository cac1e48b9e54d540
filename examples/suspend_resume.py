"""Suspend a run in one process and resume it in another.

    python examples/suspend_resume.py start      # starts a run, suspends it, prints its id
    python examples/suspend_resume.py resume ID  # a new driver continues it to the end

Checkpoints go to ./.raygents (or $RAYGENTS_STORE), so the second process finds them. Offline:
the model is a deterministic FunctionModel.
"""

from __future__ import annotations

import sys
import time

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text


@rg.tool(num_cpus=0)
def fetch_page(page: int) -> str:
    """Fetch one page of a (pretend) slow report."""
    time.sleep(0.5)
    return f"page {page}: {page * 7} new customers"


def reporter(request: rg.ModelRequest) -> rg.ModelResponse:
    pages = [m.text for m in request.messages if m.role == "tool"]
    if len(pages) < 4:
        return calls(call("fetch_page", {"page": len(pages) + 1}, id=f"page{len(pages) + 1}"))
    return text("summary: " + "; ".join(pages))


AGENT = rg.Agent(
    "reporter",
    "Read every page, then summarise.",
    tools=[fetch_page],
    model=FunctionModel(reporter),
)


def main(argv: list[str]) -> int:
    rg.init(include_dashboard=False, log_to_driver=False)
    try:
        if argv[:1] == ["start"]:
            handle = rg.start(
                AGENT, "Summarise the report", timeout_s=1.2
            )  # a budget, then suspend
            try:
                handle.result()
            except rg.SuspendedError as suspended:
                done = sum(1 for e in handle.events() if e.type == "tool_end")
                print(f"suspended after {done} page(s); resume with:")
                print(f"  python examples/suspend_resume.py resume {suspended.run_id}")
            return 0
        if argv[:1] == ["resume"] and len(argv) == 2:
            result = rg.resume(argv[1], agent=AGENT).result()
            print(result.final_output)
            return 0
    finally:
        rg.shutdown()
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
