"""Kept results: a completed run's marker (``runs/<id>/done.<epoch>``), written with its
result fitted into one checkpoint frame, and read back.

The marker holds the run's entry (agent, turns, seq, end time; when it started and its
agent-as-tool parent, where known: markers written before they were kept lack them) and its
result: the whole output, the usage, the input count, the final history, the agent the run
started on and whether a handoff's input filter rewrote its history (``start_agent`` and
``rewritten``: older markers lack them, and read as naming no start agent and no rewrite).
A result whose frame would pass the codec's cap keeps the newest messages that fit
(``messages_dropped`` counts the oldest left out); an output that does not fit alone keeps
its first part (``output_chars`` is its whole length), and no history.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from raygents.core.messages import Message, Usage
from raygents.ids import is_id
from raygents.records import codec
from raygents.records.runinfo import RunInfo, RunSummary

__all__ = [
    "FORMAT",
    "done_marker",
    "dump_messages",
    "ended_at",
    "fitted",
    "parent",
    "read_marker",
    "started_at",
    "summary",
    "usage_of",
]

FORMAT = 2
"""The marker format this code writes (1: entry and a small output only); it reads both."""
_BUDGET = codec.DEFAULT_MAX_BYTES - codec.OVERHEAD - 4096  # payload bytes, with room to spare
_CONTEXT_KEPT = 64 * 1024
"""The largest final run context (packed bytes) a marker keeps; a larger one is left out."""
_MESSAGE_BOUND = 256  # msgpack bytes of a message besides its texts, at most (an estimate)


def dump_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as plain data, as checkpoint records write them."""
    return [m.model_dump(mode="json", exclude_defaults=True) for m in messages]


def fitted(done: dict[str, Any]) -> dict[str, Any]:
    """``done`` (a marker with ``output`` and ``messages``), fitted into one frame.

    The check is cheap for the usual result: an upper bound of its bytes from the lengths
    of its texts; only a result near the cap is packed to be measured.
    """
    messages: list[dict[str, Any]] = done.get("messages") or []
    if _upper_bound(done, messages) <= _BUDGET:
        return done
    sizes = [codec.packed_size(m) for m in messages]
    rest = {k: v for k, v in done.items() if k != "messages"}
    room = _BUDGET - codec.packed_size({**rest, "messages": []})
    if room >= 0:
        kept = 0
        while kept < len(sizes) and sizes[-1 - kept] <= room:
            room -= sizes[-1 - kept]
            kept += 1
        dropped = len(messages) - kept
        fit = {**rest, "messages": messages[dropped:]}
        if dropped:
            fit["messages_dropped"] = dropped
        return fit
    output = str(done.get("output") or "")
    over = -room
    cut = max(0, len(output) - over)  # (a character is one byte or more: this fits)
    return {
        **rest,
        "output": output[:cut],
        "output_chars": len(output),
        "messages": [],
        "messages_dropped": len(messages),
    }


def _upper_bound(done: Mapping[str, Any], messages: list[dict[str, Any]]) -> int:
    """More bytes than ``done`` packs into: four per character of its texts, plus a bound
    for each message's other fields."""
    size = 4096 + 4 * len(str(done.get("output") or "")) + _CONTEXT_KEPT * ("context" in done)
    for m in messages:
        size += _MESSAGE_BOUND + 4 * len(m.get("content") or "")
        for call in m.get("tool_calls") or ():
            size += _MESSAGE_BOUND + 4 * (len(call.get("arguments") or "") + len(call["name"]))
    return size


