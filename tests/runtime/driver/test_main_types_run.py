"""Types defined in a driver script's ``__main__`` (classes Ray copies by value) work in agent
actors as output types and as tool argument types."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DRIVER = textwrap.dedent(
    """
    import dataclasses, enum, json, sys
    from pydantic import BaseModel, TypeAdapter
    from typing_extensions import TypedDict
    import raygents as rg
    from raygents.testing import FunctionModel, call, calls, text

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

    VALUES = {
        "Verdict": {"score": 3, "feedback": "ok", "tags": ["a"]},
        "Point": {"x": 1, "y": 2},
        "Colour": {"value": "blue"},
        "Person": {"name": "Ada", "colour": "blue"},
    }

    @rg.tool(remote=False)
    def local(verdict: Verdict, point: Point, colour: Colour, person: Person) -> str:
        \"\"\"Describe the arguments.\"\"\"
        return describe(verdict, point, colour, person)

    @rg.tool
    def remote(verdict: Verdict, point: Point, colour: Colour, person: Person) -> str:
        \"\"\"Describe the arguments.\"\"\"
        return describe(verdict, point, colour, person)

    def describe(verdict, point, colour, person):
        assert type(verdict).__name__ == "Verdict" and dataclasses.is_dataclass(verdict)
        assert isinstance(point, dict) and isinstance(colour, enum.Enum)
        assert isinstance(person, BaseModel)
        return f"{verdict.score}/{verdict.tags}/{point['y']}/{colour.value}/{person.colour.value}"

    def typed_reply(name):
        return FunctionModel(lambda request: text(json.dumps(VALUES[name])))

    def tool_reply(request):
        results = [m.text for m in request.messages if m.role == "tool"]
        if results:
            return text(" ".join(results))
        args = {
            "verdict": {"score": 7, "feedback": None, "tags": None},
            "point": {"x": 1, "y": 2},
            "colour": "blue",
            "person": {"name": "Ada", "colour": None},
        }
        return calls(call("local", args, id="c1"), call("remote", args, id="c2"))

    rg.init(num_cpus=2, include_dashboard=False, store=sys.argv[1], handle_sigterm=False)
    report = {}
    for kind in (Verdict, Point, Colour, Person):
        agent = rg.Agent(
            f"typed_{kind.__name__}", output_type=kind, model=typed_reply(kind.__name__)
        )
        try:
            result = rg.run(agent, "go")
            report[kind.__name__] = json.loads(result.output_text)
            report[kind.__name__ + " parsed"] = type(result.final_output).__name__
        except Exception as exc:
            report[kind.__name__] = f"{type(exc).__name__}: {str(exc)[:300]}"
    agent = rg.Agent("tools_agent", tools=[local, remote], model=FunctionModel(tool_reply))
    try:
        report["tools"] = rg.run(agent, "go").final_output
    except Exception as exc:
        report["tools"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    print(json.dumps(report), flush=True)
    rg.shutdown()
    """
)


@pytest.mark.timeout(240)
def test_main_types_work_in_agent_actors(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAYGENTS_STORE")}
    done = subprocess.run(
        [sys.executable, str(script), f"file://{tmp_path / 'store'}"],
        capture_output=True,
        text=True,
        timeout=230,
        env=env,
        cwd=tmp_path,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(lines[-1])
    assert report == {
        "Verdict": {"score": 3, "feedback": "ok", "tags": ["a"]},
        "Point": {"x": 1, "y": 2},
        "Colour": {"value": "blue"},
        "Person": {"name": "Ada", "colour": "blue"},
        "Verdict parsed": "Verdict",
        "Point parsed": "dict",
        "Colour parsed": "Colour",
        "Person parsed": "Person",
        "tools": "7/[]/2/blue/red 7/[]/2/blue/red",
    }
