"""The run context as plain data: what is stored, what is refused, and how writes merge."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

import raygents as rg
from raygents.core.contextdata import (
    StoredContext,
    apply,
    assign,
    capture,
    diff,
    revive,
    store,
    to_plain,
)


@dataclass
class Airline:
    passenger: str | None = None
    flight_number: str | None = None
    seats: list[str] = field(default_factory=list)


class Profile(BaseModel):
    name: str
    tags: list[str] = []


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str


@dataclass
class WithLock:
    lock: Any = None


@pytest.mark.parametrize(
    ("value", "data", "type_name"),
    [
        ({"a": 1, "b": [1.5, None, True]}, {"a": 1, "b": [1.5, None, True]}, None),
        ("text", "text", None),
        ([1, 2], [1, 2], None),
        (Airline("ann"), {"passenger": "ann", "flight_number": None, "seats": []}, "Airline"),
        (Profile(name="p", tags=["x"]), {"name": "p", "tags": ["x"]}, "Profile"),
    ],
)
def test_plain_data_and_models_are_stored(value: Any, data: Any, type_name: str | None) -> None:
    stored = store(value)
    assert stored is not None and stored.data == data
    if type_name is None:
        assert stored.type is None
    else:
        assert stored.type == f"{__name__}:{type_name}"
    assert store(None) is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (object(), "is a object"),
        ({"lock": threading.Lock()}, "context['lock'] is a lock"),
        ({1: "one"}, "key that is not a string"),
        ((1, 2), "is a tuple"),
        ({"s": {1, 2}}, "context['s'] is a set"),
        ({"big": 2**70}, "64-bit"),
        (WithLock(threading.Lock()), "PydanticSerializationError"),
    ],
)
def test_a_context_that_is_not_plain_data_is_refused(value: Any, problem: str) -> None:
    with pytest.raises(rg.UserError, match="cannot be stored as plain data") as info:
        store(value)
    assert problem in str(info.value)
    assert "NotDurable" in str(info.value)


def test_a_context_nested_too_deeply_is_refused() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100):
        node["next"] = {}
        node = node["next"]
    with pytest.raises(rg.UserError, match="nested more than 64 levels"):
        store(deep)


def test_a_not_durable_context_has_no_stored_form() -> None:
    with pytest.raises(rg.UserError, match="NotDurable"):
        store(rg.NotDurable(threading.Lock()))
    assert "NotDurable" in repr(rg.NotDurable(1))


@pytest.mark.parametrize(
    ("before", "after", "writes"),
    [
        ({"a": 1}, {"a": 1}, []),
        ({"a": 1}, {"a": 2}, [["set", ["a"], 2]]),
        ({"a": 1}, {"a": 1, "b": {"c": 1}}, [["set", ["b"], {"c": 1}]]),
        ({"a": 1, "b": 2}, {"a": 1}, [["del", ["b"]]]),
        ({"l": [1]}, {"l": [1, 2, 3]}, [["add", ["l"], [2, 3]]]),
        ({"l": [1, 2]}, {"l": [2]}, [["set", ["l"], [2]]]),
        ({"n": {"x": 1, "y": 1}}, {"n": {"x": 1, "y": 2}}, [["set", ["n", "y"], 2]]),
        ({"a": 1}, {"a": True}, [["set", ["a"], True]]),
        ("x", "y", [["set", [], "y"]]),
    ],
)
def test_diff_names_each_change(before: Any, after: Any, writes: list[Any]) -> None:
    assert diff(before, after) == writes
    assert apply(before, writes) == after


def test_writes_of_two_callers_merge_in_order() -> None:
    """Two tools that saw the same context: disjoint writes both stay, appends add up, and
    on one field the later write stands."""
    sent = {"seats": [], "a": None, "b": None, "same": 0}
    first = diff(sent, {"seats": ["1A"], "a": "first", "b": None, "same": 1})
    second = diff(sent, {"seats": ["2B"], "a": None, "b": "second", "same": 2})
    merged = apply(sent, first + second)
    assert merged == {"seats": ["1A", "2B"], "a": "first", "b": "second", "same": 2}
    assert sent == {"seats": [], "a": None, "b": None, "same": 0}, "apply changes no input"


def test_revive_makes_the_class_it_knows() -> None:
    stored = store(Airline("ann", "F1"))
    assert stored is not None
    stale = Airline("old")
    revived = revive(stored, stale)
    assert isinstance(revived, Airline) and revived.flight_number == "F1"
    assert revive(stored) == Airline("ann", "F1"), "found by its name in this process"
    same = Airline("ann", "F1")
    assert revive(stored, same) is same
    unknown = StoredContext(data={"x": 1}, type="no.such.module:Thing")
    assert revive(unknown) == {"x": 1}
    plain = StoredContext(data={"x": [1]})
    copy = revive(plain)
    copy["x"].append(2)
    assert plain.data == {"x": [1]}, "a revived copy is the process's own"


def test_assign_writes_into_the_callers_object() -> None:
    target = Airline("ann")
    assert assign(target, Airline("ann", "F9", ["3C"])) is target
    assert target.flight_number == "F9" and target.seats == ["3C"]
    d: dict[str, Any] = {"a": 1}
    assert assign(d, {"b": 2}) is d and d == {"b": 2}
    profile = Profile(name="p")
    assert assign(profile, Profile(name="q", tags=["t"])) is profile and profile.name == "q"
    frozen = Frozen(name="a")
    new = Frozen(name="b")
    assert assign(frozen, new) is new and frozen.name == "a"


def test_capture_keeps_the_same_object_when_nothing_changed() -> None:
    stored = store({"a": 1})
    assert capture(stored, {"a": 1}) is stored
    changed = capture(stored, {"a": 2})
    assert changed is not None and changed.data == {"a": 2}
    assert capture(None, {"anything": 1}) is None
    with pytest.raises(rg.UserError, match="plain data"):
        capture(stored, {"a": threading.Lock()})
    assert to_plain(Airline("x"))["passenger"] == "x"


def test_a_completed_runs_marker_keeps_a_small_final_context() -> None:
    from raygents.core.envelope import Outcome, RunState
    from raygents.records import keptresult
    from raygents.records.runinfo import outcome_entry

    small = RunState(run_id="r", agent_name="a", context=store(Airline("ann", "F1")))
    info, result = outcome_entry(Outcome("completed", small, output="done"))
    kept = keptresult.summary(keptresult.done_marker(info, 1, result))
    assert kept is not None and kept["context"] == small.context.model_dump(mode="json")
    assert revive(StoredContext.model_validate(kept["context"])) == Airline("ann", "F1")
    big = RunState(run_id="r", agent_name="a", context=store({"blob": "x" * 100_000}))
    info, result = outcome_entry(Outcome("completed", big, output="done"))
    kept = keptresult.summary(keptresult.done_marker(info, 1, result))
    assert kept is not None and "context" not in kept, "a large one is left out"
