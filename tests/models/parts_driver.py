"""A driver for the parts tests, on a private Ray instance of its own: starts a run whose
input holds a large image, against the local Responses server at ``URL``; the run stops for
the approval of its tool call; prints its run id as a JSON line, then shuts raygents and Ray
down.

Usage: ``python parts_driver.py STORE_URL URL NAMESPACE``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

import ray

import raygents as rg

IMAGE = b"\x89PNG\r\n\x1a\n" + os.urandom(100_000)


@rg.tool(num_cpus=0, needs_approval=True)
def look(ctx: rg.ToolContext, what: str) -> str:
    """Look closer (a person approves each call)."""
    return f"closer look at {what}"


def main(store: str, url: str, namespace: str) -> None:
    ray.init(address="local", num_cpus=1, include_dashboard=False)
    rg.init(namespace=namespace, store=store, handle_sigterm=False)
    model = rg.OpenAIResponsesModel("fake-vision", base_url=url)
    agent = rg.Agent("parts_far", tools=[look], model=model)
    message = rg.Message("user", ["what is it?", rg.ImagePart(data=IMAGE, media_type="image/png")])
    handle = rg.start(agent, [message])
    with contextlib.suppress(rg.RunInterrupted):
        handle.result(timeout_s=60)
    print(json.dumps({"run_id": handle.run_id, "image": IMAGE.hex()}), flush=True)
    rg.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])
