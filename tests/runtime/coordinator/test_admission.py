"""Admission control: runs in flight per tenant (no Ray)."""

from __future__ import annotations

import pytest

from raygents.runtime.coordinator.admission import DEFAULT_TENANT, Admission


def test_a_tenant_past_its_limit_is_refused_and_another_tenant_is_not() -> None:
    admission = Admission(limit=2)
    assert [admission.admit(f"a{i}", "acme") for i in range(4)] == [True, True, False, False]
    assert [admission.admit(f"b{i}", "globex") for i in range(2)] == [True, True]
    assert admission.in_flight("acme") == 2 and admission.in_flight("globex") == 2
    assert not admission.holds("a2")


def test_a_released_slot_admits_the_next_run() -> None:
    admission = Admission(limit=1)
    assert admission.admit("r1")
    assert not admission.admit("r2")
    admission.release("r1")
    assert admission.admit("r2")
    assert admission.in_flight(DEFAULT_TENANT) == 1


def test_the_same_run_admitted_again_keeps_its_one_slot() -> None:
    admission = Admission(limit=1)
    assert admission.admit("r1", "acme")
    assert admission.admit("r1", "acme")  # a resume of a run in flight
    assert admission.in_flight("acme") == 1


def test_the_same_run_under_another_tenant_moves_its_slot() -> None:
    admission = Admission(limit=1)
    assert admission.admit("r1", "acme")
    assert admission.admit("r1", "globex")
    assert admission.in_flight("acme") == 0 and admission.in_flight("globex") == 1


@pytest.mark.parametrize("run_id", ["never-admitted", "r1"])
def test_release_is_idempotent(run_id: str) -> None:
    admission = Admission(limit=1)
    admission.admit("r1")
    admission.release(run_id)
    admission.release(run_id)
    assert admission.in_flight() == (1 if run_id == "never-admitted" else 0)


def test_without_a_limit_every_run_is_admitted_and_counted() -> None:
    admission = Admission()
    assert all(admission.admit(f"r{i}") for i in range(1000))
    assert admission.in_flight() == 1000


def test_memory_follows_the_runs_in_flight_not_the_refusals() -> None:
    admission = Admission(limit=1)
    admission.admit("kept", "acme")
    for i in range(10_000):
        admission.admit(f"refused-{i}", "acme")
    for i in range(1000):  # tenants come and go
        admission.admit(f"t{i}", f"tenant-{i}")
        admission.release(f"t{i}")
    assert len(admission._tenants) == 1 and len(admission._counts) == 1
