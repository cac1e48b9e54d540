"""When a run started and whose agent-as-tool child it is: the run table keeps both across a
run's updates and dispatches, a completed run's marker keeps them for a restart, and
``raygents runs`` lists top-level runs unless ``--all`` (no Ray)."""

from __future__ import annotations

import io
import json
import os

import pytest

from raygents.cli.main import main
from raygents.core.envelope import Outcome, RunState
from raygents.core.messages import Message
from raygents.records import checkpoint, codec, keptresult, rebuild
from raygents.records.keptresult import done_marker
from raygents.records.runinfo import RunInfo, outcome_entry, parent_of
from raygents.runtime.actor.children import child_run_id
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.coordinator.runtable import RunTable
from raygents.runtime.link.settings import Settings
from raygents.stores.open import open_store

LONG = "p" * 100  # a parent id that its children's ids cut to 64 characters
NESTED = child_run_id(child_run_id("top", "c1"), "c2")


@pytest.mark.parametrize(
    ("run_id", "known", "parent"),
    [
        (child_run_id("top", "c1"), {"top"}, "top"),
        (child_run_id("top", "c1"), set(), None),  # (its parent is not known)
        (NESTED, {"top", child_run_id("top", "c1")}, child_run_id("top", "c1")),
        (child_run_id(LONG, "c1"), {LONG, "q" * 100}, LONG),
        (child_run_id(LONG, "c1"), {LONG, "p" * 64 + "x"}, None),  # (either may be its parent)
        ("top", {"top"}, None),
        ("job.retry", {"job"}, None),  # (a top-level id with a dot is no child's)
        ("job." + "a" * 23, {"job"}, None),
        ("job." + "A" * 24, {"job"}, None),
    ],
)
def test_a_child_runs_parent_is_read_from_its_id(
    run_id: str, known: set[str], parent: str | None
) -> None:
    assert parent_of(run_id, known) == parent


def test_a_run_keeps_when_it_started_across_its_updates_and_dispatches() -> None:
    table = RunTable()
    table.claim("r1", "driver", "triage")
    started = table.runs["r1"].started_at
    assert started is not None and started <= table.runs["r1"].updated_at
    table.note("r1", 1, ("suspended", "triage", 1, None))
    table.claim("r1", "driver-2", "triage")  # (a resume)
    table.update(RunInfo("r1", "running", "writer", 2))
    table.finish(RunInfo("r1", "completed", "writer", 3))
    assert table.runs["r1"].started_at == started
    assert table.runs["r1"].attempts == 2


def test_a_claimed_child_gets_its_parent_and_keeps_it() -> None:
    table = RunTable()
    child = child_run_id("top", "c1")
    table.claim("top", "driver", "boss")
    table.claim(child, "actor", "banker", force=True)
    table.adopt(child)
    table.adopt("top")
    assert (table.runs[child].parent, table.runs["top"].parent) == ("top", None)
    table.note(child, 1, ("running", "banker", 1, None))  # (a record names no parent)
    table.finish(RunInfo(child, "completed", "banker", 1))
    assert table.runs[child].parent == "top"


def test_an_outcome_names_the_childs_parent() -> None:
    state = RunState(run_id="top.x", agent_name="banker", parent_run_id="top")
    info, _ = outcome_entry(Outcome(kind="completed", state=state, output="ok"))
    assert info.parent == "top"


async def test_the_coordinator_names_the_parents_of_the_children_it_claims() -> None:
    coord = Coordinator("test", Settings(store=f"memory://parents-{os.urandom(4).hex()}"))
    await coord.claim("top", "driver", "boss")
    children = [child_run_id("top", c) for c in ("c1", "c2")]
    answers = await coord.claim_many([(c, "actor", "banker", True) for c in children])
    assert answers == [(None, 1), (None, 1)]
    assert [coord.table.runs[c].parent for c in children] == ["top", "top"]
    assert all(coord.table.runs[c].started_at is not None for c in children)


def _marker_found(done: dict[str, object], run_id: str) -> rebuild.Found | None:
    store = open_store(f"memory://markers-{os.urandom(4).hex()}")
    store.put(rebuild.done_key(run_id, 1), codec.encode(done))
    listed = rebuild.listing(run_id, store.list(checkpoint.run_prefix(run_id)))
    return rebuild.read(store, listed, None)


def test_a_marker_keeps_when_the_run_started_and_its_parent() -> None:
    info = RunInfo("top.x", "completed", "banker", 1, started_at=1_700_000_000.5, parent="top")
    done = done_marker(info, 1, {"final_output": "ok", "messages": (), "usage": None, "turns": 1})
    assert (done["started_at"], done["parent"]) == (1_700_000_000.5, "top")
    found = _marker_found(done, "top.x")
    assert found is not None and (found.started_at, found.parent) == (1_700_000_000.5, "top")


def test_a_marker_without_them_still_reads() -> None:
    done = done_marker(RunInfo("r1", "completed", "banker", 1), 1)
    assert "started_at" not in done and "parent" not in done
    found = _marker_found(done, "r1")
    assert found is not None and found.status == "completed"
    assert (found.started_at, found.parent) == (None, None)
    bad = {"started_at": "yesterday", "parent": "../etc", "at": True}
    assert (keptresult.started_at(bad), keptresult.parent(bad), keptresult.ended_at(bad)) == (
        None,
        None,
        None,
    )


def _write(url: str, state: RunState, status: str) -> None:
    """A run's first record (a full one, as an agent actor writes it), with ``status``."""
    store = open_store(url)
    _, record = checkpoint.make_record(state, status)  # type: ignore[arg-type]
    store.put(checkpoint.key_for(state.run_id, record["seq"]), checkpoint.encode(record))


def _runs(*argv: str) -> list[dict[str, object]]:
    out = io.StringIO()
    assert main(["runs", *argv, "--json"], out=out) == 0
    rows: list[dict[str, object]] = json.loads(out.getvalue())
    return rows


def test_runs_from_a_store_list_child_runs_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAYGENTS_CHECKPOINT_KEY", raising=False)
    url = f"memory://cli-parents-{os.urandom(4).hex()}"
    hi = (Message("user", "hi"),)
    named, unnamed = child_run_id("top", "c1"), child_run_id("top", "c2")
    _write(url, RunState(run_id="top", agent_name="boss", messages=hi), "suspended")
    child = RunState(run_id=named, agent_name="banker", messages=hi, parent_run_id="top")
    _write(url, child, "suspended")  # (its record names its parent)
    _write(url, RunState(run_id=unnamed, agent_name="banker", messages=hi), "suspended")
    assert [(r["run_id"], "parent" in r) for r in _runs("--store", url)] == [("top", False)]
    rows = {r["run_id"]: r["parent"] for r in _runs("--store", url, "--all")}
    assert rows == {"top": None, named: "top", unnamed: "top"}
    out = io.StringIO()
    assert main(["runs", "--store", url, "--all", "--agent", "banker"], out=out) == 0
    header, *lines = out.getvalue().splitlines()
    assert header.split()[:4] == ["RUN", "ID", "PARENT", "STATUS"]
    assert sorted(line.split()[:3] for line in lines) == sorted(
        [[named, "top", "suspended"], [unnamed, "top", "suspended"]]
    )
