"""Each agent actor's gate to its namespace's rate limiter, found (or created) on first use."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import ray

from raygents import ratelimit
from raygents.ratelimit import Gate, Limiter, RateLimit
from raygents.runtime.coordinator_client import COORDINATOR_NAME

__all__ = ["LIMITER_NAME", "gate"]

log = logging.getLogger("raygents")

LIMITER_NAME = "raygents:ratelimiter"

_gates: dict[str | None, asyncio.Future[Gate | None]] = {}
"""This process's gate per namespace (None: the agent actor's own), looked up once; it
holds None where the namespace has no limits."""


async def gate(namespace: str | None = None) -> Gate | None:
    """This process's gate for ``namespace`` (default: the namespace of the agent actor this
    process runs), or None when it has no rate limits or this is no raygents agent actor."""
    found = _gates.get(namespace)
    if found is None:
        found = _gates[namespace] = asyncio.ensure_future(_open_gate(namespace))
    try:
        return await asyncio.shield(found)
    except Exception as exc:  # the call goes unlimited; the next one looks again
        if _gates.get(namespace) is found:
            del _gates[namespace]
        log.warning("cannot reach the rate limiter of namespace %r: %s", namespace, exc)
        return None


async def _open_gate(namespace: str | None) -> Gate | None:
    if namespace is None:
        namespace = await _in_executor(_actor_namespace)
        if namespace is None:
            return None
    coordinator = await _in_executor(ray.get_actor, COORDINATOR_NAME, namespace)
    limits: Mapping[str, RateLimit] = getattr(
        await coordinator.settings.remote(), "rate_limits", {}
    )
    if not limits:
        return None
    limiter = ray.remote(Limiter).options(
        name=LIMITER_NAME,
        namespace=namespace,
        get_if_exists=True,
        lifetime="detached",  # it serves every agent actor, whichever created it
        num_cpus=0,
        max_restarts=-1,
    )
    handle = await _in_executor(limiter.remote, dict(limits))
    await handle.configure.remote(dict(limits))
    opened = Gate(handle, limits)
    ratelimit.listen(opened)
    return opened


def _actor_namespace() -> str | None:
    """The raygents namespace of the agent actor this process runs, or None.

    Ray tells an actor its name but not the namespace it is named in (its runtime context
    has the job's), so the actor is looked up among the named actors by name and id.
    """
    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    name, actor_id = context.get_actor_name(), context.get_actor_id()
    if not name or not name.startswith("agent:"):
        return None
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["name"] != name:
            continue
        try:
            found = ray.get_actor(name, namespace=entry["namespace"])
        except ValueError:
            continue
        if found._actor_id.hex() == actor_id:
            return str(entry["namespace"])
    return None


async def _in_executor(fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
