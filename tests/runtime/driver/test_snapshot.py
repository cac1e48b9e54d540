"""Graph snapshots: the cached snapshot of an unchanged graph, and every change seen."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ray import cloudpickle

import raygents as rg
from raygents.agents.agent import agent_graph
from raygents.runtime.driver import snapshot as snapshots
from raygents.runtime.driver.canonical import canonical_digest
from raygents.testing import FunctionModel, text

SETTINGS = {"greeting": "hello"}


@rg.tool
def shout(word: str) -> str:
    """Shout a word."""
    return word.upper()


def answer(request: rg.ModelRequest) -> rg.ModelResponse:
    """A model's reply, from a function of this module."""
    return text("x")


def full(agent: rg.Agent) -> tuple[bytes, str]:
    """What the snapshot must be: cloudpickle's bytes of the graph, and their fingerprint."""
    blob = cloudpickle.dumps(dict(sorted(agent_graph(agent).items())))
    return blob, canonical_digest(blob)[:16]


@pytest.fixture
def dumps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every graph snapshotted in full from now on."""
    made: list[Any] = []
    real = cloudpickle.dumps

    def counting(obj: Any, *args: Any, **kwargs: Any) -> bytes:
        made.append(obj)
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(snapshots.cloudpickle, "dumps", counting)
    yield made


def check(agent: rg.Agent, dumps: list[Any], *, fresh: bool) -> str:
    """Snapshot ``agent``: the bytes and fingerprint a full snapshot gives, made anew or not."""
    expected = full(agent)
    before = len(dumps)
    graph, blob, fp, _ = snapshots.snapshot(agent)
    assert graph == agent_graph(agent)
    assert (blob, fp) == expected
    assert len(dumps) - before == (1 if fresh else 0)
    return fp


def check_changes(agent: rg.Agent, dumps: list[Any], changes: list[Callable[[], None]]) -> None:
    """After each change, a snapshot made anew with a fingerprint not seen before, then found."""
    seen = {check(agent, dumps, fresh=True)}
    for change in changes:
        change()
        fp = check(agent, dumps, fresh=True)
        assert fp not in seen
        seen.add(fp)
        check(agent, dumps, fresh=False)


def test_an_unchanged_graph_is_pickled_once(dumps: list[Any]) -> None:
    agent = rg.Agent("once", "be brief", tools=[shout], model=FunctionModel(lambda r: text("x")))
    first = check(agent, dumps, fresh=True)
    assert check(agent, dumps, fresh=False) == first
    twin = rg.Agent("once", "be brief", tools=[shout], model=agent.model)
    assert check(twin, dumps, fresh=False) == first  # another agent object, the same contents


def test_every_change_to_the_agents_and_what_they_hold_is_seen(dumps: list[Any]) -> None:
    model = FunctionModel(lambda r: text("x"))
    helper = rg.Agent("helper", "help", model=model)
    agent = rg.Agent("changing", "v1", tools=[helper.as_tool("helper", "helps")], model=model)
    changes: list[Callable[[], None]] = [
        lambda: setattr(agent, "instructions", "v2"),
        lambda: agent.tools.append(shout),
        lambda: setattr(model, "latency_s", 0.5),
        lambda: setattr(helper, "instructions", "help more"),
    ]
    check_changes(agent, dumps, changes)


def test_changes_to_code_that_travels_by_value_are_seen(dumps: list[Any]) -> None:
    """Functions and classes defined in a function travel by value: their globals, closures,
    defaults, code and class attributes are part of the snapshot."""
    suffix = "!"

    def reply(request: rg.ModelRequest, punctuation: str = ".") -> rg.ModelResponse:
        return text(SETTINGS["greeting"] + suffix + punctuation)

    class Greeter:
        style = "plain"

        def __call__(self, request: rg.ModelRequest) -> rg.ModelResponse:
            return reply(request)

    agent = rg.Agent("by-value", model=FunctionModel(Greeter()))

    def other(request: rg.ModelRequest, punctuation: str = ".") -> rg.ModelResponse:
        return text(suffix + punctuation)  # (the same free variables as reply's code)

    def rebind_suffix() -> None:
        nonlocal suffix
        suffix = "?"

    changes: list[Callable[[], None]] = [
        lambda: SETTINGS.update(greeting="hi"),  # a global it reads, changed in place
        rebind_suffix,  # a variable of its closure
        lambda: setattr(reply, "__defaults__", ("?",)),
        lambda: setattr(reply, "__code__", other.__code__),
        lambda: setattr(Greeter, "style", "fancy"),  # a class attribute
        lambda: setattr(Greeter, "extra", staticmethod(other)),  # a new method
    ]
    try:
        check_changes(agent, dumps, changes)
    finally:
        SETTINGS["greeting"] = "hello"


def test_a_module_registered_by_value_later_changes_the_snapshot(dumps: list[Any]) -> None:
    agent = rg.Agent("registered", model=FunctionModel(answer))
    by_reference = check(agent, dumps, fresh=True)
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        by_value = check(agent, dumps, fresh=True)
        check(agent, dumps, fresh=False)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert by_value != by_reference
    assert check(agent, dumps, fresh=False) == by_reference


def test_a_copy_of_an_agent_has_its_fingerprints() -> None:
    """An agent unpickled elsewhere (a Serve replica, a Ray task, a batch worker) is the same
    definition: it gets the original's actors, and retires none of them. Its code travels by
    value, and the copy's strings are not the objects the original shares (found by a copy
    that got new actors and retired the original's)."""
    suffix = "!"

    def reply(request: rg.ModelRequest, punctuation: str = ".") -> rg.ModelResponse:
        return text(SETTINGS["greeting"] + suffix + punctuation)

    @rg.tool(remote=False)
    def count(items: list[str], start: int = 0) -> int:
        """Count items."""
        return start + len(items)

    helper = rg.Agent("copied-helper", "help", tools=[count], model=FunctionModel(reply))
    agent = rg.Agent(
        "copied",
        "v1",
        tools=[count, helper.as_tool("helper", "helps")],
        handoffs=[helper],
        model=FunctionModel(reply),
    )
    _, _, fp, defs = snapshots.snapshot(agent)
    copy = cloudpickle.loads(cloudpickle.dumps(agent))
    _, _, copy_fp, copy_defs = snapshots.snapshot(copy)
    assert (copy_fp, copy_defs) == (fp, defs)
    helper.instructions = "help more"  # (and a change is still a change)
    assert snapshots.snapshot(agent)[2] != fp


