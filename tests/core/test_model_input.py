"""What a model sends is untrusted input: surrogates, repeated or hostile call ids, too many
calls, malformed arguments and typed output that breaks its schema. Driven through the pure
loop, without Ray."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from fakes import FakeHandle
from pydantic import BaseModel, Field

from raygents.agents.tools import ToolResult
from raygents.core import loop
from raygents.core.envelope import Envelope, RunState
from raygents.core.messages import Message, ModelResponse, ToolCall, ToolSpec
from raygents.core.schema import type_schema
from raygents.core.toolcall import clean_text, result_text
from raygents.errors import OutputValidationError, ToolNotFound, UserError
from raygents.records import checkpoint
from raygents.runtime.actor.children import (
    child_budget,
    child_run_id,
    existing_child,
    legacy_child_run_id,
)
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.settings import Settings
from raygents.sessions import SQLiteSession
from raygents.testing import call, calls, text

ADD = ToolSpec(
    name="add",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
)
LS = ToolSpec(name="ls", parameters={"type": "object", "properties": {}, "required": []})


def view(**changes: object) -> loop.AgentView:
    base: dict[str, object] = {"name": "a", "system": "sys", "tools": (ADD, LS)}
    base.update(changes)
    return loop.AgentView(**base)  # type: ignore[arg-type]


def start(v: loop.AgentView) -> RunState:
    state = RunState(run_id="r1", agent_name=v.name, messages=(Message("user", "hi"),), input_len=1)
    return loop.activate(state, v)


def reply(*tool_calls: ToolCall) -> ModelResponse:
    return calls(*tool_calls)


def first_batch(v: loop.AgentView, response: ModelResponse) -> tuple[RunState, loop.Action]:
    state, action = loop.next_turn(start(v), v)
    assert isinstance(action, loop.CallModel)
    return loop.on_response(state, v, response)


def answer(state: RunState, v: loop.AgentView, batch: loop.RunTools) -> RunState:
    results = [loop.step_result(s) or ToolResult(f"ran {s.call.id}") for s in batch.steps]
    state, _ = loop.on_results(state, v, batch, results)
    return state


def encodes(state: RunState) -> bytes:
    """The state's checkpoint record, encoded (what failed with lone surrogates)."""
    _, record, _ = checkpoint.next_record(state, "running", None)
    return checkpoint.encode(record)


# --- 8: lone surrogates ------------------------------------------------------------------
def test_lone_surrogates_in_model_output_and_tool_results_are_replaced_and_checkpoint() -> None:
    v = view()
    name = "report-\udcff.txt"  # os.listdir's name for a file name that is not UTF-8
    response = reply(ToolCall("c\udcff", "ls", json.dumps({}) + ""), ToolCall("c2", "ls", "{}"))
    state, batch = first_batch(v, response)
    assert isinstance(batch, loop.RunTools)
    results = [ToolResult(name), ToolResult(*result_text(name))]
    state, _ = loop.on_results(state, v, batch, results)
    state, _ = loop.on_response(state, v, text(f"found {name}"))
    encodes(state)  # raised UnicodeEncodeError before
    texts = [m.content for m in state.messages if m.role in ("tool", "assistant") and m.content]
    assert texts == ["report-\ufffd.txt", "report-\ufffd.txt", "found report-\ufffd.txt"]
    assert state.messages[1].tool_calls[0].id == "c\ufffd"
    assert state.messages[2].tool_call_id == "c\ufffd"


def test_a_journaled_tool_error_with_a_surrogate_checkpoints() -> None:
    error = ToolResult("Error: FileNotFoundError: report-\udcff.txt", is_error=True)
    state = start(view()).evolve(journal={"c1": error})
    encodes(state)


def test_surrogates_are_replaced_in_every_text_field_of_a_message() -> None:
    m = Message.from_openai(
        {
            "role": "assistant",
            "content": "a\ud800",
            "tool_calls": [
                {"id": "i\udc00", "function": {"name": "n\udfff", "arguments": "\udcff"}}
            ],
        }
    )
    c = m.tool_calls[0]
    assert (m.content, c.id, c.name, c.arguments) == ("a\ufffd", "i\ufffd", "n\ufffd", "\ufffd")
    assert Message("tool", "x", tool_call_id="\udcff").tool_call_id == "\ufffd"
    assert clean_text("\ud83d\ude00") == "\U0001f600"  # a pair is its character
    assert clean_text("plain") == "plain" and clean_text(None) is None


