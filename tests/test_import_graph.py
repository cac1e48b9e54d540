"""The package's import graph (``tools/importgraph.py``): no circles, every arrow allowed by the
rule of the package it leaves; and the checker itself catches what it must."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import importgraph  # (the repository root is on the test path)


def test_the_package_has_no_circle_and_no_forbidden_arrow() -> None:
    assert importgraph.problems() == []


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "raygents"
    for name, text in {"__init__.py": "", "errors.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_circle_through_a_function_local_import_is_found(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "agents/__init__.py": "",
            "agents/a.py": "from raygents.agents import b\n",
            "agents/b.py": "def f():\n    from raygents.agents.a import x\n",
        },
    )
    assert importgraph.problems(root) == [
        "circle: raygents.agents.a -> raygents.agents.b -> raygents.agents.a"
    ]


@pytest.mark.parametrize(
    ("source", "text", "why"),
    [
        ("core/loop.py", "from raygents.agents.tools import Tool\n", "core may import only"),
        (
            "core/loop.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from raygents.agents.tools import Tool\n",
            "(type-only): core may import only",
        ),
        ("records/runinfo.py", "import raygents.runtime.driver.handle\n", "not below it"),
        ("runtime/link/drive.py", "import raygents\n", "may not import face"),
        ("stores/base.py", "import boto3\n", "only stores.s3 may import boto3"),
        ("core/schema.py", "def f():\n    import ray\n", "(in a function): only"),
    ],
)
def test_an_arrow_against_a_rule_is_refused(
    tmp_path: Path, source: str, text: str, why: str
) -> None:
    root = _package(
        tmp_path,
        {
            "agents/__init__.py": "",
            "agents/tools.py": "",
            "runtime/__init__.py": "",
            "runtime/driver/__init__.py": "",
            "runtime/driver/handle.py": "",
            source: text,
        },
    )
    (problem,) = importgraph.problems(root)
    assert problem.startswith(f"raygents/{source}:") and why in problem, problem
