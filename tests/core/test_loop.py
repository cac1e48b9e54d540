"""The pure turn logic, driven step by step without Ray."""

from __future__ import annotations

import json

import pytest

from raygents.agents.tools import ToolResult
from raygents.core import corrections, loop
from raygents.core.envelope import RunState
from raygents.core.messages import Message, ModelResponse, ToolSpec
from raygents.errors import (
    LimitExceeded,
    MaxTurnsExceeded,
    ModelError,
    ModelOutputError,
    OutputValidationError,
    ToolNotFound,
)
from raygents.testing import call, calls, text

ADD = ToolSpec(
    name="add",
    description="Add.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
)
ECHO = ToolSpec(name="echo", parameters={"type": "object", "properties": {}, "required": []})
HANDOFF = ToolSpec(name="transfer_to_billing", parameters={"type": "object", "properties": {}})
SCHEMA = {
    "name": "answer",
    "schema": {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    },
}


def view(**changes: object) -> loop.AgentView:
    base = {"name": "a", "system": "sys", "tools": (ADD, ECHO)}
    base.update(changes)
    return loop.AgentView(**base)  # type: ignore[arg-type]


def start(v: loop.AgentView, **changes: object) -> RunState:
    state = RunState(run_id="r1", agent_name=v.name, messages=(Message("user", "hi"),), input_len=1)
    return loop.activate(state.evolve(**changes), v)


def drive(
    v: loop.AgentView,
    replies: list[ModelResponse],
    tool: object = None,
    state: RunState | None = None,
) -> tuple[RunState, loop.Action, list[object]]:
    """Run the loop over scripted replies; tools answer with ``tool(call)`` or their name."""
    state = state or start(v)
    requests: list[object] = []
    state, action = loop.next_turn(state, v)
    while isinstance(action, (loop.CallModel, loop.RunTools)):
        if isinstance(action, loop.CallModel):
            requests.append(action.request)
            if not replies:
                raise AssertionError("the loop asked for more model calls than scripted")
            state, action = loop.on_response(state, v, replies.pop(0))
        else:
            results = [
                loop.step_result(s) or ToolResult(tool(s.call) if callable(tool) else s.call.name)
                for s in action.steps
            ]
            state, action = loop.on_results(state, v, action, results)
    return state, action, requests


def test_text_reply_finishes_in_one_turn() -> None:
    state, action, requests = drive(view(), [text("hello")])
    assert action == loop.Finish("hello")
    assert state.turns == 1 and state.usage.input_tokens == 10
    assert requests[0].system == "sys" and requests[0].tools == (ADD, ECHO)


def test_length_is_treated_as_stop() -> None:
    reply = ModelResponse(Message("assistant", "cut"), "length")
    assert drive(view(), [reply])[1] == loop.Finish("cut")


def test_content_filter_fails() -> None:
    reply = ModelResponse(Message("assistant", ""), "content_filter")
    _, action, _ = drive(view(), [reply])
    assert isinstance(action, loop.Fail) and isinstance(action.error, ModelError)
    assert "filtered" in str(action.error)


