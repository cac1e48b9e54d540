"""The public API in ``raygents/__init__.py``: every name resolves, and importing costs only
what is used (a Ray worker that runs tool tasks loads none of the driver's runtime)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import raygents


def test_every_public_name_resolves_to_its_module() -> None:
    from raygents import errors

    assert sorted(raygents.__all__) == sorted([*raygents._HOME, *errors.__all__])
    for name in raygents.__all__:
        value = getattr(raygents, name)
        module = importlib.import_module(raygents._HOME.get(name, "raygents.errors"))
        assert value is getattr(module, name)
    assert set(raygents.__all__) <= set(dir(raygents))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        raygents.no_such_thing  # noqa: B018
    with pytest.raises(ImportError):
        exec("from raygents import no_such_thing", {})


def test_submodules_are_attributes_too() -> None:
    """As when the package imported everything at once: ``raygents.testing.text(...)``."""
    loaded = _modules_after(
        "import raygents\nassert raygents.testing.text('x').message.content == 'x'\n"
        "assert raygents.runtime.worker"
    )
    assert "raygents.testing" in loaded


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return set(out.split())


def test_import_raygents_loads_only_its_errors() -> None:
    loaded = _modules_after("import raygents")
    assert {m for m in loaded if m.startswith("raygents")} == {"raygents", "raygents.errors"}
    assert "ray" not in loaded and "openai" not in loaded


def test_a_tool_worker_loads_only_what_tool_tasks_need() -> None:
    """What a Ray worker imports to run a tool task: the remote function's module and the
    tool's class, not the agent loop, the driver's runtime or the OpenAI client."""
    loaded = _modules_after("import raygents.runtime.worker.tasks, raygents.agents.tools")
    for heavy in (
        "raygents.agents.agent",
        "raygents.runtime.actor.actor",
        "raygents.runtime.driver.client",
        "raygents.runtime.coordinator.coordinator",
        "raygents.agents.guardrails",
        "raygents.sessions",
        "raygents.integrations.mcp",
        "openai",
    ):
        assert heavy not in loaded, heavy


def test_a_function_tool_task_loads_none_of_raygents_models() -> None:
    """A fresh worker loads a function tool's task and its call, and runs it: the task's
    module, the context and the tool's own module; neither raygents' model classes nor
    pydantic (which Ray's own serialisation may load in its workers, but raygents does not)."""
    from ray import cloudpickle

    from raygents.agents.tools import ToolContext
    from raygents.runtime.link import wire
    from raygents.runtime.worker.tasks import task_body

    def _answer(i: int) -> str:  # nested: pickled by value, as a script's tool would be
        return f"answer {i}"

    noop = raygents.tool(num_cpus=0)(_answer)
    task = cloudpickle.dumps(task_body(noop)).hex()
    call = wire.dumps((ToolContext("r", "c", "_answer", "a"), noop.parse_arguments('{"i": 2}')))
    loaded = _modules_after(
        "from ray import cloudpickle\nfrom raygents.runtime.link import wire\n"
        f"run = cloudpickle.loads(bytes.fromhex({task!r}))\n"
        f"report = wire.loads(run(bytes.fromhex({call.hex()!r})))\n"
        "assert (report.content, report.is_error) == ('answer 2', False), report"
    )
    assert "raygents.runtime.worker.worker" in loaded
    for heavy in (
        "pydantic",
        "raygents.core.messages",
        "raygents.agents.tools",
        "raygents.core.schema",
    ):
        assert heavy not in loaded, heavy
