"""Write the golden checkpoint files that every later raygents must keep decoding.

Run ``python tests/golden/make_golden.py`` from the repository root. It writes, for each
value below, ``v<FORMAT_VERSION>-<name>.rgck`` (the frame) and ``.json`` (the value and key,
bytes tagged as ``{"$bytes": "<hex>"}``), and never overwrites an existing file: golden
files of older format versions stay as they are, and a new format version adds its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from raygents.records.codec import FORMAT_VERSION, encode  # noqa: E402

GOLDEN_KEY = b"raygents-golden-hmac-key-0123456"

CHECKPOINT: dict[str, Any] = {
    "kind": "checkpoint",
    "run_id": "run_01JD4Q5C7W2M3N4P5Q6R7S8T9V",
    "seq": 3,
    "agent": "triage",
    "messages": [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "Wie spät ist es in Tōkyō? ✓ 🚀"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "name": "time", "arguments": '{"tz": "Asia/Tokyo"}'}],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ],
    "journal": {"call_1": {"state": "finished", "result": "12:00", "attempt": 1}},
    "usage": {"input_tokens": 120, "output_tokens": 17},
    "limits": {"turns": 1, "max_turns": 10, "depth": 0, "max_depth": 4},
    "context": {"blob": b"\x00\x01\xfe\xff", "ratio": 0.1, "tiny": 5e-324, "huge": 1.5e308},
    "ints": [0, -1, 127, 128, -32, -33, 2**31, -(2**63), 2**64 - 1],
    "flags": [True, False, None],
    "empty": {"list": [], "map": {}, "str": "", "bytes": b""},
    "nested": [[[["deep"]]]],
}

GOLDEN: dict[str, tuple[Any, bytes | None]] = {
    "checkpoint": (CHECKPOINT, None),
    "checkpoint-hmac": (CHECKPOINT, GOLDEN_KEY),
    "scalar": ("just a string", None),
    "none": (None, None),
}


def to_json(value: Any) -> Any:
    """Tag bytes so that a value survives JSON."""
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, dict):
        return {name: to_json(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    return value


def from_json(value: Any) -> Any:
    """Undo :func:`to_json`."""
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return bytes.fromhex(value["$bytes"])
        return {name: from_json(item) for name, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def main() -> None:
    """Write the golden files that are missing."""
    for name, (value, key) in GOLDEN.items():
        frame = HERE / f"v{FORMAT_VERSION}-{name}.rgck"
        sidecar = frame.with_suffix(".json")
        if frame.exists() or sidecar.exists():
            print(f"kept    {frame.name}")
            continue
        record = {
            "format_version": FORMAT_VERSION,
            "key_hex": key.hex() if key else None,
            "value": to_json(value),
        }
        frame.write_bytes(encode(value, key=key))
        sidecar.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"written {frame.name}")


if __name__ == "__main__":
    main()
