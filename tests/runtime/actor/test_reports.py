"""An agent actor's reports to the coordinator: records it wrote itself and the ends of its
agent-as-tool children travel together, in batches (no Ray: a fake coordinator handle)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fakes import FakeHandle

from raygents.core.envelope import RunState
from raygents.core.messages import Message
from raygents.records.runinfo import Note
from raygents.runtime.actor import reports as reports_module
from raygents.runtime.actor.reports import Reports
from raygents.runtime.link.coordinator_client import CoordinatorClient


def _reports() -> tuple[Reports, list[tuple[list[Any], list[Any]]]]:
    calls: list[tuple[list[Any], list[Any]]] = []

    class Target:
        def noted(self, notes: list[Any], ends: list[Any]) -> None:
            calls.append((list(notes), list(ends)))

    handle = FakeHandle(Target())
    return Reports(CoordinatorClient("ns", handle).noted), calls


def _child(run_id: str, seq: int) -> RunState:
    return RunState(
        run_id=run_id,
        agent_name="worker",
        messages=(Message("user", "go"),),
        input_len=1,
        seq=seq,
        turns=1,
    )


def _note(run_id: str, seq: int) -> Note:
    return (run_id, seq, 1, b"record", ("running", "reporting", 1, None), seq == 1)


@pytest.fixture(autouse=True)
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reports_module, "_NOTE_WINDOW_S", 0.02)


async def test_child_ends_go_with_the_record_reports_of_one_window() -> None:
    reports, calls = _reports()
    reports.child_ended(_child("parent.c1", 2))
    reports.stored(_note("parent", 3))  # the parent's journal record, just written
    reports.child_ended(_child("parent.c2", 2))
    assert calls == [] and reports.ends_waiting
    for _ in range(100):
        if calls:
            break
        await asyncio.sleep(0.02)
    [(notes, ends)] = calls
    assert notes == [_note("parent", 3)]
    assert [(e.run_id, e.status, e.seq) for e in ends] == [
        ("parent.c1", "completed", 2),
        ("parent.c2", "completed", 2),
    ]
    assert not reports.ends_waiting
    reports.send()  # nothing left: no call
    assert len(calls) == 1


async def test_a_completed_runs_waiting_reports_are_dropped_and_others_kept() -> None:
    reports, calls = _reports()
    for note in (_note("done", 1), _note("running", 1), _note("done", 2)):
        reports.stored(note)
    reports.drop("done")
    await reports.settled()
    assert calls == [([_note("running", 1)], [])]


@pytest.mark.parametrize("pending", [True, False])
async def test_reports_settle_before_a_handoff_goes_out(
    pending: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reports_module, "_NOTE_WINDOW_S", 600.0)
    reports, calls = _reports()
    if pending:
        reports.stored(_note("r1", 1))
    await reports.settled()  # sends at once, without waiting for the window
    assert calls == ([([_note("r1", 1)], [])] if pending else [])


async def test_a_coordinator_that_missed_reports_is_only_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import ray.exceptions

    class Target:
        def noted(self, notes: list[Any], ends: list[Any]) -> asyncio.Future[None]:
            failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failed.set_exception(ray.exceptions.RayActorError())
            return failed

    handle = FakeHandle(Target())
    reports = Reports(CoordinatorClient("ns", handle).noted)
    reports.stored(_note("r1", 1))
    await reports.settled()
    assert "missed reports" in caplog.text