def test_a_graph_that_cannot_be_pickled_is_a_user_error() -> None:
    lock = threading.Lock()
    agent = rg.Agent("locked", model=FunctionModel(lambda r: text(str(lock.locked()))))
    with pytest.raises(rg.UserError, match="agent graph of 'locked' cannot be pickled"):
        snapshots.snapshot(agent)


def test_agents_defined_the_same_way_have_the_same_definitions_whatever_the_start() -> None:
    """A chat loop that starts each turn on the last agent of the one before: the graph of
    a handoff cycle is one graph from either end, and an agent outside the cycle keeps its
    definition in any graph that holds it."""
    faq = rg.Agent("def_faq", "answer", model=FunctionModel(answer))
    seats = rg.Agent("def_seats", "book", tools=[shout], model=FunctionModel(answer))
    triage = rg.Agent("def_triage", "route", handoffs=[faq, seats], model=FunctionModel(answer))
    faq.handoffs = [triage]
    _, _, from_triage, defs = snapshots.snapshot(triage)
    _, _, from_faq, again = snapshots.snapshot(faq)
    _, _, alone, seats_only = snapshots.snapshot(seats)
    assert from_faq == from_triage and again == defs
    assert alone != from_triage and seats_only == {"def_seats": defs["def_seats"]}
    seats.instructions = "book a seat"  # a new definition of seats, and of whoever reaches it
    _, _, changed, after = snapshots.snapshot(triage)
    assert changed != from_triage
    assert after["def_seats"] != defs["def_seats"]
    assert after["def_triage"] != defs["def_triage"] and after["def_faq"] != defs["def_faq"]
    lone = rg.Agent("def_lone", "x", model=FunctionModel(answer))
    before = snapshots.snapshot(lone)[3]
    lone.instructions = "y"
    assert snapshots.snapshot(lone)[3] != before


def test_a_shared_tool_and_an_agent_tool_are_part_of_the_definitions_that_hold_them() -> None:
    helper = rg.Agent("def_helper", "help", model=FunctionModel(answer))
    left = rg.Agent("def_left", "l", tools=[shout, helper.as_tool()], model=FunctionModel(answer))
    right = rg.Agent("def_right", "r", tools=[shout], model=FunctionModel(answer))
    left.handoffs = [right]
    before = snapshots.snapshot(left)[3]
    helper.instructions = "help more"  # reached through the agent tool only
    after = snapshots.snapshot(left)[3]
    assert after["def_left"] != before["def_left"] and after["def_right"] == before["def_right"]
    shout.description = "Shout a word loudly."  # a tool both agents hold
    try:
        again = snapshots.snapshot(left)[3]
    finally:
        shout.description = "Shout a word."
    assert again["def_left"] != after["def_left"] and again["def_right"] != after["def_right"]
    assert again["def_helper"] == after["def_helper"]