def test_tool_results_follow_call_order() -> None:
    batch = calls(call("add", {"a": 1, "b": 2}, id="c1"), call("echo", {}, id="c2"))
    state, action, _ = drive(view(), [batch, text("done")], tool=lambda c: f"r-{c.id}")
    assert action == loop.Finish("done")
    tool_msgs = [m for m in state.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_msgs] == [("c1", "r-c1"), ("c2", "r-c2")]
    assert state.turns == 2


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("{not json", "not valid JSON"),
        ('{"a": 1}', "'b' is a required property"),
        ('{"a": "x", "b": 2}', "/a"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_invalid_arguments_become_error_messages(arguments: str, expected: str) -> None:
    batch = calls(call("add", arguments, id="c1"))
    state, action, _ = drive(view(), [batch, text("ok")], tool=lambda c: pytest.fail("ran"))
    assert action == loop.Finish("ok")
    message = next(m for m in state.messages if m.role == "tool")
    assert message.content.startswith('Invalid parameters for tool "add"')
    assert expected in message.content


def test_unknown_tool_fails_the_run() -> None:
    _, action, _ = drive(view(), [calls(call("rm_rf", {}))])
    assert isinstance(action, loop.Fail) and isinstance(action.error, ToolNotFound)
    assert action.error.tool_name == "rm_rf" and action.error.run_id == "r1"


def test_max_turns_is_the_current_agents_limit() -> None:
    v = view(max_turns=2)
    _, action, requests = drive(v, [calls(call("echo", {})), calls(call("echo", {}))])
    assert isinstance(action, loop.Fail) and isinstance(action.error, MaxTurnsExceeded)
    assert action.error.max_turns == 2 and len(requests) == 2


def test_run_cap_shrinks_the_agent_limit() -> None:
    v = view(max_turns=10)
    state = start(v, max_turns=1)
    _, action, _ = drive(v, [calls(call("echo", {}))], state=state)
    assert isinstance(action, loop.Fail) and action.error.max_turns == 1


def test_structured_output_explores_then_synthesises() -> None:
    v = view(output_schema=SCHEMA)
    replies = [calls(call("echo", {})), text("I found it"), text('{"n": 3}')]
    state, action, requests = drive(v, replies)
    assert action == loop.Finish('{"n": 3}')
    assert state.turns == 3
    assert requests[0].response_format is None
    assert requests[2].response_format == SCHEMA
    assert requests[2].settings.tool_choice == "none"
    assert requests[2].messages[-1] == Message("user", loop.NUDGE)


def test_structured_output_without_tools_is_enforced_from_the_start() -> None:
    v = view(tools=(), output_schema=SCHEMA)
    _, action, requests = drive(v, [text('{"n": 1}')])
    assert action == loop.Finish('{"n": 1}')
    assert requests[0].response_format == SCHEMA


def test_forced_synthesis_may_use_one_turn_past_the_limit() -> None:
    v = view(output_schema=SCHEMA, max_turns=1)
    state, action, requests = drive(v, [calls(call("echo", {})), text('{"n": 2}')])
    assert action == loop.Finish('{"n": 2}')
    assert state.turns == 2 and requests[1].response_format == SCHEMA


def test_stop_at_the_limit_while_exploring_still_synthesises() -> None:
    v = view(output_schema=SCHEMA, max_turns=1)
    state, action, _ = drive(v, [text("free text"), text('{"n": 5}')])
    assert action == loop.Finish('{"n": 5}') and state.turns == 2


def test_empty_structured_output_is_retried() -> None:
    v = view(tools=(), output_schema=SCHEMA, max_empty_output_retries=2)
    state, action, requests = drive(v, [text(""), text("  "), text('{"n": 1}')])
    assert action == loop.Finish('{"n": 1}') and len(requests) == 3
    assert all(m.text.strip() for m in state.messages if m.role == "assistant")


def test_empty_output_retries_are_bounded() -> None:
    v = view(tools=(), output_schema=SCHEMA, max_empty_output_retries=1)
    _, action, _ = drive(v, [text(""), text("")])
    assert isinstance(action, loop.Fail) and isinstance(action.error, OutputValidationError)


def test_invalid_structured_output_names_the_failing_path() -> None:
    v = view(tools=(), output_schema=SCHEMA)
    _, action, _ = drive(v, [text('{"n": "three"}')])
    assert isinstance(action, loop.Fail) and isinstance(action.error, OutputValidationError)
    assert action.error.errors[0][0] == "/n"


def test_handoff_batch_runs_earlier_calls_and_skips_later_ones() -> None:
    v = view(tools=(ADD, ECHO, HANDOFF), handoffs={"transfer_to_billing": "billing"})
    batch = calls(
        call("echo", {}, id="c1"),
        call("transfer_to_billing", {}, id="c2"),
        call("add", {}, id="c3"),
    )
    state, action, _ = drive(v, [batch])
    assert action == loop.HandoffTo("billing", batch.message.tool_calls[1])
    contents = [m.content for m in state.messages if m.role == "tool"]
    assert contents == ["echo", "Transferred to billing", loop.SKIPPED_AFTER_HANDOFF]


def test_handoff_plan_is_sequential() -> None:
    v = view(tools=(ECHO, HANDOFF), handoffs={"transfer_to_billing": "billing"})
    state = start(v)
    _, action = loop.on_response(state, v, calls(call("echo", {}), call("transfer_to_billing", {})))
    assert isinstance(action, loop.RunTools) and action.sequential
    assert [type(s) for s in action.steps] == [loop.Execute, loop.Transfer]


@pytest.mark.parametrize(
    ("behavior", "expected", "tool"),
    [
        ("stop_on_first_tool", "r-c1", "add"),
        (("echo",), "r-c2", "echo"),
        (("nothing",), None, None),
    ],
)
def test_tool_use_behaviours(behavior: object, expected: str | None, tool: str | None) -> None:
    v = view(tool_use_behavior=behavior)
    batch = calls(call("add", {"a": 1, "b": 1}, id="c1"), call("echo", {}, id="c2"))
    state, action, requests = drive(v, [batch, text("model")], tool=lambda c: f"r-{c.id}")
    if expected is None:
        assert action == loop.Finish("model") and len(requests) == 2
    else:
        assert action == loop.Finish(expected, tool) and len(requests) == 1
        assert state.messages[-1] == Message("assistant", expected)


def test_reset_tool_choice_after_a_tool_ran() -> None:
    settings = view().settings.model_copy(update={"tool_choice": "required"})
    v = view(settings=settings)
    _, _, requests = drive(v, [calls(call("echo", {})), text("x")])
    assert requests[0].settings.tool_choice == "required"
    assert requests[1].settings.tool_choice is None


def test_keep_tool_choice_when_reset_is_off() -> None:
    settings = view().settings.model_copy(update={"tool_choice": "required"})
    v = view(settings=settings, reset_tool_choice=False)
    _, _, requests = drive(v, [calls(call("echo", {})), text("x")])
    assert requests[1].settings.tool_choice == "required"


def test_tool_calls_reason_without_calls_is_a_stop() -> None:
    reply = ModelResponse(Message("assistant", "hm"), "tool_calls")
    assert drive(view(), [reply])[1] == loop.Finish("hm")


def test_on_results_checks_the_result_count() -> None:
    v = view()
    state = start(v)
    state, action = loop.on_response(state, v, calls(call("echo", {})))
    assert isinstance(action, loop.RunTools)
    with pytest.raises(ValueError, match="expected 1 results"):
        loop.on_results(state, v, action, [])


def test_output_error_accepts_valid_json() -> None:
    assert corrections.output_error("r", SCHEMA, json.dumps({"n": 1})) is None


def test_argument_errors_use_each_schema_as_it_is() -> None:
    """Validators are kept per schema object: another schema, or one that is gone, is never
    checked with a validator built for a different one."""
    from raygents.core import schema

    ints = ToolSpec(
        name="f",
        description="",
        parameters={"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    )
    strs = ToolSpec(
        name="f",
        description="",
        parameters={"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
    )
    for _ in range(2):
        assert corrections.argument_error(ints, '{"x": 1}') is None
        assert "/x" in (corrections.argument_error(strs, '{"x": 1}') or "")
        assert corrections.argument_error(strs, '{"x": "a"}') is None
    for n in range(schema._MAX_VALIDATORS + 10):  # the cache stays bounded
        assert schema.schema_errors({"type": "object", "maxProperties": n}, {}) == []
    assert len(schema._VALIDATORS) <= schema._MAX_VALIDATORS


# --- malformed output: bounded corrections (max_output_retries) ------------------------------

MALFORMED = [
    ("{not json", "not valid JSON"),
    ('{"a": 1, "b": 2', "not valid JSON"),  # truncated
    ('{"a": NaN, "b": 1}', "NaN is not valid JSON"),
    ('{"a": 1, "a": 2, "b": 3}', "not valid JSON"),  # repeated key
    ("[1, 2]", "must be a JSON object"),
    ('"text"', "must be a JSON object"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
]


@pytest.mark.parametrize(("arguments", "expected"), MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_arguments_are_corrected_and_counted(arguments: str, expected: str) -> None:
    batch = calls(call("add", arguments, id="c1"))
    state, action, _ = drive(view(), [batch, text("ok")], tool=lambda c: pytest.fail("ran"))
    assert action == loop.Finish("ok")
    message = next(m for m in state.messages if m.role == "tool")
    assert message.content.startswith('Invalid parameters for tool "add"')
    assert expected in message.content and len(message.content) < 2000
    assert state.output_retries == 1


@pytest.mark.parametrize("arguments", ['{"a": 1}', '{"a": "x", "b": 2}', "{}"])
def test_arguments_that_miss_the_schema_are_corrected_but_not_counted(arguments: str) -> None:
    batch = calls(call("add", arguments, id="c1"))
    state, action, _ = drive(view(max_output_retries=0), [batch, text("ok")])
    assert action == loop.Finish("ok") and state.output_retries == 0


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_corrections_below_the_limit_continue_and_the_next_one_fails(limit: int) -> None:
    bad = [calls(call("add", "{oops", id=f"c{i}")) for i in range(limit + 1)]
    v = view(max_output_retries=limit, max_turns=20)
    state, action, requests = drive(v, bad)
    assert len(requests) == limit + 1 and state.output_retries == limit
    assert isinstance(action, loop.Fail) and isinstance(action.error, ModelOutputError)
    error = action.error
    assert (error.agent_name, error.tool_name, error.max_output_retries) == ("a", "add", limit)
    assert error.excerpt == "'{oops'" and error.run_id == "r1"
    assert "agent 'a' sent malformed output" in str(error)
    assert "arguments are not valid JSON" in str(error) and "'{oops'" in str(error)
    assert f"max_output_retries={limit}" in str(error)


def test_the_run_continues_when_the_model_fixes_its_output_in_time() -> None:
    replies = [
        calls(call("add", "{oops", id="c1")),
        calls(call("add", "[]", id="c2")),
        calls(call("add", {"a": 1, "b": 2}, id="c3")),
        text("3"),
    ]
    state, action, _ = drive(view(max_output_retries=2), replies, tool=lambda c: "3")
    assert action == loop.Finish("3") and state.output_retries == 2


def test_the_count_is_the_runs_and_good_replies_do_not_reset_it() -> None:
    replies = [
        calls(call("add", "{oops", id="c1")),
        calls(call("add", {"a": 1, "b": 2}, id="c2")),
        calls(call("add", "{oops", id="c3")),
    ]
    _, action, _ = drive(view(max_output_retries=1), replies, tool=lambda c: "3")
    assert isinstance(action, loop.Fail) and isinstance(action.error, ModelOutputError)


def test_a_reply_with_several_malformed_calls_counts_once() -> None:
    batch = calls(
        call("add", "{oops", id="c1"), call("echo", "[]", id="c2"), call("echo", {}, id="c3")
    )
    state, action, _ = drive(view(max_output_retries=1), [batch, text("ok")])
    assert action == loop.Finish("ok") and state.output_retries == 1
    contents = [m.content for m in state.messages if m.role == "tool"]
    assert contents[0].startswith('Invalid parameters for tool "add"')
    assert contents[1].startswith('Invalid parameters for tool "echo"') and contents[2] == "echo"


def test_a_huge_malformed_output_gives_bounded_messages() -> None:
    arguments = '{"a": "' + "x" * 10_000_000
    v = view(max_output_retries=1)
    state, action, _ = drive(v, [calls(call("add", arguments)), calls(call("add", arguments))])
    correction = next(m for m in state.messages if m.role == "tool").content
    assert len(correction) < 1000
    assert isinstance(action, loop.Fail) and isinstance(action.error, ModelOutputError)
    assert len(str(action.error)) < 1000 and "more characters" in str(action.error)


def test_a_credential_in_the_malformed_output_is_not_quoted_in_the_error() -> None:
    secret = "sk-proj-" + "Ab3dE9xYz" * 5
    _, action, _ = drive(view(max_output_retries=0), [calls(call("add", f"{{key: {secret}"))])
    assert isinstance(action, loop.Fail) and isinstance(action.error, ModelOutputError)
    assert secret[:20] not in str(action.error) and "OpenAI API key" in str(action.error)
    assert action.error.excerpt is not None and secret[:20] not in action.error.excerpt


def test_a_resumed_batch_is_not_counted_again() -> None:
    v = view(max_output_retries=1)
    state = start(v)
    state, _ = loop.next_turn(state, v)
    state, action = loop.on_response(state, v, calls(call("add", "{oops", id="c1")))
    assert isinstance(action, loop.RunTools) and state.output_retries == 1
    again = loop.pending_batch(state, v)
    assert again == action and state.output_retries == 1


# --- limits: LimitExceeded ---------------------------------------------------------------------

LIMITS = [
    ({"max_turns": 2}, {}, "max_turns", 2),
    ({"max_turns": 10}, {"max_turns": 1}, "max_turns", 1),
    ({"max_model_calls": 2}, {}, "max_model_calls", 2),
]


@pytest.mark.parametrize(("agent", "run", "limit", "value"), LIMITS)
def test_each_limit_fails_with_its_name_value_and_run(
    agent: dict[str, int], run: dict[str, int], limit: str, value: int
) -> None:
    v = view(**agent)
    _, action, requests = drive(v, [calls(call("echo", {}))] * 5, state=start(v, **run))
    assert isinstance(action, loop.Fail) and isinstance(action.error, LimitExceeded)
    assert isinstance(action.error, MaxTurnsExceeded)  # (what callers caught before)
    error = action.error
    assert (error.limit, error.value, error.run_id) == (limit, value, "r1")
    assert len(requests) == value
