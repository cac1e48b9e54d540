"""Settings: what a namespace's coordinator runs with, plain data its drivers and actors read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from raygents.core.pricing import Price
from raygents.models.budgets import Budget
from raygents.models.ratelimit import RateLimit
from raygents.records import codec

__all__ = ["Durability", "Recovery", "Settings"]

Durability = Literal["sync", "async", "exit"]

_LEASE_S = 2.0


@dataclass(frozen=True)
class Recovery:
    """How runs whose agent actor died or went stale are recovered (see ``raygents.init``)."""

    attempts: int = 5
    """Dispatches of a run from its newest checkpoint before it fails."""
    backoff_s: float = 0.5
    """The first wait before a dispatch again; it doubles each attempt."""
    heartbeat_s: float = 2.0
    stale_after_s: float = 30.0

    @property
    def lease_s(self) -> float:
        """How long a lease on a run's dispatch lasts (see
        :mod:`raygents.runtime.coordinator.leases`): a dispatch that replaces a copy waits
        at most this long; under a third of ``stale_after_s``, so that a copy judged stale
        has no lease left."""
        return min(_LEASE_S, self.stale_after_s / 3)


@dataclass(frozen=True)
class Settings:
    """A namespace's settings, as the driver that creates its coordinator asks for them.

    The coordinator answers them back (``Coordinator.settings``) with ``direct`` and ``node``
    filled in; every driver checks them against its own and agent actors write records by them.
    """

    store: str = "memory://"
    """The checkpoint store's URL."""
    durability: Durability = "sync"
    key: bytes | None = None
    """The checkpoint HMAC key (``$RAYGENTS_CHECKPOINT_KEY``), or None for checksums only;
    never shown (see ``__repr__``)."""
    detached: bool = False
    """The coordinator and agent actors outlive the driver that created them."""
    recovery: Recovery = field(default_factory=Recovery)
    actor_options: Mapping[str, Any] = field(default_factory=dict)
    """Ray actor options for every agent actor."""
    max_concurrent_runs: int | None = None
    """Runs each tenant may have in flight; None admits every run."""
    rate_limits: Mapping[str, RateLimit] = field(default_factory=dict)
    """Requests and tokens per minute per model name, for every agent actor together."""
    prices: Mapping[str, Price] = field(default_factory=dict)
    """What each model name charges, for the cost of every model call of the namespace."""
    budgets: Mapping[str, Budget] = field(default_factory=dict)
    """What each tenant may spend per UTC day, across the namespace."""
    retention_s: float | None = None
    """How long ended runs' records and kept results stay in the store after their end
    (None: until ``raygents gc``)."""
    idle_actor_s: float | None = 600.0
    """An agent actor that has held no run (nothing a caller still needs) for this long
    retires; None: agent actors stay as long as the coordinator."""
    keep_history: bool = False
    """Completed runs keep their checkpoint records (their history) beside their completion
    marker, until retention or ``raygents gc`` removes them (False: deleted at their end)."""
    creator: str = ""
    """The driver that created the coordinator (it removes it when it closes)."""
    direct: bool = False
    """Agent actors write to the store themselves (an S3 store from any node, a ``file://``
    store on ``node``): running runs' records (``sync``, ``async``) and completed runs'
    markers."""
    node: str = ""
    """The coordinator's node (where a ``file://`` store's records are; agent actors on
    other nodes refuse to run with one)."""

    @property
    def key_id(self) -> bytes | None:
        """The key's id (never the key), to tell two keys apart without showing them."""
        return codec.key_id(self.key) if self.key is not None else None

    def __repr__(self) -> str:
        """Every field as the dataclass shows it but the key: whether one is set, and its
        id, never its bytes (settings end up in logs, errors and debuggers)."""
        key = "None" if self.key_id is None else f"<set, id {self.key_id.hex()}>"
        shown = (
            f"{f.name}={key if f.name == 'key' else repr(getattr(self, f.name))}"
            for f in fields(self)
        )
        return f"{type(self).__name__}({', '.join(shown)})"
