"""Compaction on Ray: a long run whose model refuses requests over its window completes with a
policy and fails without one; compactions are checkpoints, and their summaries are marked."""

from __future__ import annotations

import re

import pytest

import raygents as rg
from raygents.core.compaction import SUMMARY_INSTRUCTIONS
from raygents.models.tokens import estimate

pytestmark = pytest.mark.usefixtures("rt")

WINDOW = 3000
"""The fake model's context window (tokens, as :func:`estimate` counts them)."""
PAD = "data " * 40  # a tool result of about 50 tokens


@rg.tool(remote=False)
def step(n: int) -> str:
    """Do step n."""
    return f"step {n} done {PAD}"


class WindowModel:
    """A scripted model with a fake window: it refuses a request over ``WINDOW`` tokens (as a
    provider does), answers a summary request with a short summary, and otherwise calls
    ``step`` with the number after the last step done, until ``turns`` steps are done. Its
    usage reports the request's true size, so the run's counts are corrected by it."""

    def __init__(self, turns: int, window: int = WINDOW) -> None:
        self.turns = turns
        self.window = window

    async def respond(self, request: rg.ModelRequest) -> rg.ModelResponse:
        size = estimate(request.messages, request.system, request.tools)
        if size > self.window:
            raise RuntimeError(f"context_length_exceeded: {size} tokens > {self.window}")
        usage = rg.Usage(size, 10)
        if request.system == SUMMARY_INSTRUCTIONS:
            last = _last_step(request.messages[0].text)
            return rg.ModelResponse(rg.Message("assistant", f"steps 0..{last} done"), usage=usage)
        done = max((_last_step(m.text) for m in request.messages), default=-1)
        if done + 1 >= self.turns:
            return rg.ModelResponse(rg.Message("assistant", f"finished {done + 1}"), usage=usage)
        call = rg.ToolCall(f"s{done + 1}", "step", f'{{"n": {done + 1}}}')
        message = rg.Message("assistant", None, tool_calls=[call])
        return rg.ModelResponse(message, "tool_calls", usage)


def _last_step(text: str) -> int:
    """The highest step a text says is done (``step N done`` or ``steps 0..N done``)."""
    return max((int(n) for n in re.findall(r"steps? (?:0\.\.)?(\d+) done", text)), default=-1)


def _agent(name: str, turns: int, compaction: object) -> rg.Agent:
    return rg.Agent(
        name,
        tools=[step],
        model=WindowModel(turns),
        max_turns=turns + 10,
        compaction=compaction,  # type: ignore[arg-type]
    )


def test_a_300_turn_run_fails_without_compaction() -> None:
    agent = _agent("long_plain", 300, None)
    with pytest.raises(rg.ModelError, match="context_length_exceeded"):
        rg.run(agent, "go", timeout_s=120)


def test_a_300_turn_run_completes_with_compaction() -> None:
    agent = _agent("long_compacted", 300, rg.Compaction(2000, keep_last_turns=4))
    handle = rg.start(agent, "go")
    result = handle.result(timeout_s=180)
    assert result.final_output == "finished 300"
    events = list(handle.events())
    compactions = [e for e in events if e.type == "compacted"]
    assert len(compactions) >= 5
    for event in compactions:
        data = event.data or {}
        assert data["policy"] == "Compaction"
        assert data["tokens_before"] > 2000 > data["tokens_after"]
        assert data["summarized"] > 0
    # the summary is marked in the result, and the last turns are verbatim
    summaries = [m for m in result.messages if m.summary]
    assert len(summaries) == 1 and result.messages[0].summary
    assert "steps 0.." in summaries[0].text
    assert result.messages[-1].text == "finished 300"
    # the summariser's calls count in the run's usage: 300 turns, 1 answer, the summaries
    assert result.usage.requests == 301 + len(compactions)


