"""Fingerprints of a batch item's run input and of the agent graph it runs on: what a job's
ledger records of each completed item, so that a job run again with other inputs (or another
agent) is never answered with the old ones' outputs.

An input's fingerprint is SHA-256 of its canonical JSON (messages as they dump, dict keys
sorted); an item's context is not part of it (a context may hold clients and handles). A
graph's is SHA-256 of what defines each of its agents as data: its name, instructions (a
callable's qualified name), model (its name, or its class and ``model``), tool names, handoff
targets and output type. A change inside a function (a tool's body, a callable's text) is not
seen. Both are 16 hex digits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from array import array
from typing import Any

from pydantic import BaseModel

from raygents.agents.agent import Agent, agent_graph

__all__ = ["Fingerprints", "changed_run_id", "combined", "graph_fingerprint", "input_fingerprint"]

_DIGITS = 16
_DENSE_SLACK = 1 << 16  # indexes kept in the array past what the items held account for


def input_fingerprint(run_input: Any) -> str:
    """The fingerprint of an item's run input (a string, or messages)."""
    text = json.dumps(run_input, sort_keys=True, ensure_ascii=False, default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()[:_DIGITS]


def graph_fingerprint(agent: Agent) -> str:
    """The fingerprint of the agent graph that ``agent`` starts."""
    graph = agent_graph(agent)
    described = [_agent(graph[name]) for name in sorted(graph)]
    text = json.dumps(described, sort_keys=True, ensure_ascii=False, default=_name)
    return hashlib.sha256(text.encode()).hexdigest()[:_DIGITS]


def combined(input_fp: str, graph_fp: str) -> int:
    """One 64-bit number for an item's two fingerprints (what the job compares)."""
    digest = hashlib.sha256(f"{input_fp}:{graph_fp}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1  # (0 stands for none)


def changed_run_id(job_id: str, index: int, input_fp: str, graph_fp: str) -> str:
    """The run id of item ``index`` run again after its input or agent graph changed:
    ``<job_id>.<index>-<16 hex digits>``, the digits from both fingerprints.

    It never collides with a batch run id (``<job_id>.<index>`` of any job ends in digits
    after its last ``.``; this one holds a ``-``), so the old run, and the result its
    completion marker keeps, stay as they were; the same change gives the same id, so a
    job run again after a stop resumes the item's run."""
    return f"{job_id}.{index}-{combined(input_fp, graph_fp):016x}"


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value) if isinstance(value, tuple) else sorted(map(repr, value))
    return repr(value)


def _agent(agent: Agent) -> dict[str, Any]:
    model, instructions = agent.model, agent.instructions
    return {
        "name": agent.name,
        "instructions": instructions if isinstance(instructions, str) else _name(instructions),
        "model": model if model is None or isinstance(model, str) else _model(model),
        "tools": sorted(str(getattr(t, "name", _name(t))) for t in agent.tools),
        "handoffs": sorted(_handoff(h) for h in agent.handoffs),
        "output_type": None if agent.output_type is None else _name(agent.output_type),
    }


def _model(model: Any) -> str:
    named = getattr(model, "model", None)
    return _name(model) + (f":{named}" if isinstance(named, str) else "")


def _handoff(handoff: Any) -> str:
    target = handoff if isinstance(handoff, Agent) else getattr(handoff, "agent", None)
    return target.name if isinstance(target, Agent) else _name(handoff)


def _name(value: Any) -> str:
    kind = value if isinstance(value, type) or callable(value) else type(value)
    module = getattr(kind, "__module__", "") or ""
    return f"{module}.{getattr(kind, '__qualname__', type(kind).__name__)}"


class Fingerprints:
    """A 64-bit fingerprint per item index: 8 bytes an index in an array up to the largest
    index kept (while the indexes kept account for it: a contiguous job), a dict past that
    (a sparse or hostile ledger costs a dict entry per line, never an array to its index)."""

    def __init__(self) -> None:
        self._dense = array("Q")
        self._sparse: dict[int, int] = {}
        self._count = 0

    def set(self, index: int, value: int) -> None:
        """Keep ``value`` (non-zero) as item ``index``'s fingerprint."""
        self._count += 1
        if index >= len(self._dense) and index < 16 * self._count + _DENSE_SLACK:
            self._dense.frombytes(bytes(8 * (index + 1 - len(self._dense))))
        if index < len(self._dense):
            self._dense[index] = value
        else:
            self._sparse[index] = value

    def get(self, index: int) -> int | None:
        """Item ``index``'s fingerprint, or None."""
        found = self._dense[index] if index < len(self._dense) else self._sparse.get(index, 0)
        return found or None