def done_marker(info: RunInfo, epoch: int, result: RunSummary | None = None) -> dict[str, Any]:
    """What a completed run's marker holds: its entry, and its result fitted into one
    checkpoint frame."""
    done: dict[str, Any] = {
        "format": FORMAT,
        "kind": "done",
        "run_id": info.run_id,
        "epoch": epoch,
        "seq": info.seq,
        "agent_name": info.agent_name,
        "turns": info.turns,
        "at": time.time(),
    }
    if info.started_at is not None:
        done["started_at"] = info.started_at
    if info.parent is not None:
        done["parent"] = info.parent
    if not isinstance(result, dict) or not isinstance(result.get("final_output"), str):
        return done
    done["output"] = result["final_output"]
    usage = result.get("usage")
    if isinstance(usage, Usage):
        done["usage"] = usage.model_dump(mode="json")
    done["input_count"] = result.get("input_count", 0)
    start_agent = result.get("start_agent")
    if isinstance(start_agent, str) and start_agent:
        done["start_agent"] = start_agent
    if result.get("rewritten") is True:
        done["rewritten"] = True
    context = result.get("context")
    if context is not None and codec.packed_size(context) <= _CONTEXT_KEPT:
        done["context"] = context
    done["messages"] = dump_messages(result.get("messages") or ())
    return fitted(done)


def read_marker(data: bytes, *, key: bytes | None, run_id: str, source: str) -> dict[str, Any]:
    """A marker's fields, decoded and checked to be ``run_id``'s.

    Raises:
        CheckpointCorrupt: the bytes are damaged, unsigned or signed with another key.
        ValueError: it is not this run's marker.
    """
    marker = codec.decode(data, key=key, source=source)
    if not isinstance(marker, dict) or marker.get("run_id") != run_id:
        raise ValueError("it is not this run's marker")
    return marker


def usage_of(marker: Mapping[str, Any]) -> dict[str, Any] | None:
    """The marker's usage, if it is counts (and a cost in dollars, a finite number >= 0,
    or None)."""
    usage = marker.get("usage")
    if not isinstance(usage, dict) or not all(
        isinstance(k, str) and _usage_value(k, v) for k, v in usage.items()
    ):
        return None
    return usage


def _usage_value(name: str, value: Any) -> bool:
    if name == "cost_usd":
        return value is None or (
            type(value) in (int, float) and math.isfinite(value) and value >= 0
        )
    return type(value) is int and value >= 0


def ended_at(marker: Mapping[str, Any]) -> float | None:
    """When the marker says the run ended, if it says."""
    return _time(marker.get("at"))


def started_at(marker: Mapping[str, Any]) -> float | None:
    """When the marker says the run was first dispatched, if it says."""
    return _time(marker.get("started_at"))


def parent(marker: Mapping[str, Any]) -> str | None:
    """The run id of the run's agent-as-tool parent, if the marker names a valid one."""
    value = marker.get("parent")
    return value if isinstance(value, str) and is_id(value) else None


def _time(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def summary(marker: Mapping[str, Any]) -> RunSummary | None:
    """A run's result from its marker; None for a marker that kept no output (one written
    without its result). A history that does not parse is left out."""
    output = marker.get("output")
    if not isinstance(output, str):
        return None
    raw = marker.get("messages")
    try:
        messages = tuple(Message.model_validate(m) for m in raw) if isinstance(raw, list) else ()
    except ValueError:
        messages = ()
    try:
        usage = Usage.model_validate(usage_of(marker) or {})
    except ValueError:  # (counts of a newer raygents)
        usage = Usage()
    turns = marker.get("turns")
    agent_name = marker.get("agent_name")
    count = marker.get("input_count")
    found: RunSummary = {
        "final_output": output,
        "messages": messages,
        "usage": usage,
        "turns": turns if type(turns) is int and turns >= 0 else 0,
        "agent_name": agent_name if isinstance(agent_name, str) and agent_name else "?",
        "input_count": count if type(count) is int and 0 <= count <= len(messages) else 0,
    }
    context = marker.get("context")
    if isinstance(context, dict):
        found["context"] = context
    start_agent = marker.get("start_agent")
    if isinstance(start_agent, str) and start_agent:
        found["start_agent"] = start_agent
    if marker.get("rewritten") is True:
        found["rewritten"] = True
    return found
