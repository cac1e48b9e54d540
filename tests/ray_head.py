"""A private local Ray instance that other processes join (``RAY_ADDRESS``), started and shut
down by this process (:func:`driver_process.driver_process` runs it).

``python ray_head.py`` starts a local instance with the settings ``raygents.init`` gives one
it starts itself, prints ``{"address": ...}`` (a JSON line), then reads commands, one a line:

- ``reset``: kill every named actor left on the instance, detached ones included (a process
  that joined it leaves its memory sessions' tables, the test script store, Ray Serve), and
  print ``{"ready": true}`` once none is left: the next process to join finds nothing of the
  last one;
- end of input: shut Ray down and exit.

Start it with ``RAY_AUTH_MODE=token`` and a ``RAY_AUTH_TOKEN`` of its own, and give the
processes that join it the same two.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time

import ray

from raygents.runtime.driver import startup


def named_actors() -> list[tuple[str, str]]:
    """(namespace, name) of each named actor alive on the instance."""
    found = ray.util.list_named_actors(all_namespaces=True)
    return [(str(entry["namespace"]), str(entry["name"])) for entry in found]


def reset(timeout_s: float = 60.0) -> None:
    """Kill every named actor, and wait until their names are free."""
    for namespace, name in named_actors():
        with contextlib.suppress(ValueError):  # (gone since it was listed)
            ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    deadline = time.monotonic() + timeout_s
    while named_actors():
        if time.monotonic() > deadline:
            raise TimeoutError(f"named actors still alive: {named_actors()}")
        time.sleep(0.1)


def main() -> None:
    context = ray.init(
        address="local",
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        **startup.local_defaults({}),
    )
    print(json.dumps({"address": context.address_info["gcs_address"]}), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "reset":
                reset()
                print(json.dumps({"ready": True}), flush=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
