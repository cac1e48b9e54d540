"""Placement: whether some node of the cluster can hold what a tool's task reserves."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import ray

from raygents.agents.tools import Tool

__all__ = ["demand", "unplaceable"]

log = logging.getLogger("raygents")

_FRESH_S = 5.0
"""How long one look at the cluster's nodes answers for every task that asks the same."""
_looks: dict[tuple[tuple[str, float], ...], tuple[float, asyncio.Future[str | None]]] = {}


def demand(tool: Tool) -> dict[str, float]:
    """What a task of ``tool`` reserves beyond Ray's default (CPUs, GPUs, custom resources)."""
    wanted: dict[str, float] = {}
    if tool.num_cpus is not None:
        wanted["CPU"] = tool.num_cpus
    if tool.num_gpus is not None:
        wanted["GPU"] = tool.num_gpus
    wanted.update(tool.resources or {})
    return {name: amount for name, amount in wanted.items() if amount > 0}


async def unplaceable(wanted: Mapping[str, float]) -> str | None:
    """Why no node of the cluster alive now can hold ``wanted``, or None when one can (or
    when the nodes cannot be read: the task then waits as Ray has it wait).

    The calls of one fan-out share a look at the nodes: one per :data:`_FRESH_S` for each
    set of resources asked for."""
    key = tuple(sorted(wanted.items()))
    now = time.monotonic()
    found = _looks.get(key)
    if found is None or now - found[0] >= _FRESH_S:
        look = asyncio.get_running_loop().run_in_executor(None, _why, dict(wanted))
        found = _looks[key] = (now, look)
    return await asyncio.shield(found[1])


def _why(wanted: dict[str, float]) -> str | None:
    try:
        listed: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        nodes = [n["Resources"] for n in listed if n.get("Alive")]
    except Exception as exc:  # (the GCS is restarting: let Ray queue the task)
        log.debug("cannot list the cluster's nodes: %s", exc)
        return None
    if any(all(node.get(name, 0) >= amount for name, amount in wanted.items()) for node in nodes):
        return None
    asked = ", ".join(f"{name} {amount:g}" for name, amount in sorted(wanted.items()))
    most = ", ".join(
        f"{name} {max((node.get(name, 0) for node in nodes), default=0):g}"
        for name in sorted(wanted)
    )
    return (
        f"no node of the cluster can hold what its task reserves ({asked}); the most any "
        f"of its {len(nodes)} node(s) has: {most}"
    )
