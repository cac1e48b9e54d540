"""The agent actor's compactor, without Ray: when each policy acts, what it records, and the
record a compacted history gets."""

from __future__ import annotations

import asyncio

import pytest

import raygents as rg
from raygents.core import loop
from raygents.core.envelope import RunState
from raygents.core.messages import Message, ModelRequest, ModelResponse, ToolCall, Usage
from raygents.records import checkpoint
from raygents.runtime.actor.compactor import Compactor, rewrite
from raygents.runtime.link.settings import Settings


class Fixed:
    """Summarises with a fixed text and a known usage; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        return ModelResponse(Message("assistant", "gist"), usage=Usage(70, 7))


def history(turns: int, size: int = 400) -> tuple[Message, ...]:
    out: list[Message] = [Message("user", "task")]
    for i in range(turns):
        out.append(Message("assistant", None, tool_calls=[ToolCall(f"c{i}", "f", "{}")]))
        out.append(Message("tool", f"result {i} " + "x" * size, tool_call_id=f"c{i}"))
    return tuple(out)


def compact(
    agent: rg.Agent, model: object, messages: tuple[Message, ...]
) -> tuple[RunState, object]:
    state = RunState(run_id="r", agent_name=agent.name, messages=messages, recorded=len(messages))
    request = loop.build_request(state, loop.AgentView(name=agent.name))
    compactor = Compactor(agent, lambda: model, "test", Settings)
    return asyncio.run(compactor.compact(state, request))


def test_no_policy_does_nothing() -> None:
    state, done = compact(rg.Agent("a", model=Fixed()), Fixed(), history(50))
    assert done is None and state.messages == history(50)


@pytest.mark.parametrize(("turns", "acts"), [(5, False), (20, True)])
def test_compaction_acts_over_its_trigger_only(turns: int, acts: bool) -> None:
    model = Fixed()
    agent = rg.Agent("a", model=model, compaction=rg.Compaction(1000, keep_last_turns=2))
    state, done = compact(agent, model, history(turns))
    assert (done is not None) == acts and model.calls == int(acts)
    if done is None:
        return
    assert done.policy == "Compaction"  # type: ignore[attr-defined]
    assert done.summarized == 1 + 2 * (turns - 2)  # type: ignore[attr-defined]
    assert done.tokens_before > 1000 > done.tokens_after  # type: ignore[attr-defined]
    assert [m.summary for m in state.messages] == [True, False, False, False, False]
    assert state.usage == Usage(70, 7, requests=1)  # the summariser's call is the run's
    assert (state.rewritten, state.prompt_tokens, state.recorded) == (True, None, 0)
    _, record = checkpoint.make_record(state, "running")
    assert record["kind"] == "full"


def test_trimmed_tool_outputs_are_recorded_as_a_delta_from_the_first_change() -> None:
    agent = rg.Agent("a", model=Fixed(), compaction=rg.TrimToolOutputs(50, keep_last_turns=2))
    messages = history(20, size=2000)
    state, done = compact(agent, Fixed(), messages)
    assert done is not None
    assert state.recorded == 2  # the first tool result is the first message that changed
    _, record = checkpoint.make_record(state.evolve(full_size=10**6), "running")
    assert (record["kind"], record["keep"]) == ("delta", 2)
    replayed, _ = checkpoint.replay(
        [
            checkpoint.make_record(
                RunState(run_id="r", agent_name="a", messages=messages), "running"
            )[1],
            {**record, "seq": 2},
        ]
    )
    assert replayed.messages == state.messages
    # trimming again changes nothing: no record, no event
    again, done = compact(agent, Fixed(), state.messages)
    assert done is None and again.messages == state.messages


def test_trim_oldest_acts_over_its_limit_only() -> None:
    agent = rg.Agent("a", model=Fixed(), compaction=rg.TrimOldest(2000))
    state, done = compact(agent, Fixed(), history(4))
    assert done is None
    state, done = compact(agent, Fixed(), history(40))
    assert done is not None and done.tokens_after <= 2000  # type: ignore[attr-defined]
    assert state.messages[-2:] == history(40)[-2:]


def test_rewrite_keeps_the_unchanged_prefix_recorded() -> None:
    messages = history(3)
    state = RunState(run_id="r", agent_name="a", messages=messages, recorded=len(messages))
    assert rewrite(state, messages[:4]).recorded == 4
    assert rewrite(state, (Message("user", "other"), *messages[1:])).recorded == 0


def test_a_compaction_says_what_its_summary_stands_for_in_the_session() -> None:
    model = Fixed()
    agent = rg.Agent("a", model=model, compaction=rg.Compaction(1000, keep_last_turns=2))
    messages = history(20)
    state = RunState(run_id="r", agent_name="a", messages=messages, input_len=31, loaded_len=30)
    request = loop.build_request(state, loop.AgentView(name="a"))
    compactor = Compactor(agent, lambda: model, "test", Settings)
    compacted, done = asyncio.run(compactor.compact(state, request))
    assert done is not None
    # the summary stands for the first 37 messages: all 30 loaded ones, and 7 of the run's
    assert compacted.session_summary == (30, 1)
    assert compacted.messages[1:] == messages[37:]
    filtered = state.evolve(rewritten=True)  # an input filter rewrote the history first
    again, _ = asyncio.run(compactor.compact(filtered, request))
    assert again.rewritten and again.session_summary is None  # the session is replaced


def test_a_compaction_of_part_of_the_loaded_history() -> None:
    before = history(20)
    after = (Message("user", "summary", summary=True), *before[21:])
    state = RunState(run_id="r", agent_name="a", messages=before, loaded_len=30)
    assert rewrite(state, after).session_summary == (21, 1)
    no_session = RunState(run_id="r", agent_name="a", messages=before)
    assert rewrite(no_session, after).session_summary is None
