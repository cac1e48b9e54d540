"""Types of a script written under ``from __future__ import annotations`` (string annotations,
``Literal`` fields, one dataclass naming another) survive the graph snapshot: in the process
that loads it (an agent actor, whose ``__main__`` is another module) they are fully defined,
as output types and as tool argument types."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from ray import cloudpickle

from raygents.agents.tools import FunctionTool, ToolResult
from raygents.core.schema import parse_output, schema_errors, type_schema

SCRIPT = textwrap.dedent(
    """
    from __future__ import annotations

    import sys
    from dataclasses import dataclass
    from typing import Literal, Optional

    from pydantic import BaseModel
    from typing_extensions import TypedDict

    import raygents as rg
    from raygents.runtime.driver.snapshot import snapshot

    @dataclass
    class Note:
        text: str
        kind: Literal["hint", "fix"] = "hint"

    @dataclass
    class EvaluationFeedback:
        feedback: str
        score: Literal["pass", "needs_improvement", "fail"]
        note: Optional[Note] = None

    class Span(TypedDict):
        start: int
        unit: Literal["s", "ms"]

    class Review(BaseModel):
        verdict: Literal["ok", "bad"]
        spans: list[Span] = []

    @rg.tool
    def record(feedback: EvaluationFeedback, span: Span, review: Review) -> str:
        \"\"\"Record an evaluation.\"\"\"
        return feedback.score

    agents = [
        rg.Agent(f"future_{t.__name__}", output_type=t, model="m", tools=[record])
        for t in (EvaluationFeedback, Span, Review)
    ]
    with open(sys.argv[1], "wb") as out:
        for agent in agents:
            blob = snapshot(agent)[1]
            out.write(len(blob).to_bytes(8, "big") + blob)
    """
)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    where = tmp_path_factory.mktemp("future_types")
    script, out = where / "driver.py", where / "graphs.bin"
    script.write_text(SCRIPT)
    subprocess.run([sys.executable, str(script), str(out)], check=True, timeout=60, cwd=where)
    data, found = out.read_bytes(), []
    while data:
        size = int.from_bytes(data[:8], "big")
        found.append(cloudpickle.loads(data[8 : 8 + size]))
        data = data[8 + size :]
    return found


def test_literal_fields_of_a_future_annotations_script_are_output_types(
    graphs: list[dict[str, Any]],
) -> None:
    values = {
        "EvaluationFeedback": {
            "feedback": "f",
            "score": "pass",
            "note": {"text": "t", "kind": "hint"},
        },
        "Span": {"start": 1, "unit": "ms"},
        "Review": {"verdict": "ok", "spans": [{"start": 2, "unit": "s"}]},
    }
    for graph in graphs:
        (agent,) = graph.values()
        kind = agent.output_type
        assert kind.__module__ == "__main__"
        value = values[kind.__name__]
        assert schema_errors(type_schema(kind), value) == [], kind
        parse_output(json.dumps(value), kind)
    (judge,) = graphs[0].values()
    feedback = parse_output(json.dumps(values["EvaluationFeedback"]), judge.output_type)
    assert feedback.score == "pass" and feedback.note.kind == "hint"


def test_literal_fields_of_a_future_annotations_script_are_tool_argument_types(
    graphs: list[dict[str, Any]],
) -> None:
    (agent,) = graphs[1].values()
    (record,) = agent.tools
    assert isinstance(record, FunctionTool)
    arguments = {
        "feedback": {"feedback": "f", "score": "fail", "note": None},
        "span": {"start": 1, "unit": "s"},
        "review": {"verdict": "bad", "spans": []},
    }
    kwargs = record.parse_arguments(json.dumps(arguments))
    assert not isinstance(kwargs, ToolResult), kwargs
    assert kwargs["feedback"].score == "fail" and kwargs["review"].verdict == "bad"
    wrong = record.parse_arguments(json.dumps({**arguments, "span": {"start": 1, "unit": "h"}}))
    assert isinstance(wrong, ToolResult) and wrong.is_error


def test_annotations_that_do_not_resolve_are_left_for_the_schema_to_report() -> None:
    from raygents.core.annotations import resolve_annotations

    namespace: dict[str, Any] = {}
    exec(
        textwrap.dedent(
            """
            from __future__ import annotations
            from dataclasses import dataclass

            @dataclass
            class Broken:
                value: Missing
            """
        ),
        namespace,
    )
    broken = namespace["Broken"]
    resolve_annotations(broken)
    assert broken.__annotations__ == {"value": "Missing"}
    resolve_annotations(list[int])  # (a generic of builtins: nothing to do)