def test_a_session_saves_and_loads_text_that_held_surrogates(tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "s.db")
    session.save("s1", [Message("user", "open report-\udcff.txt")])
    assert [m.content for m in session.load("s1")] == ["open report-\ufffd.txt"]


# --- 9: the model controls call ids and counts ------------------------------------------
def test_repeated_call_ids_are_renamed_and_each_is_answered_once() -> None:
    v = view()
    response = reply(call("ls", {}, id="x"), call("ls", {}, id="x"), call("ls", {}, id="x~2"))
    state, batch = first_batch(v, response)
    assert isinstance(batch, loop.RunTools)
    ids = [s.call.id for s in batch.steps]
    assert ids == ["x", "x~3", "x~2"] and len(set(ids)) == 3
    assert [c.id for c in state.messages[-1].tool_calls] == ids  # what the model sees
    state = answer(state, v, batch)
    assert [m.tool_call_id for m in state.messages if m.role == "tool"] == ids


def test_call_ids_of_earlier_turns_empty_and_overlong_ids_are_renamed() -> None:
    v = view()
    state, batch = first_batch(v, reply(call("ls", {}, id="call_0")))
    assert isinstance(batch, loop.RunTools)
    state = answer(state, v, batch)
    long_id = "z" * 10_000
    state, batch = loop.on_response(
        state, v, reply(call("ls", {}, id="call_0"), ToolCall("", "ls"), ToolCall(long_id, "ls"))
    )
    assert isinstance(batch, loop.RunTools)
    ids = [s.call.id for s in batch.steps]
    assert ids == ["call_0~1", "call~2", "z" * 64 + "~3"]


def test_calls_past_the_per_turn_cap_are_answered_with_an_error_and_not_run() -> None:
    v = view(max_tool_calls_per_turn=3)
    many = [call("ls", {}, id=f"c{i}") for i in range(10_000)]
    state, batch = first_batch(v, reply(*many, call("nope", {}, id="unknown")))
    assert isinstance(batch, loop.RunTools)
    assert [type(s) for s in batch.steps[:3]] == [loop.Execute] * 3
    rest = batch.steps[3:]
    assert len(rest) == 9_998 and all(isinstance(s, loop.Reject) for s in rest)
    message = loop.step_result(rest[0])
    assert message is not None and message.is_error
    assert "at most 3 tool calls" in message.content and "10001" in message.content
    state = answer(state, v, batch)
    assert sum(m.role == "tool" for m in state.messages) == 10_001  # every id answered


def test_the_default_cap_and_agent_validation() -> None:
    import raygents as rg

    assert loop.AgentView(name="a").max_tool_calls_per_turn == 128
    assert rg.Agent("a").max_tool_calls_per_turn == 128
    assert rg.Agent("a", max_model_calls=5).max_model_calls == 5
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(UserError, match="max_tool_calls_per_turn"):
            rg.Agent("a", max_tool_calls_per_turn=bad)  # type: ignore[arg-type]
        with pytest.raises(UserError, match="max_model_calls"):
            rg.Agent("a", max_model_calls=bad)  # type: ignore[arg-type]


def test_child_run_ids_are_hashed_bounded_distinct_and_stable() -> None:
    assert child_run_id("p", "a:b") != child_run_id("p", "a/b")
    assert child_run_id("p", "a:b") == child_run_id("p", "a:b")
    assert child_run_id("p", "x") != child_run_id("q", "x")
    run_id = "run-18bcf2a3c1d2e3f4-0a1b2c3d"
    for _ in range(50):  # depth 50 with OpenAI-style ids
        run_id = child_run_id(run_id, "call_" + "Ab3dE" * 5)
        assert len(run_id) <= 89 and run_id.isascii()
        assert all(c.isalnum() or c in "._-" for c in run_id)
    for odd in ("", "ключ", "../x", "a\x00b", "\ufffd" * 500):
        child = child_run_id("p", odd)
        assert child.startswith("p.") and child.isascii() and "/" not in child
    assert legacy_child_run_id("p", "a:b") == "p.a_b"  # found for runs of older versions


class Records:
    """A coordinator that only loads runs' records (what finding a child needs)."""

    def __init__(self, runs: dict[str, RunState]) -> None:
        self.blobs = {}
        for run_id, state in runs.items():
            _, record, _ = checkpoint.next_record(state, "running", None)
            self.blobs[run_id] = [checkpoint.encode(record)]

    def load(self, run_id: str) -> list[bytes]:
        return self.blobs.get(run_id, [])

    def settings(self) -> Settings:
        return Settings()


