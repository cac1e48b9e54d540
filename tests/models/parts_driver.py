"""A driver for the parts tests, joined to the Ray instance at ``ADDRESS`` (the test
session's): starts a run whose input holds a large image, against the local Responses server at
``URL``; the run stops for the approval of its tool call; prints its run id as a JSON line,
then shuts raygents down (its coordinator and agent actors go) and leaves Ray.

Usage: ``python parts_driver.py ADDRESS STORE_URL URL NAMESPACE``.
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


def main(address: str, store: str, url: str, namespace: str) -> None:
    ray.init(address=address, log_to_driver=False)
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
    main(*sys.argv[1:5])
