"""Hot records: each run's checkpoint records from its newest full one on, kept in memory so a
resume or a recovery reads no store; those of stopped runs are bounded, oldest let go first."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HotChain", "HotRecords"]

_PARKED = 10_000  # stopped runs whose records stay in memory for a quick resume, at most
_PARKED_BYTES = 64 * 1024 * 1024  # and their bytes


@dataclass
class HotChain:
    """A run's records from its newest full one (``base``) on: seq -> (bytes or ref, size,
    epoch). ``told``: the newest one was written by an agent actor and reported after (an
    actor has its reports acknowledged before it has the coordinator store a record)."""

    base: int
    records: dict[int, tuple[Any, int, int]] = field(default_factory=dict)
    told: bool = False

    def add(self, seq: int, epoch: int, blob: Any, size: int, full: bool) -> None:
        """Add a record in any arrival order; a full one drops the records it supersedes."""
        # a later dispatch's record voids an earlier dispatch's records from its seq on
        if any(k <= seq and v[2] > epoch for k, v in self.records.items()):
            return
        self.records = {
            k: v for k, v in self.records.items() if k < seq or (k > seq and v[2] >= epoch)
        }
        if full and seq > self.base:
            self.records = {k: v for k, v in self.records.items() if k > seq}
            self.base = seq
        if seq >= self.base:
            self.records[seq] = (blob, size, epoch)

    @property
    def size(self) -> int:
        """The bytes of its records."""
        return sum(size for _, size, _ in self.records.values())

    def blobs(self) -> list[Any]:
        """Its records, oldest first."""
        return [self.records[k][0] for k in sorted(self.records)]


class HotRecords:
    """The hot chains of runs. A running run's chain is kept while it runs; a stopped run's
    is *parked*, and parked chains are bounded in count and bytes (the sizes they had when
    they were parked), the oldest parked let go first. A chain that gets a record again
    (its run resumed) is no longer parked.

    A small class rather than a general LRU cache: only parked chains count against the
    bounds, and there are two of them (count and bytes).
    """

    def __init__(self, max_parked: int = _PARKED, max_parked_bytes: int = _PARKED_BYTES) -> None:
        self.max_parked = max_parked
        self.max_parked_bytes = max_parked_bytes
        self.chains: dict[str, HotChain] = {}
        self.parked: OrderedDict[str, int] = OrderedDict()
        """Parked runs, oldest first, with their chains' sizes."""
        self.parked_size = 0

    def __contains__(self, run_id: object) -> bool:
        return run_id in self.chains

    def get(self, run_id: str) -> HotChain | None:
        """The run's chain, if kept."""
        return self.chains.get(run_id)

    def takes(self, run_id: str, full: bool) -> bool:
        """Whether a record of the run is kept: a chain starts with a full record."""
        return full or run_id in self.chains

    def keep(
        self, run_id: str, seq: int, epoch: int, blob: Any, size: int, full: bool, told: bool
    ) -> None:
        """Add a record to the run's chain (see :meth:`takes`); its run is running again."""
        self._unpark(run_id)
        chain = self.chains.get(run_id)
        if chain is None:
            if not full:
                return  # its chain starts in the store
            chain = self.chains[run_id] = HotChain(seq)
        chain.add(seq, epoch, blob, size, full)
        chain.told = told

    def park(self, run_id: str) -> None:
        """The run stopped (resumable): keep its chain within the bounds on parked chains."""
        chain = self.chains.get(run_id)
        if chain is None:
            return
        self._unpark(run_id)
        size = self.parked[run_id] = chain.size
        self.parked_size += size
        while len(self.parked) > self.max_parked or self.parked_size > self.max_parked_bytes:
            self.drop(next(iter(self.parked)))

    def drop(self, run_id: str) -> None:
        """Let the run's chain go (it completed, was forgotten, or the store's chain differs)."""
        self._unpark(run_id)
        self.chains.pop(run_id, None)

    def _unpark(self, run_id: str) -> None:
        self.parked_size -= self.parked.pop(run_id, 0)