@pytest.mark.parametrize("stored_as", ["hashed", "legacy", "none"])
def test_a_resumed_parent_finds_its_child_under_the_new_or_the_old_id(stored_as: str) -> None:
    parent = RunState(run_id="p", agent_name="a", messages=(Message("user", "x"),))
    hashed, legacy = child_run_id("p", "call:1"), legacy_child_run_id("p", "call:1")
    runs = {}
    if stored_as != "none":
        run_id = hashed if stored_as == "hashed" else legacy
        runs[run_id] = RunState(run_id=run_id, agent_name="b", messages=(Message("user", "y"),))
    directory = Directory("ns", FakeHandle(Records(runs)))
    envelope = Envelope(parent, "fp", resumed=True)
    child_id, child = asyncio.run(
        existing_child(directory, parent, call("b", id="call:1"), envelope)
    )
    assert child_id == (legacy if stored_as == "legacy" else hashed)
    assert (child is None) == (stored_as == "none")
    fresh = Envelope(parent, "fp", resumed=False)
    assert asyncio.run(existing_child(directory, parent, call("b", id="call:1"), fresh)) == (
        hashed,
        None,
    )


def test_a_childs_budget_is_its_share_of_what_the_parent_has_left() -> None:
    v = view(max_model_calls=100)
    state, _ = first_batch(v, reply(*[call("ls", {}, id=f"c{i}") for i in range(4)]))
    assert state.max_model_calls == 100 and state.usage.requests == 1
    assert child_budget(state) == 99 // 4
    assert child_budget(state.evolve(max_model_calls=None)) is None


def test_the_run_fails_when_its_model_call_budget_is_spent() -> None:
    v = view(max_model_calls=2, max_turns=50)
    state, batch = first_batch(v, reply(call("ls", {}, id="a")))
    assert isinstance(batch, loop.RunTools)
    state, action = loop.on_results(state, v, batch, [ToolResult("x")])
    state, batch = loop.on_response(state, v, reply(call("ls", {}, id="b")))
    assert isinstance(batch, loop.RunTools)
    state, action = loop.on_results(state, v, batch, [ToolResult("x")])
    assert isinstance(action, loop.Fail) and "budget of 2 model calls" in str(action.error)
    # a limit only shrinks: an agent that allows more does not raise it
    assert loop.activate(state, view(max_model_calls=10)).max_model_calls == 2


# --- B1: malformed model output ---------------------------------------------------------
HUGE = "x" * 10_000_000
MALFORMED = [
    ("not json", "add please"),
    ("truncated", '{"a": 1, "b"'),
    ("NaN", '{"a": NaN, "b": 1}'),
    ("Infinity", '{"a": Infinity, "b": 1}'),
    ("-Infinity", '{"a": -Infinity, "b": 1}'),
    ("duplicate keys", '{"a": 1, "a": 2, "b": 3}'),
    ("escaped surrogate", '{"a": "\\udcff", "b": 1}'),
    ("raw surrogate", '{"a": "\udcff", "b": 1}'),
    ("10 MB string", json.dumps({"a": HUGE, "b": 1})),
    ("10 MB not json", HUGE),
    ("nested 10,000 deep", '{"a": ' + "[" * 10_000 + "]" * 10_000 + ', "b": 1}'),
    ("nested 900 deep", '{"a": ' + "[" * 900 + "]" * 900 + ', "b": 1}'),
    ("array", "[1, 2]"),
    ("empty object", "{}"),
]


@pytest.mark.parametrize(("case", "arguments"), MALFORMED, ids=[c for c, _ in MALFORMED])
def test_malformed_arguments_become_a_bounded_error_message(case: str, arguments: str) -> None:
    v = view()
    state, batch = first_batch(v, reply(ToolCall("c1", "add", arguments)))
    assert isinstance(batch, loop.RunTools), case
    (step,) = batch.steps
    assert isinstance(step, loop.Reject), case
    assert step.message.startswith('Invalid parameters for tool "add"')
    assert len(step.message) < 2_000, (case, len(step.message))
    state = answer(state, v, batch)
    assert state.messages[-1].content == step.message
    assert len(encodes(state)) < 11_000_000


