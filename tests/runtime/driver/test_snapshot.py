"""Graph snapshots: the cached snapshot of an unchanged graph, and every change seen."""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ray import cloudpickle

import raygents as rg
from raygents.agents.agent import agent_graph
from raygents.runtime.driver import snapshot as snapshots
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
    blob = cloudpickle.dumps(agent_graph(agent))
    return blob, hashlib.sha256(blob).hexdigest()[:16]


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
    graph, blob, fp = snapshots.snapshot(agent)
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


def test_a_graph_that_cannot_be_pickled_is_a_user_error() -> None:
    lock = threading.Lock()
    agent = rg.Agent("locked", model=FunctionModel(lambda r: text(str(lock.locked()))))
    with pytest.raises(rg.UserError, match="agent graph of 'locked' cannot be pickled"):
        snapshots.snapshot(agent)
