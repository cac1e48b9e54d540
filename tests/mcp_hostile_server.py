"""A hostile MCP server over stdio for the tests: newline-delimited JSON-RPC written by hand,
so that it can send what the SDK's own server would refuse to (bad schemas, bad names,
endless cursors) and leave requests unanswered.

Usage: ``python tests/mcp_hostile_server.py MODE``, where MODE is one of:

- ``hang``: tools ``echo`` (answers with its name and arguments) and ``hang`` (never
  answers);
- ``cursors``: every ``tools/list`` page holds one tool and a new ``nextCursor``, forever;
- ``repeat``: every page holds one tool and the same ``nextCursor``;
- ``names``: tools whose names a model API refuses (see :data:`HOSTILE_NAMES`), and
  ``echo``; every tool answers like ``echo``;
- ``schemas``: tools whose input schemas are broken (see :data:`BAD_SCHEMAS`), and ``good``;
- ``mute-list``: answers the handshake, never ``tools/list``.

It writes the number of ``tools/list`` requests it answered to ``$HOSTILE_MCP_COUNT`` when set.
It imports nothing outside the standard library, so it starts fast.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

LONG_NAME = "n" * 200
HOSTILE_NAMES = ("../x", "a b", "", LONG_NAME, "fs.read", "a.b", "a_b")
"""``a.b`` and ``a_b`` test that a mapped name never takes a valid name's place."""

ECHO = {"type": "object", "properties": {"x": {"type": "string"}}}
BAD_SCHEMAS: dict[str, Any] = {
    "unknown_type": {"type": "object", "properties": {"x": {"type": "strng"}}},
    "bad_pattern": {"type": "object", "properties": {"x": {"type": "string", "pattern": "(["}}},
    "bad_pattern_key": {"type": "object", "patternProperties": {"([": {"type": "string"}}},
    "dangling_ref": {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
    "remote_ref": {
        "type": "object",
        "properties": {"x": {"$ref": "http://127.0.0.1:9/schema.json"}},
    },
    "negative_length": {"type": "object", "properties": {"x": {"minLength": -1}}},
}
"""Tool name -> an input schema that cannot be used (each with ``"type": "object"``, which the
SDK checks itself)."""

RECURSIVE = {
    "type": "object",
    "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
    "properties": {"child": {"$ref": "#/$defs/node"}},
}
"""A recursive schema, which is valid: ``good`` has it."""


def tools(mode: str, page: int) -> tuple[list[dict[str, Any]], str | None]:
    """The tools of one ``tools/list`` page, and its next cursor."""
    if mode == "hang":
        return [_tool("echo", ECHO), _tool("hang", ECHO)], None
    if mode == "cursors":
        return [_tool(f"t{page}", ECHO)], f"page-{page + 1}"
    if mode == "repeat":
        return [_tool(f"t{page}", ECHO)], "same"
    if mode == "names":
        return [_tool(name, ECHO) for name in (*HOSTILE_NAMES, "echo")], None
    if mode == "schemas":
        bad = [_tool(name, schema) for name, schema in BAD_SCHEMAS.items()]
        return [*bad, _tool("good", RECURSIVE)], None
    raise SystemExit(f"unknown mode {mode!r}")


def _tool(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "description": f"Tool {name!r}.", "inputSchema": schema}


def answer(mode: str, msg: dict[str, Any], pages: list[int]) -> dict[str, Any] | None:
    """The response to one request, or None to leave it unanswered."""
    method = msg.get("method")
    params = msg.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": f"hostile-{mode}", "version": "0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        if mode == "mute-list":
            return None
        pages[0] += 1
        count = os.environ.get("HOSTILE_MCP_COUNT")
        if count:
            with open(count, "w") as f:
                f.write(str(pages[0]))
        page_tools, cursor = tools(mode, pages[0] - 1)
        result: dict[str, Any] = {"tools": page_tools}
        if cursor is not None:
            result["nextCursor"] = cursor
        return result
    if method == "tools/call":
        if params.get("name") == "hang":
            return None
        text = json.dumps({"name": params.get("name"), "arguments": params.get("arguments")})
        return {"content": [{"type": "text", "text": text}]}
    return {"error": {"code": -32601, "message": f"no method {method!r}"}}


def main() -> None:
    """Answer requests from stdin until it closes."""
    mode = sys.argv[1]
    pages = [0]
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg or "method" not in msg:
            continue  # a notification, or a response to nothing this server asked
        result = answer(mode, msg, pages)
        if result is None:
            continue
        out: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
        if "error" in result:
            out["error"] = result["error"]
        else:
            out["result"] = result
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
