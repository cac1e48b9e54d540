"""CPU of two per-run costs in an agent actor, warm, in one process (no Ray instance):

* the reply to a take that carries one finished agent-as-tool child (its six events and its
  outcome), serialised as Ray would serialise the objects (cloudpickle) and as raygents packs
  it (the standard pickler, ``raygents.runtime.mailbox.pack``), and loaded again;
* checking one tool call's arguments against the tool's schema, building the validator each
  time against the kept validator (``raygents.schema.schema_errors``).

    python benchmarks/codec_cost.py [--n 20000]

Medians of ``--n`` calls, alternating the two ways. An actor woken once per finished tool runs
these with cold caches, several times slower than here.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time
from collections.abc import Callable
from typing import Any


def _child_reply() -> list[tuple[str, Any]]:
    from raygents.envelope import Outcome, RunState
    from raygents.events import RunEvent
    from raygents.messages import Message, ToolCall, Usage

    run_id, path = "run-18f2a3b4c5d6e7f8-1a2b3c4d.call_17", ("sub/call_17",)
    usage = Usage(input_tokens=20, output_tokens=10)
    base = {"run_id": run_id, "agent_name": "sub", "path": path}
    call = {"tool_name": "burn", "call_id": "call_s1", "arguments": '{"i": 17}'}
    events = [
        RunEvent(type="agent_start", **base),
        RunEvent(type="tool_start", **base, **call),
        RunEvent(type="checkpoint", **base, data={"seq": 1, "bytes": 412}),
        RunEvent(
            type="tool_end",
            **base,
            **call,
            result="burned 17",
            is_error=False,
            duration_s=0.2,
            data={"worker_pid": 4242, "run_s": 0.2},
        ),
        RunEvent(type="agent_end", **base, output="done: burned 17"),
        RunEvent(type="complete", **base, output="done: burned 17", turns=2, usage=usage),
    ]
    messages = (
        Message("user", "task 17"),
        Message(
            "assistant",
            None,
            tool_calls=(ToolCall(id="call_s1", name="burn", arguments='{"i": 17}'),),
        ),
        Message("tool", "burned 17", tool_call_id="call_s1"),
        Message("assistant", "done: burned 17"),
    )
    state = RunState(
        run_id=run_id,
        agent_name="sub",
        messages=messages,
        input_len=1,
        turns=2,
        usage=usage,
        depth=1,
        parent_run_id=run_id.rsplit(".", 1)[0],
        path=path,
        seq=2,
        recorded=3,
    )
    return [(run_id, (events, Outcome("completed", state, output="done: burned 17")))]


def _median_us(fns: dict[str, Callable[[], Any]], n: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(n):
        for name, fn in fns.items():
            began = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - began)
    return {name: 1e6 * statistics.median(v) for name, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    args = ap.parse_args()

    import jsonschema
    from ray import cloudpickle

    from raygents.runtime.mailbox import pack, unpack
    from raygents.schema import schema_errors

    items = _child_reply()
    by_ray, packed = cloudpickle.dumps(items), pack(items)
    assert unpack(packed) == pickle.loads(by_ray)
    dumps = _median_us(
        {"cloudpickle": lambda: cloudpickle.dumps(items), "pack": lambda: pack(items)}, args.n
    )
    loads = _median_us(
        {"cloudpickle": lambda: pickle.loads(by_ray), "pack": lambda: unpack(packed)}, args.n
    )
    print(f"take reply, one child ({len(by_ray)} / {len(packed)} bytes):")
    for way in dumps:
        print(f"  {way:11s} serialise {dumps[way]:6.1f} us, load {loads[way]:6.1f} us")

    schema = {
        "type": "object",
        "properties": {"i": {"type": "integer"}, "note": {"type": "string"}},
        "required": ["i", "note"],
        "additionalProperties": False,
    }
    value = {"i": 17, "note": "x"}

    def fresh() -> list[Any]:  # what schema_errors did before it kept validators
        validator = jsonschema.Draft202012Validator(schema)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        return [("/" + "/".join(str(p) for p in e.absolute_path), e.message) for e in errors]

    checks = _median_us(
        {"new validator": fresh, "kept validator": lambda: schema_errors(schema, value)}, args.n
    )
    print("tool arguments against their schema:")
    for way, us in checks.items():
        print(f"  {way:14s} {us:6.1f} us")


if __name__ == "__main__":
    main()
