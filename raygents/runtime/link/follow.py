"""What a follower of a run's events gets from the coordinator's relay in one call: ``Follow``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from raygents.core.events import RunEvent

__all__ = ["Follow", "FollowState"]

FollowState = Literal["live", "waiting", "ended", "none"]
"""Where a run's feed stands at the relay: ``live`` (the relay has it), ``waiting`` (the run
is running and the relay asked its driving process for its events, which has not sent any
yet: it is about to, or it is gone), ``ended`` (the answer holds the rest of the feed, which
ended with the run's terminal event: numbered at or before ``after`` if not in the answer),
``none`` (no feed and the run is not running: it ended before anyone followed it, or its feed
expired; its history is in its checkpoints)."""


@dataclass(frozen=True)
class Follow:
    """One answer of the relay to a follower."""

    events: tuple[RunEvent, ...]
    """The run's events numbered after the follower's ``after``, oldest first (a batch: the
    follower asks again after the last one)."""
    state: FollowState
    """Where the run's feed stands (see :data:`FollowState`)."""
