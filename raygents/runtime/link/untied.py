"""Work that must not end with the Ray task that asked for it.

``ray.cancel`` on a task cancels, by default, every task it submitted too: in an async actor
Ray takes the submitting task from a context variable, which asyncio copies into every task
and thread the request starts. A Serve replica's request is such a task, and Serve cancels it
when its HTTP client hangs up: without this, the calls it made on a run's behalf (the
coordinator's drive, the agent actor's start) would be cancelled with it, and the run would
end half started. A run has its own cancel (``RunHandle.cancel``); the Ray task of whoever
started it does not own it.

Ray keeps the variable in ``ray._raylet.async_task_id`` (its own Serve tests clear it the same
way); where a Ray version lacks it, the context is copied unchanged.
"""

from __future__ import annotations

import contextvars
from typing import Any

import ray

__all__ = ["untied"]

_TASK_ID: contextvars.ContextVar[Any] | None = getattr(ray._raylet, "async_task_id", None)


def untied() -> contextvars.Context:
    """A copy of the current context in which Ray sees no calling task: what runs in it
    (``context.run(...)``, or a task or callback created with it) is not cancelled with the
    task that called."""
    context = contextvars.copy_context()
    if _TASK_ID is not None:
        context.run(_TASK_ID.set, None)
    return context
