"""A batch job: triage every support ticket of a JSON Lines file with an agent.

    python examples/batch_job.py --input tickets.jsonl --job-id tickets-2026-12
    ray job submit --working-dir . -- python examples/batch_job.py --job-id tickets-2026-12

Each line of the input is ``{"id": ..., "text": ...}`` (without ``--input``, a sample of 40
tickets is used). Results go to JSON Lines shards in ``--output``; checkpoints to
``$RAYGENTS_STORE`` (default ``./.raygents``; S3 on a cluster). Run it again with the same job
id after a crash or ``ray job stop``: completed tickets are skipped, suspended ones resume.

Offline by default: the model is a deterministic ``FunctionModel`` that tags each ticket
by its words; with ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set, ``$RAYGENTS_MODEL`` (default
``gpt-4o-mini``) through ``OpenAIChatModel``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import raygents as rg
from raygents.models.function import FunctionModel, call, calls, text

CATEGORIES = ("billing", "bug", "account", "other")
_WORDS = {"invoice": "billing", "refund": "billing", "crash": "bug", "error": "bug"}
_WORDS |= {"password": "account", "login": "account"}


@rg.tool(remote=False)
def tag_ticket(ctx: rg.ToolContext, category: str) -> str:
    """Tag the ticket being triaged with a category (billing, bug, account or other)."""
    if category not in CATEGORIES:
        return f"unknown category {category!r}; use one of {', '.join(CATEGORIES)}"
    effects = os.environ.get("BATCH_JOB_EFFECTS")  # (where a test counts the tags applied)
    pause = float(os.environ.get("BATCH_JOB_TOOL_S", "0"))
    if pause:
        time.sleep(pause)
    if effects:
        with open(effects, "a") as f:
            f.write(json.dumps({"key": ctx.idempotency_key, "ticket": ctx.context}) + "\n")
    return f"tagged {category}"


def offline_reply(request: rg.ModelRequest) -> rg.ModelResponse:
    """Tag the ticket by its words, then answer with the tag."""
    tagged = [m.text for m in request.messages if m.role == "tool"]
    if tagged:
        return text(tagged[-1].removeprefix("tagged "))
    words = request.messages[-1].text.lower()
    category = next((c for w, c in _WORDS.items() if w in words), "other")
    return calls(call("tag_ticket", {"category": category}, id="tag"))


def model() -> Any:
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return rg.OpenAIChatModel(os.environ.get("RAYGENTS_MODEL", "gpt-4o-mini"))
    return FunctionModel(offline_reply)


AGENT = rg.Agent(
    "triage",
    "Tag the ticket with tag_ticket, then answer with the category alone.",
    tools=[tag_ticket],
    model=model(),
)

_SAMPLE = ("I need a refund", "The app shows an error", "Forgot my password", "Hello there")


def tickets(path: str | None) -> Iterator[dict[str, Any]]:
    """The job's items, read one line at a time."""
    if path is None:
        for i in range(40):
            yield {"input": _SAMPLE[i % len(_SAMPLE)], "context": f"sample-{i}"}
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                ticket = json.loads(line)
                yield {"input": ticket["text"], "context": ticket.get("id")}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", help="a JSON Lines file of tickets (default: a sample)")
    parser.add_argument("--job-id", default="tickets")
    parser.add_argument("--output", default="batch-output", help="a directory or s3:// prefix")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    local = {} if os.environ.get("RAY_ADDRESS") else {"include_dashboard": False}
    rg.init(log_to_driver=False, **local)
    try:
        result = rg.run_batch(
            AGENT,
            tickets(args.input),
            job_id=args.job_id,
            concurrency=args.concurrency,
            output=args.output,
        )
    finally:
        rg.shutdown()
    print(
        f"job {result.job_id}: {result.completed} completed ({result.skipped} skipped), "
        f"{result.failed} failed, {result.suspended} suspended; output in {result.output}"
    )
    return 0 if result.failed == 0 and result.stopped is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
