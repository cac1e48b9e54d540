"""The agent actor that serves an agent, as this driver knows it (an actor's Ray name says
the agent it was created for, which an idle actor that took another agent no longer serves)."""

from __future__ import annotations

from typing import Any

from raygents.runtime.driver.client import current


def cached_actor(name: str) -> Any:
    """The actor handle this driver's directory holds for agent ``name`` (it ran one)."""
    runtime = current()
    (handles,) = [h for (_, agent), h in runtime.directory._actors.items() if agent == name]
    return handles[0]
