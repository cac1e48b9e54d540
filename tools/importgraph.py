"""The package's import graph, checked: no circles (function-local imports counted) and every
arrow allowed by the rule of the package it leaves (each package's README states its rule).

Run ``python tools/importgraph.py`` (exit status 1 on a problem, each problem on its own line);
``tests/test_import_graph.py`` runs it in the test suite. It reads the code with :mod:`ast`, so
it sees every ``import`` statement, at module level, in a function or under
``if TYPE_CHECKING:``; it does not follow ``importlib.import_module`` (the public face's lazy
table, :data:`raygents._HOMES`, is the one place that uses it for raygents' own modules).
"""

from __future__ import annotations

import ast
import graphlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "raygents"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("ids",),
    ("core",),
    ("stores",),
    ("records",),
    ("telemetry",),
    ("models",),
    ("sessions",),
    ("agents",),
    ("runtime.link",),
    ("runtime.worker",),
    ("runtime.actor",),
    ("runtime.coordinator",),
    ("runtime.driver",),
    ("batch", "integrations"),
    ("face",),
    ("serve",),
    ("cli", "testing"),
)
"""Packages from the bottom up: a package imports only its own modules and those of the
packages below it (the rows before its own). Packages of one row do not import each other."""

RULES: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "core": frozenset({"errors"}),
}
"""Packages with a narrower rule than their layer: all they may import besides themselves."""

TYPE_ONLY_UP: dict[tuple[str, str], str] = {
    ("raygents.agents.hooks", "raygents.agents.agent"): "hooks are given the agent they run for",
    ("raygents.agents.handoffs", "raygents.agents.agent"): "a handoff holds the agent it goes to",
    ("raygents.agents.agent_tool", "raygents.agents.agent"): "an agent tool holds the agent",
}
"""Type-only imports (under ``if TYPE_CHECKING:``) allowed to point up, each with the reason:
only where the data is recursive. ``(importer, imported)`` module names."""

THIRD_PARTY: dict[str, frozenset[str]] = {
    # The Ray shell; besides it, the session shared by a cluster's processes (an actor) and
    # the metrics Ray exports.
    "ray": frozenset(
        {
            "runtime",
            "batch",
            "integrations",
            "cli",
            "testing",
            "serve",
            "sessions.memory",
            "telemetry.metrics",
            "models.affinity",  # a Serve request router (Serve's extension point)
            "models.served",  # a model served on the cluster, called through its handle
        }
    ),
    "openai": frozenset({"models"}),
    "tiktoken": frozenset({"models.tokens"}),
    "msgpack": frozenset({"records.codec"}),
    "boto3": frozenset({"stores.s3"}),
    "botocore": frozenset({"stores.s3"}),
    "mcp": frozenset({"integrations"}),
    "opentelemetry": frozenset({"telemetry"}),
    "tqdm": frozenset({"batch"}),
    "fastapi": frozenset({"serve"}),
    "starlette": frozenset({"serve"}),
}
"""Third-party packages and where they may be imported (a package, or one module of it)."""


@dataclass(frozen=True)
class Arrow:
    """One import of a raygents module (or a third-party package) by a raygents module."""

    source: str
    target: str
    line: int
    type_only: bool
    local: bool


def modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` (a folder named ``raygents``) by its dotted name."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def package_of(module: str) -> str:
    """The package a module belongs to: ``core``, ``runtime.actor``, ``face`` (the public
    face and its re-export modules), ``errors``..."""
    parts = module.split(".")[1:]
    if not parts or parts[0] in ("data", "guardrails", "templates"):
        return "face"
    if parts[0] == "__main__":
        return "cli"
    if parts[0] == "runtime" and len(parts) > 1:
        return f"runtime.{parts[1]}"
    return parts[0]


def _resolve(known: dict[str, Path], module: str, name: str | None) -> str | None:
    """The raygents module an import names: ``from m import name`` where ``m.name`` is a
    module is an import of that module."""
    if name is not None and f"{module}.{name}" in known:
        return f"{module}.{name}"
    return module if module in known else None


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def arrows(known: dict[str, Path], module: str) -> Iterator[Arrow]:
    """Every import in ``module``, raygents' own resolved to modules, others by top name."""
    tree = ast.parse(known[module].read_text(), str(known[module]))

    def walk(node: ast.AST, type_only: bool, local: bool) -> Iterator[Arrow]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield from one(alias.name, None, child.lineno, type_only, local)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                for alias in child.names:
                    yield from one(child.module, alias.name, child.lineno, type_only, local)
            else:
                yield from walk(
                    child,
                    type_only or (isinstance(child, ast.If) and _type_checking(child)),
                    local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)),
                )

    def one(
        target: str, name: str | None, line: int, type_only: bool, local: bool
    ) -> Iterator[Arrow]:
        if target == "raygents" or target.startswith("raygents."):
            resolved = _resolve(known, target, name)
            if resolved is not None and resolved != module:
                yield Arrow(module, resolved, line, type_only, local)
        else:
            yield Arrow(module, target.split(".")[0], line, type_only, local)

    yield from walk(tree, False, False)


def _rank(package: str) -> int:
    return next(i for i, row in enumerate(LAYERS) if package in row)


def forbidden(arrow: Arrow) -> str | None:
    """Why ``arrow`` breaks a rule, or None."""
    source = package_of(arrow.source)
    if not arrow.target.startswith("raygents"):
        places = THIRD_PARTY.get(arrow.target)
        if places is None:
            return None
        short = arrow.source.removeprefix("raygents.")
        if source in places or any(short == p or short.startswith(p + ".") for p in places):
            return None
        return f"only {', '.join(sorted(places))} may import {arrow.target}"
    target = package_of(arrow.target)
    if source == target:
        return None
    if arrow.type_only and (arrow.source, arrow.target) in TYPE_ONLY_UP:
        return None
    if source in RULES:
        return (
            None if target in RULES[source] else f"{source} may import only {sorted(RULES[source])}"
        )
    if _rank(target) >= _rank(source):
        return f"{source} may not import {target} (not below it)"
    return None


def circles(known: dict[str, Path], edges: list[Arrow]) -> list[list[str]]:
    """The import circles among raygents' modules, each as the modules around it, each one
    importing the next (after one is found, one of its arrows is set aside to find the next)."""
    graph: dict[str, set[str]] = {m: set() for m in known}
    for arrow in edges:
        if arrow.target in graph and (arrow.source, arrow.target) not in TYPE_ONLY_UP:
            graph[arrow.source].add(arrow.target)
    found: list[list[str]] = []
    while True:
        try:
            tuple(graphlib.TopologicalSorter(graph).static_order())
        except graphlib.CycleError as error:
            cycle: list[str] = error.args[1]
            found.append(cycle[::-1])
            graph[cycle[-1]].discard(cycle[-2])  # (cycle[i] is imported by cycle[i + 1])
        else:
            return found


def problems(package: Path = PACKAGE) -> list[str]:
    """Every circle and every forbidden arrow in ``package``, one line each."""
    known = modules(package)
    edges = [arrow for module in known for arrow in arrows(known, module)]
    lines = [f"circle: {' -> '.join(c)}" for c in circles(known, edges)]
    for arrow in edges:
        why = forbidden(arrow)
        if why is not None:
            where = known[arrow.source].relative_to(package.parent)
            kind = " (type-only)" if arrow.type_only else " (in a function)" if arrow.local else ""
            lines.append(f"{where}:{arrow.line}: imports {arrow.target}{kind}: {why}")
    return lines


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
