"""The run table on its own: dispatches and their epochs, fencing, session locks, waits for a
run's end, the caps on ended runs and kept results, and listings of runs not read yet."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raygents.core.envelope import Outcome, RunState
from raygents.core.messages import Message
from raygents.errors import CheckpointError, RunCancelled, TooManyRuns, UserError
from raygents.records import rebuild
from raygents.records.runinfo import RunInfo, outcome_status, table_status
from raygents.runtime.coordinator.runtable import KeptResults, RunTable, result_size
from raygents.runtime.link.coordinator_client import Listed


def _table() -> tuple[RunTable, list[tuple[str, bool]]]:
    forgotten: list[tuple[str, bool]] = []
    table = RunTable(on_forget=lambda run_id, records_go: forgotten.append((run_id, records_go)))
    return table, forgotten


def _end(table: RunTable, run_id: str, status: Any, result: Any = None) -> None:
    table.finish(RunInfo(run_id, status, "agent"), result)


# --- dispatches ---------------------------------------------------------------------------


def test_each_claim_is_a_new_epoch_and_another_owners_running_run_is_taken() -> None:
    table, _ = _table()
    assert table.claim("r1", "driver-1", "agent") == (None, 1)
    taken, epoch = table.claim("r1", "driver-2", "agent")
    assert taken is not None and taken.owner == "driver-1" and epoch == 0
    assert table.claim("r1", "driver-1", "agent") == (None, 2), "its own owner claims again"
    assert table.claim("r1", "driver-2", "agent", force=True) == (None, 3)
    info = table.runs["r1"]
    assert (info.status, info.owner, info.attempts) == ("running", "driver-2", 3)


def test_a_run_entered_before_its_first_claim_starts_at_one_attempt() -> None:
    table, _ = _table()
    table.note("r1", 3, ("running", "agent", 2, None))  # a record came before the claim
    assert table.claim("r1", "driver", "agent") == (None, 1)
    info = table.runs["r1"]
    assert (info.attempts, info.seq, info.turns) == (1, 3, 2)


def test_an_unclaim_puts_back_the_entry_as_it_was() -> None:
    table, _ = _table()
    _end(table, "r1", "suspended")
    before = table.runs["r1"]
    table.claim("r1", "driver", "agent")
    table.unclaim("r1", before)
    assert table.runs["r1"] == before
    table.claim("new", "driver", "agent")
    table.unclaim("new", None)
    assert "new" not in table.runs


def test_a_record_of_an_earlier_dispatch_is_fenced() -> None:
    table, _ = _table()
    table.claim("r1", "driver", "agent")
    table.claim("r1", "driver", "agent", force=True)
    table.fence("r1", 3, 2, "key")  # the current dispatch
    with pytest.raises(CheckpointError, match="fenced") as info:
        table.fence("r1", 3, 1, "key")
    assert info.value.run_id == "r1"


def test_a_completed_run_is_refused() -> None:
    table, _ = _table()
    table.refuse_completed("r1")  # unknown: nothing to refuse
    _end(table, "r1", "completed")
    with pytest.raises(UserError, match="'r1' already completed"):
        table.refuse_completed("r1")


def test_attempts_never_go_down_and_the_owner_stays_unless_named() -> None:
    table, _ = _table()
    table.claim("r1", "driver", "agent")
    table.claim("r1", "driver", "agent")
    table.update(RunInfo("r1", "suspended", "agent"))
    info = table.runs["r1"]
    assert (info.attempts, info.owner) == (2, "driver")


# --- sessions and waits ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("holder_status", "answer"),
    [("running", "r1"), ("pending", "r1"), ("suspended", None), ("failed", None), (None, None)],
)
def test_a_session_is_refused_only_while_its_holder_runs(
    holder_status: Any, answer: str | None
) -> None:
    table, _ = _table()
    table.lock_session("s", "r1")
    if holder_status is not None:
        table.update(RunInfo("r1", holder_status, "agent"))
    assert table.lock_session("s", "r2") == answer
    assert table.lock_session("s", "r1" if answer else "r2") is None


def test_an_end_releases_the_runs_sessions() -> None:
    table, _ = _table()
    table.claim("r1", "driver", "agent")
    table.lock_session("a", "r1")
    table.lock_session("b", "r1")
    _end(table, "r1", "suspended")
    assert table.sessions == {}


async def test_a_wait_returns_at_the_runs_end_with_its_result() -> None:
    table, _ = _table()
    table.claim("r1", "driver", "agent")
    waiter = asyncio.ensure_future(table.wait("r1"))
    await asyncio.sleep(0)
    assert not waiter.done()
    _end(table, "r1", "completed", {"final_output": "42"})
    info, result = await waiter
    assert info is not None and info.status == "completed" and result == {"final_output": "42"}
    assert await table.wait("r1") == (table.runs["r1"], {"final_output": "42"}), "at once"
    assert await table.wait("unknown") == (None, None)


# --- bounds -------------------------------------------------------------------------------


def test_ended_runs_beyond_the_caps_are_forgotten_oldest_first_and_said() -> None:
    table, forgotten = _table()
    table.completed_kept, table.failed_kept = 2, 1
    for n in range(3):
        table.claim(f"f{n}", "driver", "agent")
        _end(table, f"f{n}", "failed")
    for n in range(3):
        table.claim(f"c{n}", "driver", "agent")
        _end(table, f"c{n}", "completed", {"final_output": "ok"})
    _end(table, "s0", "suspended")  # resumable: never forgotten
    assert sorted(table.runs) == ["c1", "c2", "f2", "s0"]
    assert set(table.epochs) == {"c1", "c2", "f2"} and set(table.results) == {"c1", "c2"}
    assert forgotten == [("f0", True), ("f1", True), ("c0", False)]
    assert table.forgot


def test_a_forgotten_unreadable_run_keeps_its_records() -> None:
    table, forgotten = _table()
    table.failed_kept = 0
    table.enter(RunInfo("bad", "failed", "?", updated_at=1.0), unreadable=True)
    assert forgotten == [("bad", False)] and "bad" not in table.unreadable


def test_a_run_that_leaves_the_ended_runs_is_no_longer_counted() -> None:
    table, forgotten = _table()
    table.failed_kept = 1
    _end(table, "f0", "failed")
    table.claim("f0", "driver", "agent")  # resumed: running now
    _end(table, "f1", "failed")
    _end(table, "f2", "failed")
    assert set(table.runs) == {"f0", "f2"} and [r for r, _ in forgotten] == ["f1"]


def test_results_are_bounded_in_count_and_in_bytes() -> None:
    results = KeptResults(max_count=2, max_bytes=10_000)
    for n in range(3):
        results.keep(f"r{n}", {"final_output": "x"})
    assert list(results) == ["r1", "r2"] and len(results) == 2
    results.max_bytes = result_size({"final_output": "x" * 100}) + 10
    results.keep("big", {"final_output": "x" * 100})
    assert list(results) == ["big"], "the others went to make room"
    results.keep("huge", {"final_output": "x" * 1000})  # too large alone: not kept
    assert list(results) == ["big"] and results.get("huge") is None
    results.drop("big")
    assert results.size == 0


def test_a_results_size_counts_its_texts() -> None:
    message = Message("user", "y" * 500)
    assert result_size(None) == 256
    assert result_size({"final_output": "x" * 100}) == 356
    assert result_size({"final_output": "", "messages": (message,)}) == 256 + 64 + 500


# --- runs not read yet -------------------------------------------------------------------


def test_a_listing_names_runs_not_read_yet_as_unknown_until_complete() -> None:
    table, _ = _table()
    table.unread["later"] = rebuild.Listing("later")
    _end(table, "r1", "suspended")
    assert [r.run_id for r in table.listing(None, complete=True)] == ["r1"]
    listed = table.listing(None, complete=False)
    assert [(r.run_id, r.status) for r in listed] == [("r1", "suspended"), ("later", "unknown")]
    assert [r.run_id for r in table.listing("unknown", complete=False)] == ["later"]
    assert table.listing("running", complete=False) == []


def test_a_narrowed_listing_gives_the_newest_of_its_statuses_agent_and_runs() -> None:
    table, _ = _table()
    table.unread["later"] = rebuild.Listing("later")
    for i, (status, agent) in enumerate(
        [("completed", "a"), ("failed", "b"), ("completed", "b"), ("completed", "a")]
    ):
        table.finish(RunInfo(f"r{i}", status, agent, updated_at=float(i + 1)), None)
    table.claim("r9", "driver", "a")  # (running, updated now: the newest)

    def listed(where: Listed, complete: bool = True) -> list[str]:
        return [r.run_id for r in table.listing(None, complete, where)]

    assert listed(Listed(2)) == ["r3", "r9"], "oldest first, as a whole listing"
    assert listed(Listed(10, frozenset({"completed"}))) == ["r0", "r2", "r3"]
    assert listed(Listed(10, agent="b")) == ["r1", "r2"]
    assert listed(Listed(1, frozenset({"completed"}), "a")) == ["r3"]
    assert listed(Listed(10, run_ids=frozenset({"r1", "r9", "gone"}))) == ["r1", "r9"]
    assert listed(Listed(10, frozenset({"running", "unknown"})), complete=False) == ["later", "r9"]
    assert listed(Listed(10, agent="a"), complete=False) == ["r0", "r3", "r9"]
    assert listed(Listed(10, run_ids=frozenset({"r9"})), complete=False) == ["r9"]


def test_news_of_a_run_not_read_yet_replaces_what_its_records_would_say() -> None:
    table, _ = _table()
    table.unread["r1"] = rebuild.Listing("r1")
    table.claim("r1", "driver", "agent")
    assert "r1" not in table.unread


# --- statuses -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("completed", "completed"),
        ("suspended", "suspended"),
        ("interrupted", "awaiting_approval"),
        ("failed", "failed"),
        ("handoff", "failed"),
    ],
)
def test_an_outcome_gives_the_runs_status(kind: Any, status: str) -> None:
    state = RunState(run_id="r", agent_name="a")
    assert outcome_status(Outcome(kind, state)) == status


def test_a_cancelled_runs_outcome_gives_the_cancelled_status() -> None:
    state = RunState(run_id="r", agent_name="a")
    assert outcome_status(Outcome("failed", state, error=RunCancelled("cancelled"))) == "cancelled"
    assert outcome_status(Outcome("failed", state, error=UserError("bad"))) == "failed"


def test_a_status_is_checked() -> None:
    assert table_status("unknown") == "unknown"
    with pytest.raises(ValueError, match="'exploded'"):
        table_status("exploded")
    table, _ = _table()
    with pytest.raises(ValueError):
        table.note("r1", 1, ("exploded", "agent", 0, None))


# --- runs in flight per tenant ------------------------------------------------------------


def test_a_claim_past_its_tenants_limit_is_refused_and_changes_nothing() -> None:
    table = RunTable(max_concurrent_runs=1)
    assert table.claim("a1", "driver", "agent", tenant="acme") == (None, 1)
    with pytest.raises(TooManyRuns) as refused:
        table.claim("a2", "driver", "agent", tenant="acme")
    assert (refused.value.tenant, refused.value.limit, refused.value.run_id) == ("acme", 1, "a2")
    assert "a2" not in table.runs and "a2" not in table.epochs
    assert table.claim("b1", "driver", "agent", tenant="globex") == (None, 1)
    assert table.claim("d1", "driver", "agent") == (None, 1)  # no tenant: the default one's
    with pytest.raises(TooManyRuns, match="'default'"):
        table.claim("d2", "driver", "agent")


def test_children_and_claims_again_take_no_second_slot() -> None:
    table = RunTable(max_concurrent_runs=1)
    table.claim("parent", "driver", "agent", tenant="acme")
    assert table.claim("parent/child", "actor", "agent", force=True) == (None, 1)
    assert table.claim("parent", "driver", "agent")[1] == 2  # its tenant is remembered
    assert table.admission.in_flight("acme") == 1


@pytest.mark.parametrize("status", ["suspended", "awaiting_approval", "completed", "failed"])
def test_a_run_that_stops_gives_its_slot_back(status: Any) -> None:
    table = RunTable(max_concurrent_runs=1)
    table.claim("r1", "driver", "agent", tenant="acme")
    table.finish(RunInfo("r1", status, "agent"))
    assert table.runs["r1"].tenant == "acme"  # (kept for its resume)
    assert table.claim("r2", "driver", "agent", tenant="acme") == (None, 1)


def test_a_stopping_record_gives_the_slot_back_and_an_undone_claim_too() -> None:
    table = RunTable(max_concurrent_runs=1)
    table.claim("r1", "driver", "agent", tenant="acme")
    table.note("r1", 3, ("suspended", "agent", 2, None))
    assert table.runs["r1"].tenant == "acme"
    before = table.runs["r1"]
    table.claim("r1", "driver", "agent")  # a resume, in acme's slot
    table.unclaim("r1", before)  # ... that did not go on
    assert table.claim("r2", "driver", "agent", tenant="acme") == (None, 1)


def test_without_a_limit_nothing_is_refused() -> None:
    table = RunTable()
    for i in range(100):
        assert table.claim(f"r{i}", "driver", "agent", tenant="acme")[1] == 1
