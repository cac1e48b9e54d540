"""The pure compaction policies: tables of histories in, histories out."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from raygents.core.compaction import (
    SUMMARY_PREFIX,
    Compaction,
    TrimOldest,
    TrimToolOutputs,
    blocks,
    check_policy,
    compacted,
    split_for_summary,
    summary_request,
    summary_span,
    trim_oldest,
    trim_tool_outputs,
)
from raygents.core.messages import Message, ToolCall
from raygents.errors import UserError


def U(text: str) -> Message:
    return Message("user", text)


def A(text: str) -> Message:
    return Message("assistant", text)


def S(text: str) -> Message:
    return Message("system", text)


def C(*ids: str, name: str = "f") -> Message:
    """An assistant message calling ``name`` once per id."""
    return Message("assistant", None, tool_calls=[ToolCall(i, name, "{}") for i in ids])


def T(call_id: str, text: str = "ok") -> Message:
    return Message("tool", text, tool_call_id=call_id)


def shape(messages: Sequence[Message]) -> list[str]:
    """A short form of a history: role initial and text or call ids."""
    out = []
    for m in messages:
        if m.summary:
            out.append("SUMMARY")
        elif m.tool_calls:
            out.append("C:" + ",".join(c.id for c in m.tool_calls))
        elif m.role == "tool":
            out.append(f"T:{m.tool_call_id}")
        else:
            out.append(f"{m.role[0].upper()}:{m.text}")
    return out


def paired(messages: Sequence[Message]) -> bool:
    """Every tool message follows the call it answers, and every call is answered."""
    open_ids: set[str] = set()
    for m in messages:
        if m.role == "tool":
            if m.tool_call_id not in open_ids:
                return False
            open_ids.discard(m.tool_call_id)
        else:
            if open_ids:
                return False
            open_ids = {c.id for c in m.tool_calls}
    return True


LONG = [U("task"), C("1"), T("1"), C("2", "3"), T("2"), T("3"), A("thinking"), C("4"), T("4")]


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([], []),
        ([U("a")], [(0, 1)]),
        ([U("a"), C("1"), T("1"), A("b")], [(0, 1), (1, 3), (3, 4)]),
        ([C("1", "2"), T("1"), T("2"), U("x")], [(0, 3), (3, 4)]),
    ],
)
def test_blocks_keep_calls_with_their_results(
    history: list[Message], expected: list[tuple[int, int]]
) -> None:
    assert blocks(history) == expected


@pytest.mark.parametrize(
    ("keep", "expected"),
    [
        (0, None),  # everything summarised: kept part empty
        (1, (["U:task", "C:1", "T:1", "C:2,3", "T:2", "T:3", "A:thinking"], ["C:4", "T:4"])),
        (2, (["U:task", "C:1", "T:1", "C:2,3", "T:2", "T:3"], ["A:thinking", "C:4", "T:4"])),
        (4, (["U:task"], ["C:1", "T:1", "C:2,3", "T:2", "T:3", "A:thinking", "C:4", "T:4"])),
        (5, None),  # fewer turns than kept: nothing to summarise
    ],
)
def test_split_for_summary_keeps_the_last_turns(
    keep: int, expected: tuple[list[str], list[str]] | None
) -> None:
    split = split_for_summary(LONG, keep)
    if keep == 0:
        assert split is not None and split[2] == ()
        assert shape(split[1]) == shape(LONG)
        return
    if expected is None:
        assert split is None
        return
    assert split is not None
    system, older, kept = split
    assert system == ()
    assert (shape(older), shape(kept)) == expected
    assert paired(kept)


def test_split_keeps_system_messages_and_an_unanswered_batch() -> None:
    history = [S("rules"), U("task"), C("1"), T("1"), A("x"), C("2", "3"), T("2")]
    split = split_for_summary(history, 0)
    assert split is not None
    system, older, kept = split
    assert shape(system) == ["S:rules"]
    assert shape(older) == ["U:task", "C:1", "T:1", "A:x"]
    assert shape(kept) == ["C:2,3", "T:2"]  # call 3 waits for an approval: never summarised


def test_a_lone_summary_is_not_summarised_again() -> None:
    history = compacted((), "old", [C("9"), T("9")])
    assert split_for_summary(history, 1) is None
    more = [*history, A("a"), C("10"), T("10")]
    split = split_for_summary(more, 1)
    assert split is not None
    assert shape(split[1]) == ["SUMMARY", "C:9", "T:9", "A:a"]


def test_compacted_history_marks_the_summary_and_stays_paired() -> None:
    split = split_for_summary(LONG, 2)
    assert split is not None
    out = compacted(split[0], "  the gist ", split[2])
    assert shape(out) == ["SUMMARY", "A:thinking", "C:4", "T:4"]
    assert out[0].role == "user" and out[0].text == SUMMARY_PREFIX + "the gist"
    assert paired(out)
    # the flag survives the round trip through plain data, and is absent where false
    assert Message.model_validate(out[0].model_dump(mode="json")).summary
    assert "summary" not in out[1].model_dump(mode="json")


def test_summary_request_shows_the_transcript() -> None:
    request = summary_request("a", LONG[:3], None)
    text = request.messages[0].text
    assert "[user]\ntask" in text and "[assistant calls f (1)] {}" in text
    assert "[tool result 1]\nok" in text
    assert "summary" in request.system.lower()
    assert summary_request("a", LONG[:1], "Be brief.").system == "Be brief."


BIG = "x" * 100


@pytest.mark.parametrize(
    ("history", "keep", "trimmed"),
    [
        ([U("q"), C("1"), T("1", BIG), C("2"), T("2", BIG)], 1, ["1"]),
        ([U("q"), C("1"), T("1", BIG), C("2"), T("2", BIG)], 2, []),
        ([U("q"), C("1"), T("1", BIG), C("2"), T("2", BIG)], 0, ["1", "2"]),
        ([U("q"), C("1"), T("1", "short"), C("2"), T("2", BIG)], 0, ["2"]),
        ([U(BIG), A(BIG), C("1"), T("1", BIG)], 0, ["1"]),  # only tool results
    ],
)
def test_trim_tool_outputs(history: list[Message], keep: int, trimmed: list[str]) -> None:
    out = trim_tool_outputs(history, 40, keep)
    assert len(out) == len(history) and paired(out)
    for before, after in zip(history, out, strict=True):
        if after.role == "tool" and after.tool_call_id in trimmed:
            assert after.text.startswith(before.text[:40])
            assert (
                after.text[40:]
                == f"\n[tool output trimmed: 40 of {len(before.text)} characters kept]"
            )
        else:
            assert after == before
    assert trim_tool_outputs(out, 40, keep) == out  # twice changes nothing


def _count(messages: Sequence[Message]) -> int:
    return len(messages)


@pytest.mark.parametrize(
    ("history", "limit", "expected"),
    [
        (LONG, 100, shape(LONG)),
        (LONG, 6, ["C:2,3", "T:2", "T:3", "A:thinking", "C:4", "T:4"]),
        (LONG, 3, ["A:thinking", "C:4", "T:4"]),
        (LONG, 1, ["C:4", "T:4"]),  # the newest block always stays
        ([S("rules"), *LONG], 3, ["S:rules", "C:4", "T:4"]),
        ([U("a"), C("1"), T("1"), C("2")], 1, ["C:2"]),
    ],
)
def test_trim_oldest(history: list[Message], limit: int, expected: list[str]) -> None:
    out = trim_oldest(history, limit, _count)
    assert shape(out) == expected
    assert paired(out) or out[-1].tool_calls


def test_trim_oldest_keeps_an_unanswered_batch_and_what_follows() -> None:
    history = [U("a"), C("1", "2"), T("1"), U("b"), C("3"), T("3")]
    assert shape(trim_oldest(history, 1, _count)) == shape(history[1:])


def test_handoff_boundary_stays_whole() -> None:
    handoff = Message("assistant", None, tool_calls=[ToolCall("h", "transfer_to_b", "{}")])
    history = [U("task"), C("1"), T("1"), handoff, T("h", "Transferred to b"), A("hello")]
    for keep in range(4):
        split = split_for_summary(history, keep)
        if split is not None:
            assert paired(split[2])
            assert not split[2] or split[2][0].role != "tool"
    out = trim_oldest(history, 3, _count)
    assert shape(out) == ["C:h", "T:h", "A:hello"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Compaction(0), "trigger_tokens must be an int >= 1"),
        (lambda: Compaction(10, keep_last_turns=-1), "keep_last_turns must be an int >= 0"),
        (lambda: Compaction(10, instructions=3), "instructions must be a str"),
        (lambda: TrimToolOutputs(-1), "max_chars must be an int >= 0"),
        (lambda: TrimToolOutputs(10, keep_last_turns=True), "keep_last_turns must be an int"),
        (lambda: TrimOldest("10"), "max_tokens must be an int >= 1"),
        (lambda: check_policy("agent 'a'", "summarize"), "compaction must be Compaction"),
    ],
)
def test_bad_policies_are_refused(build: object, message: str) -> None:
    with pytest.raises(UserError, match=message):
        build()  # type: ignore[operator]


def _m(*texts: str) -> list[Message]:
    return [Message("user", t) for t in texts]


@pytest.mark.parametrize(
    ("old", "new", "loaded", "before", "span"),
    [
        # a summary of the first 3 of 4 loaded messages
        (_m("h0", "h1", "h2", "h3", "r0"), _m("S", "h3", "r0"), 4, (0, 0), (3, 1)),
        # a summary of all that was loaded and of the run's first message
        (_m("h0", "h1", "r0", "r1"), _m("S", "r1"), 2, (0, 0), (2, 1)),
        # a second summary, of the first one and one more loaded message
        (_m("S", "h3", "h4", "r0"), _m("T", "h4", "r0"), 5, (3, 1), (4, 1)),
        # a trim inside what earlier summaries stand for only
        (_m("S", "U", "h3", "r0"), _m("S2", "U", "h3", "r0"), 4, (2, 2), (2, 2)),
        # a trimmed loaded tool result (the same count of messages)
        (_m("h0", "h1", "h2", "r0"), _m("h0", "h1*", "h2", "r0"), 3, (0, 0), (2, 2)),
        # a run that loaded nothing: its own messages summarised
        (_m("r0", "r1", "r2"), _m("S", "r2"), 0, (0, 0), (0, 1)),
    ],
)
def test_summary_span_says_what_the_summary_stands_for_in_the_session(
    old: list[Message],
    new: list[Message],
    loaded: int,
    before: tuple[int, int],
    span: tuple[int, int],
) -> None:
    assert summary_span(old, new, loaded, before) == span
