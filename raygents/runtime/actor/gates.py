"""Each agent actor's gate to its namespace's rate limiter, found (or created) on first use."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import ray

from raygents.models import ratelimit
from raygents.models.ratelimit import Gate, Limiter, RateLimit
from raygents.runtime.link.coordinator_client import COORDINATOR_NAME, CoordinatorClient

__all__ = ["LIMITER_NAME", "gate"]

log = logging.getLogger("raygents")

LIMITER_NAME = "raygents:ratelimiter"

_gates: dict[str | None, asyncio.Future[Gate | None]] = {}
"""This process's gate per namespace, looked up once; it holds None where the namespace has
no limits."""


async def gate(namespace: str | None = None) -> Gate | None:
    """This process's gate for ``namespace``, or None when it has no rate limits (or no
    namespace is given: a model called outside an agent actor)."""
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
        return None
    coordinator = await _in_executor(ray.get_actor, COORDINATOR_NAME, namespace)
    settings = await CoordinatorClient(namespace, coordinator).settings()
    limits: Mapping[str, RateLimit] = settings.rate_limits
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


async def _in_executor(fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