@pytest.mark.parametrize(
    "policy", [rg.TrimOldest(2000), rg.TrimToolOutputs(20, keep_last_turns=2)], ids=repr
)
def test_trimming_policies_keep_a_long_run_within_the_window(policy: object) -> None:
    agent = _agent(f"long_{type(policy).__name__.lower()}", 80, policy)
    handle = rg.start(agent, "go")
    result = handle.result(timeout_s=120)
    assert result.final_output == "finished 80"  # (some 4800 tokens untrimmed)
    assert any(e.type == "compacted" for e in handle.events())
    assert not any(m.summary for m in result.messages)


def test_a_compaction_is_a_checkpoint_of_its_own() -> None:
    agent = _agent("compacted_record", 80, rg.Compaction(2000, keep_last_turns=2))
    handle = rg.start(agent, "go")
    handle.result(timeout_s=120)
    events = list(handle.events())
    kinds = [e.type for e in events]
    first = kinds.index("compacted")
    assert kinds[first - 1] == "checkpoint"  # its record is written before the event


class ChatModel:
    """Answers each message of a thread (``WINDOW`` applies, as for :class:`WindowModel`)."""

    async def respond(self, request: rg.ModelRequest) -> rg.ModelResponse:
        size = estimate(request.messages, request.system, request.tools)
        if size > WINDOW:
            raise RuntimeError(f"context_length_exceeded: {size} tokens > {WINDOW}")
        if request.system == SUMMARY_INSTRUCTIONS:
            return rg.ModelResponse(rg.Message("assistant", "the thread so far"))
        return rg.ModelResponse(rg.Message("assistant", f"ack {request.messages[-1].text}"))


@pytest.mark.timeout(300)
def test_a_thread_of_200_runs_stays_within_the_window() -> None:
    """A session's history is compacted by the run that finds it over the trigger, and saved
    compacted: each run of the thread then starts from a short history."""
    session = rg.MemorySession()
    agent = rg.Agent(
        "thread_keeper",
        model=ChatModel(),
        session=session,
        compaction=rg.Compaction(2000, keep_last_turns=2),
    )
    compactions = 0
    for i in range(200):
        handle = rg.start(agent, f"message {i} {PAD}", session_id="thread")
        assert handle.result(timeout_s=60).final_output.startswith(f"ack message {i}")
        compactions += sum(1 for e in handle.events() if e.type == "compacted")
    assert compactions >= 10
    history = session.load("thread")  # saved compacted, the summary marked
    assert sum(m.summary for m in history) == 1 and history[0].summary
    assert estimate(history) < 2000 + 200


class Summariser:
    """A separate summariser model: says which system prompt it was given."""

    async def respond(self, request: rg.ModelRequest) -> rg.ModelResponse:
        return rg.ModelResponse(rg.Message("assistant", f"steps 0..0 done ({request.system})"))


@pytest.mark.parametrize("kind", ["model", "agent"])
def test_the_summariser_may_be_another_model_or_agent(kind: str) -> None:
    summarizer: object = Summariser()
    if kind == "agent":
        summarizer = rg.Agent("terse", "Summarise tersely.", model=Summariser())
    policy = rg.Compaction(2000, keep_last_turns=2, summarizer=summarizer, instructions="Short.")
    agent = _agent(f"summarised_by_{kind}", 60, policy)
    result = rg.run(agent, "go", timeout_s=120)
    summary = next(m for m in result.messages if m.summary)
    expected = "Summarise tersely." if kind == "agent" else "Short."
    assert summary.text.endswith(f"({expected})")  # the agent's own instructions win


def test_compaction_without_trigger_uses_the_window() -> None:
    with pytest.raises(rg.UserError, match="needs the model's context window"):
        _agent("windowless", 5, rg.Compaction())  # a Model object: no name to look up
    agent = rg.Agent(
        "windowed",
        tools=[step],
        model=WindowModel(60),
        max_turns=70,
        context_window=2500,
        compaction=rg.Compaction(keep_last_turns=2),
    )
    handle = rg.start(agent, "go")
    assert handle.result(timeout_s=120).final_output == "finished 60"
    triggered = [(e.data or {})["tokens_before"] for e in handle.events() if e.type == "compacted"]
    assert triggered and all(t > 2000 for t in triggered)  # 80% of the window


