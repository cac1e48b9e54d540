"""Helpers for fault-injection tests: a ledger of tool starts and effects, actor lookups."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import ray

import raygents as rg


class Ledger:
    """Tool starts and effects recorded in a file, by idempotency key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def effects(self) -> dict[str, int]:
        """How many times each idempotency key took effect (at most once: see
        :func:`apply_effect_once`), from the effects' marker files, which a worker killed
        before it wrote its ledger line leaves too."""
        seen: dict[str, int] = {}
        for marker in self.path.parent.glob(f"{self.path.stem}.*.done"):
            key = marker.read_text()
            seen[key] = seen.get(key, 0) + 1
        return seen

    def starts(self) -> dict[str, int]:
        seen: dict[str, int] = {}
        for entry in self.entries():
            if entry["event"] == "start":
                seen[entry["key"]] = seen.get(entry["key"], 0) + 1
        return seen


def record(path: str, event: str, key: str, **extra: Any) -> None:
    with open(path, "a") as f:
        f.write(json.dumps({"event": event, "key": key, "pid": os.getpid(), **extra}) + "\n")
        f.flush()


def apply_effect_once(path: str, key: str) -> None:
    """An idempotent effect: applied at most once per key, like a payment with a key."""
    marker = Path(path).with_suffix(f".{key.replace(':', '_').replace('/', '_')}.done")
    staged = marker.with_name(f"{marker.name}.{uuid.uuid4().hex}.tmp")  # (one per caller)
    staged.write_text(key)
    try:
        os.link(staged, marker)  # (the marker appears whole, with its key, or not at all)
    except FileExistsError:
        return
    finally:
        staged.unlink()
    record(path, "effect", key)


def agent_actor(name: str) -> Any:
    """The (first) actor serving agent ``name`` in the current namespace: the one this
    driver sent its runs to, else the one created for it (an idle actor that took another
    agent keeps the Ray name of the agent it was created for)."""
    runtime = rg.runtime.driver.client.current()
    cached = [h for (_, agent), h in runtime.directory._actors.items() if agent == name and h]
    if len(cached) == 1:
        return cached[0][0]
    namespace = runtime.namespace
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == namespace and entry["name"].startswith(f"agent:{name}@"):
            return ray.get_actor(entry["name"], namespace=namespace)
    raise LookupError(name)


def wait_for(predicate: Any, timeout_s: float = 30.0) -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        if time.time() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


def no_leaked_cpus(timeout_s: float = 60.0) -> None:
    """Every CPU is free again (tasks did not leak)."""
    wait_for(
        lambda: ray.available_resources().get("CPU", 0) == ray.cluster_resources().get("CPU", 0),
        timeout_s,
    )