SCALE = ToolSpec(
    name="scale",
    parameters={"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json_even_for_a_number(value: str) -> None:
    v = view(tools=(SCALE,))
    _, batch = first_batch(v, reply(ToolCall("c1", "scale", f'{{"x": {value}}}')))
    assert isinstance(batch, loop.RunTools)
    (step,) = batch.steps
    assert isinstance(step, loop.Reject) and f"{value} is not valid JSON" in step.message


@pytest.mark.parametrize("name", ["", " ", "\t\n", "\udcff", "n" * 1_000_000])
def test_an_empty_odd_or_huge_tool_name_fails_the_run_cleanly(name: str) -> None:
    v = view()
    state, action = first_batch(v, reply(ToolCall("c1", name, "{}")))
    assert isinstance(action, loop.Fail) and isinstance(action.error, ToolNotFound)
    assert len(str(action.error)) < 300 and len(action.error.tool_name or "") < 200
    encodes(state)


# --- B2: typed output that breaks its schema --------------------------------------------
class Item(BaseModel):
    sku: str
    qty: Annotated[int, Field(ge=1, le=100)]


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Order(BaseModel):
    id: int
    items: list[Item]
    pet: Cat | Dog
    note: str | None = None


GOOD = {
    "id": 1,
    "items": [{"sku": "a", "qty": 2}],
    "pet": {"kind": "cat", "lives": 9},
    "note": None,
}
BROKEN = [
    ("missing field", {k: v for k, v in GOOD.items() if k != "id"}, "/"),
    ("wrong type", {**GOOD, "id": "one"}, "/id"),
    ("nested wrong type", {**GOOD, "items": [{"sku": "a", "qty": "2"}]}, "/items/0/qty"),
    ("extra field", {**GOOD, "admin": True}, "/"),
    ("nested extra field", {**GOOD, "items": [{"sku": "a", "qty": 2, "x": 1}]}, "/items/0"),
    ("out of range", {**GOOD, "items": [{"sku": "a", "qty": 0}]}, "/items/0/qty"),
    ("above range", {**GOOD, "items": [{"sku": "a", "qty": 101}]}, "/items/0/qty"),
    ("unmatched union", {**GOOD, "pet": {"kind": "cow", "moos": True}}, "/pet"),
    ("null for required", {**GOOD, "items": None}, "/items"),
]


@pytest.mark.parametrize(("case", "value", "path"), BROKEN, ids=[c for c, _, _ in BROKEN])
def test_typed_output_that_breaks_its_schema_fails_with_the_path(
    case: str, value: object, path: str
) -> None:
    v = view(tools=(), output_schema={"name": "order", "schema": type_schema(Order)})
    _, action = first_batch(v, text(json.dumps(value)))
    assert isinstance(action, loop.Fail), case  # never a Finish with a partly valid object
    error = action.error
    assert isinstance(error, OutputValidationError)
    assert path in [p for p, _ in error.errors], (case, error.errors)


def test_valid_typed_output_finishes() -> None:
    v = view(tools=(), output_schema={"name": "order", "schema": type_schema(Order)})
    _, action = first_batch(v, text(json.dumps(GOOD)))
    assert action == loop.Finish(json.dumps(GOOD))


@pytest.mark.parametrize(
    "output", ['{"id": NaN}', '{"id": 1, "id": 2}', HUGE, "[" * 10_000, '{"id": "' + HUGE + '"}']
)
def test_malformed_typed_output_fails_with_a_bounded_error(output: str) -> None:
    v = view(tools=(), output_schema={"name": "order", "schema": type_schema(Order)})
    state, action = first_batch(v, text(output))
    assert isinstance(action, loop.Fail) and isinstance(action.error, OutputValidationError)
    assert len(str(action.error)) < 2_000
    assert all(len(m) < 600 for _, m in action.error.errors)
    encodes(state)


@pytest.mark.parametrize("data", [{"o": object()}, {"x": float("nan")}, {"k": {"s": {1, 2}}}])
def test_a_reasoning_item_holds_plain_json_only(data: dict[Any, Any]) -> None:
    """It is checkpointed and sent back to the model: refused when it is built, not at a
    checkpoint write in the middle of a run."""
    from pydantic import ValidationError

    from raygents.core.messages import ReasoningItem

    with pytest.raises(ValidationError, match="must be plain JSON"):
        ReasoningItem(api="openai.responses", data=data)
    kept = ReasoningItem(api="openai.responses", data={"id": "rs_1", "summary": [], "n": 1})
    assert ReasoningItem.model_validate_json(kept.model_dump_json()) == kept