class CostlySummariser:
    """A summariser whose call takes a large part of a token budget."""

    async def respond(self, request: rg.ModelRequest) -> rg.ModelResponse:
        return rg.ModelResponse(rg.Message("assistant", "steps 0..0 done"), usage=rg.Usage(10**6))


class NoCallAfterSummary(WindowModel):
    async def respond(self, request: rg.ModelRequest) -> rg.ModelResponse:
        if any(m.summary for m in request.messages):
            raise RuntimeError("called after the budget was spent")
        return await super().respond(request)


def test_the_summarisers_usage_is_spent_from_the_runs_token_budget() -> None:
    agent = rg.Agent(
        "costly_summary",
        tools=[step],
        model=NoCallAfterSummary(60),
        max_turns=70,
        compaction=rg.Compaction(2000, summarizer=CostlySummariser()),
    )
    with pytest.raises(rg.UsageLimitExceeded) as info:
        rg.run(agent, "go", max_tokens=500_000, timeout_s=120)
    assert info.value.used is not None and info.value.used > 10**6  # stopped before the call


DOLLAR = rg.Price(input_per_mtok=1000.0, output_per_mtok=0.0)  # 1,000 input tokens: $1


class DollarSummariser:
    """A summariser whose every call reads 1,000 tokens: $1 at :data:`DOLLAR`."""

    async def respond(self, request: rg.ModelRequest) -> rg.ModelResponse:
        return rg.ModelResponse(rg.Message("assistant", "steps 0..0 done"), usage=rg.Usage(1000))


def test_the_summarisers_cost_counts_in_the_runs_cost() -> None:
    """The agent's own model summarises, at the agent's price: every call of the run, the
    summaries included, is priced alike."""
    price = rg.Price(input_per_mtok=2.0, output_per_mtok=10.0)
    agent = rg.Agent(
        "priced_summary",
        tools=[step],
        model=WindowModel(60),
        max_turns=70,
        model_settings=rg.ModelSettings(price=price),
        compaction=rg.Compaction(2000, keep_last_turns=2),
    )
    handle = rg.start(agent, "go")
    usage = handle.result(timeout_s=120).usage
    assert any(e.type == "compacted" for e in handle.events())
    expected = (usage.input_tokens * 2.0 + usage.output_tokens * 10.0) / 1e6
    assert usage.cost_usd == pytest.approx(expected)


def test_a_summary_that_reaches_the_runs_dollar_budget_stops_it_before_its_next_call() -> None:
    agent = rg.Agent(
        "dollar_summary",
        tools=[step],
        model=NoCallAfterSummary(60),
        max_turns=70,
        model_settings=rg.ModelSettings(price=rg.Price(input_per_mtok=0.0, output_per_mtok=0.0)),
        compaction=rg.Compaction(
            2000,
            summarizer=rg.Agent(
                "dollar_summariser",
                model=DollarSummariser(),
                model_settings=rg.ModelSettings(price=DOLLAR),
            ),
        ),
    )
    with pytest.raises(rg.UsageLimitExceeded) as info:
        rg.run(agent, "go", max_cost_usd=0.5, timeout_s=120)
    assert info.value.limit == "max_cost_usd"
    assert info.value.used == pytest.approx(1.0)  # the summary's dollar, and nothing after it


def test_a_dollar_budget_refuses_a_summariser_without_a_price() -> None:
    agent = rg.Agent(
        "unpriced_summary",
        tools=[step],
        model=NoCallAfterSummary(60),
        max_turns=70,
        model_settings=rg.ModelSettings(price=rg.Price(input_per_mtok=0.0, output_per_mtok=0.0)),
        compaction=rg.Compaction(2000, summarizer=DollarSummariser()),
    )
    with pytest.raises(rg.UserError, match=r"max_cost_usd.*no price"):
        rg.run(agent, "go", max_cost_usd=5.0, timeout_s=120)
