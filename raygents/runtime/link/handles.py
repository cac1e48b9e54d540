"""The identity of a Ray actor handle."""

from __future__ import annotations

from typing import Any


def actor_key(handle: Any) -> str:
    """The id of the actor behind ``handle``, as hex: the same for every copy of a handle,
    different for a new actor under the same name.

    Ray's ``ActorHandle`` has no public accessor for its actor's id (only the actor itself
    can ask ``ray.get_runtime_context().get_actor_id()``), so the private ``_actor_id`` is
    read here and nowhere else.
    """
    return str(handle._actor_id.hex())
