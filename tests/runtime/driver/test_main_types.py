"""Types of a script's ``__main__`` survive the graph snapshot: in the process that loads it
(an agent actor) they work as output types and tool argument types."""

from __future__ import annotations

import enum
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from pydantic import BaseModel
from ray import cloudpickle

from raygents.agents.tools import FunctionTool, ToolResult
from raygents.core.schema import schema_errors, type_schema

SCRIPT = textwrap.dedent(
    """
    import dataclasses, enum, sys
    from pydantic import BaseModel
    from typing_extensions import TypedDict
    import raygents as rg
    from raygents.runtime.driver.snapshot import snapshot

    @dataclasses.dataclass
    class Verdict:
        score: int
        feedback: str = "none"
        tags: list[str] = dataclasses.field(default_factory=list)

    class Point(TypedDict):
        x: int
        y: int

    class Colour(enum.Enum):
        RED = "red"
        BLUE = "blue"

    class Person(BaseModel):
        name: str
        colour: Colour = Colour.RED

    @rg.tool
    def judge(verdict: Verdict, point: Point, colour: Colour, person: Person) -> str:
        \"\"\"Judge.\"\"\"
        return "ok"

    agents = [
        rg.Agent(f"typed_{t.__name__}", output_type=t, model="m", tools=[judge])
        for t in (Verdict, Point, Colour, Person)
    ]
    with open(sys.argv[1], "wb") as out:
        for agent in agents:
            blob = snapshot(agent)[1]
            out.write(len(blob).to_bytes(8, "big") + blob)
    """
)

VALUES = {
    "Verdict": {"score": 3, "feedback": None, "tags": None},
    "Point": {"x": 1, "y": 2},
    "Colour": {"value": "blue"},
    "Person": {"name": "Ada", "colour": None},
}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The snapshots a script made of agents using its own types, loaded here."""
    where = tmp_path_factory.mktemp("main_types")
    script, out = where / "driver.py", where / "graphs.bin"
    script.write_text(SCRIPT)
    subprocess.run([sys.executable, str(script), str(out)], check=True, timeout=60, cwd=where)
    data, found = out.read_bytes(), []
    while data:
        size = int.from_bytes(data[:8], "big")
        found.append(cloudpickle.loads(data[8 : 8 + size]))
        data = data[8 + size :]
    return found


def test_main_types_are_output_types_after_the_snapshot(graphs: list[dict[str, Any]]) -> None:
    for graph in graphs:
        (agent,) = graph.values()
        kind = agent.output_type
        assert kind.__module__ == "__main__"
        value = VALUES[kind.__name__]
        assert schema_errors(type_schema(kind), value) == [], kind


def test_main_types_are_tool_argument_types_after_the_snapshot(
    graphs: list[dict[str, Any]],
) -> None:
    (agent,) = graphs[0].values()
    (judge,) = agent.tools
    assert isinstance(judge, FunctionTool)
    arguments = (
        '{"verdict": {"score": 3, "feedback": null, "tags": null}, "point": {"x": 1, "y": 2}, '
        '"colour": "blue", "person": {"name": "Ada", "colour": null}}'
    )
    kwargs = judge.parse_arguments(arguments)
    assert not isinstance(kwargs, ToolResult), kwargs
    verdict = kwargs["verdict"]
    assert (verdict.score, verdict.feedback, verdict.tags) == (3, "none", [])
    assert type(verdict)(1).tags == []  # the class's own __init__ keeps its factory
    assert kwargs["point"] == {"x": 1, "y": 2}
    assert kwargs["colour"].value == "blue"
    assert isinstance(kwargs["person"], BaseModel)
    assert kwargs["person"].colour.value == "red"
    assert schema_errors(judge.parameters, json.loads(arguments)) == []


class Size(enum.Enum):
    S = "s"
    L = "l"


def test_an_optional_enum_parameter_accepts_null_for_its_default() -> None:
    def pick(size: Size = Size.S) -> str:
        """Pick."""
        return size.value

    t = FunctionTool(pick)
    assert schema_errors(t.parameters, {"size": None}) == []
    assert schema_errors(t.parameters, {"size": "m"}) != []
    assert t.parse_arguments('{"size": null}') == {"size": Size.S}
