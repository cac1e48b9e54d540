"""Hot records: a run's chain from its newest full record on, in any arrival order and across
dispatches, and the bounds on the chains of stopped (parked) runs."""

from __future__ import annotations

import pytest

from raygents.runtime.coordinator.hotrecords import HotChain, HotRecords


def test_hot_records_keep_the_chain_from_the_newest_full_record_in_any_arrival_order() -> None:
    hot = HotChain(1)
    hot.add(1, 1, b"1", 1, True)
    hot.add(3, 1, b"3", 1, False)  # arrives before 2
    hot.add(2, 1, b"2", 1, False)
    assert hot.blobs() == [b"1", b"2", b"3"]
    hot.add(5, 1, b"5", 1, False)
    hot.add(4, 1, b"4", 1, True)  # a full record drops what it supersedes, keeps what follows
    assert hot.blobs() == [b"4", b"5"]
    hot.add(2, 1, b"2", 1, False)  # older than the newest full record: not needed
    assert hot.blobs() == [b"4", b"5"]
    assert hot.size == 2


def test_a_later_dispatch_voids_the_hot_records_it_did_not_build_on() -> None:
    hot = HotChain(1)
    for seq in (1, 2, 3, 4):
        hot.add(seq, 1, f"{seq}".encode(), 1, seq == 1)
    hot.add(3, 2, b"3'", 1, False)  # dispatch 2 went on from record 2
    assert hot.blobs() == [b"1", b"2", b"3'"]
    hot.add(4, 2, b"4'", 1, False)
    hot.add(5, 1, b"5", 1, False)  # a late record of dispatch 1 is void too
    assert hot.blobs() == [b"1", b"2", b"3'", b"4'"]


def _keep(hot: HotRecords, run_id: str, seq: int, size: int, full: bool = True) -> None:
    hot.keep(run_id, seq, 1, b"x" * size, size, full, told=False)


def test_a_chain_starts_with_a_full_record() -> None:
    hot = HotRecords()
    assert not hot.takes("r1", full=False) and hot.takes("r1", full=True)
    _keep(hot, "r1", 2, 10, full=False)  # its chain starts in the store
    assert "r1" not in hot
    _keep(hot, "r1", 3, 10)
    _keep(hot, "r1", 4, 5, full=False)
    chain = hot.get("r1")
    assert chain is not None and chain.base == 3 and chain.size == 15
    assert hot.takes("r1", full=False)


@pytest.mark.parametrize(
    ("max_parked", "max_bytes", "kept"),
    [
        (2, 1000, ["b", "c"]),  # the count bound lets the oldest go
        (10, 25, ["b", "c"]),  # the bytes bound lets the oldest go
        (10, 15, ["c"]),
        (10, 1000, ["a", "b", "c"]),
        (0, 1000, []),
    ],
)
def test_parked_chains_are_bounded_in_count_and_bytes_oldest_first(
    max_parked: int, max_bytes: int, kept: list[str]
) -> None:
    hot = HotRecords(max_parked=max_parked, max_parked_bytes=max_bytes)
    for run_id in ("a", "b", "c"):
        _keep(hot, run_id, 1, 10)
        hot.park(run_id)
    assert list(hot.parked) == kept and sorted(hot.chains) == kept
    assert hot.parked_size == 10 * len(kept)


def test_running_chains_are_never_let_go_for_the_bounds() -> None:
    hot = HotRecords(max_parked=1, max_parked_bytes=15)
    for run_id in ("r1", "r2", "r3"):
        _keep(hot, run_id, 1, 10)  # running: not parked
    hot.park("r1")
    hot.park("r2")  # over the bounds: r1, the oldest parked, goes
    assert sorted(hot.chains) == ["r2", "r3"] and list(hot.parked) == ["r2"]


def test_a_parked_run_that_gets_a_record_again_is_running_and_unparked() -> None:
    hot = HotRecords()
    _keep(hot, "r1", 1, 10)
    hot.park("r1")
    _keep(hot, "r2", 1, 7)
    hot.park("r2")
    assert hot.parked_size == 17
    _keep(hot, "r1", 2, 5, full=False)  # resumed
    assert list(hot.parked) == ["r2"] and hot.parked_size == 7
    hot.park("r1")  # stopped again, with its new size
    assert list(hot.parked) == ["r2", "r1"] and hot.parked_size == 22
    hot.drop("r2")
    assert "r2" not in hot and hot.parked_size == 15
    hot.park("gone")  # nothing kept: nothing parked
    assert "gone" not in hot.parked
