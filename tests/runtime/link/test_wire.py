"""What raygents pickles itself for Ray calls (tool calls, starts, take replies)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from ray import cloudpickle

from raygents.agents.tools import ToolContext, ToolResult
from raygents.runtime.link import wire


def test_raygents_types_go_through_the_standard_pickler() -> None:
    value = (ToolContext("r", "c", "t", "a", 1, {"k": [1, 2]}), ToolResult("ok"))
    blob = wire.dumps(value)
    assert b"cloudpickle" not in blob
    assert wire.loads(blob) == value


def test_a_class_made_at_run_time_goes_through_cloudpickle() -> None:
    class Local:
        def __init__(self, x: int) -> None:
            self.x = x

    blob = wire.dumps(ToolContext("r", "c", "t", "a", context=Local(3)))
    assert b"cloudpickle" in blob
    assert wire.loads(blob).context.x == 3


@pytest.fixture
def probe_module() -> Iterator[types.ModuleType]:
    module = types.ModuleType("rg_wire_probe")
    exec("class Probe:\n    def __init__(self, x):\n        self.x = x\n", module.__dict__)
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_modules_registered_by_value_travel_by_value(probe_module: types.ModuleType) -> None:
    value = probe_module.Probe(5)
    assert b"cloudpickle" not in wire.dumps(value)  # importable here: named
    cloudpickle.register_pickle_by_value(probe_module)
    try:
        blob = wire.dumps({"context": value})
    finally:
        cloudpickle.unregister_pickle_by_value(probe_module)
    assert b"cloudpickle" in blob  # copied, as Ray would: the other process need not have it
    del sys.modules[probe_module.__name__]  # (loading must not need the module)
    try:
        assert wire.loads(blob)["context"].x == 5
    finally:
        sys.modules[probe_module.__name__] = probe_module


def test_objects_of_main_travel_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    def greet() -> str:
        return "hi"

    greet.__module__, greet.__qualname__ = "__main__", "rg_wire_greet"
    monkeypatch.setattr(sys.modules["__main__"], "rg_wire_greet", greet, raising=False)
    blob = wire.dumps([greet])
    assert b"cloudpickle" in blob
    monkeypatch.delattr(sys.modules["__main__"], "rg_wire_greet")
    loaded: Any = wire.loads(blob)
    assert loaded[0]() == "hi"
