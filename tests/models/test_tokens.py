"""Token counts before a call: the model's own count, else an estimate, corrected by what the
provider reported for the run's last call; the context windows of known model names."""

from __future__ import annotations

import pytest

import raygents as rg
from raygents.core import loop
from raygents.core.envelope import RunState
from raygents.core.messages import Message, ModelRequest, ModelResponse, ToolSpec, Usage
from raygents.errors import UserError
from raygents.models import tokens


@pytest.mark.parametrize(
    ("name", "window"),
    [
        ("gpt-4o-mini", 128_000),
        ("gpt-4o-2024-08-06", 128_000),
        ("openai/gpt-4.1-mini", 1_047_576),
        ("gpt-4", 8_192),
        ("claude-3-5-sonnet-latest", 200_000),
        ("o3-mini", 200_000),
        ("my-local-model", None),
        (None, None),
    ],
)
def test_known_context_windows(name: str | None, window: int | None) -> None:
    assert tokens.context_window(name) == window


def test_the_estimate_counts_text_calls_tools_and_messages() -> None:
    call = rg.ToolCall("1", "lookup", '{"q": "x"}')
    messages = [Message("user", "a" * 40), Message("assistant", None, tool_calls=[call])]
    spec = ToolSpec(name="lookup", parameters={"type": "object"})
    plain = tokens.estimate(messages)
    assert plain == (40 + 6 + 10) // 4 + 2 * 4
    assert tokens.estimate(messages, "s" * 8) == (40 + 16 + 8) // 4 + 3 * 4
    assert tokens.estimate(messages, tools=[spec]) > plain


class Counting:
    """A model with its own count."""

    def count_tokens(self, request: ModelRequest) -> int:
        return 7 * len(request.messages)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("not called")


def test_a_models_own_count_wins() -> None:
    request = ModelRequest(agent_name="a", messages=(Message("user", "hi"),) * 3)
    assert tokens.counter(Counting(), "gpt-4o")(request) == 21


def test_without_a_tokenizer_the_estimate_counts() -> None:
    request = ModelRequest(agent_name="a", messages=(Message("user", "x" * 400),))
    count = tokens.counter(object(), "no-such-model")
    assert count(request) == tokens.estimate(request.messages)


def test_the_providers_count_corrects_the_next_estimate() -> None:
    """After a call the run knows what the provider counted: the next request is that plus
    the estimate of the messages added since, not an estimate of the whole history."""
    view = loop.AgentView(name="a")
    state = RunState(run_id="r", agent_name="a", messages=(Message("user", "x" * 4000),))
    reply = ModelResponse(Message("assistant", "y" * 40), usage=Usage(input_tokens=1500))
    state, _ = loop.on_response(state, view, reply)
    assert (state.prompt_tokens, state.prompt_len) == (1500, 1)
    request = loop.build_request(state, view)
    count = tokens.counter(object(), None)
    observed = (state.prompt_tokens, state.prompt_len)
    assert count(request) == 1000 + 10 + 8  # the estimate alone
    assert tokens.request_tokens(count, request, observed) == 1500 + 10 + 4
    # a provider that reports nothing leaves the estimate as it is
    silent = ModelResponse(Message("assistant", "z"), usage=Usage())
    state, _ = loop.on_response(state, view, silent)
    assert state.prompt_tokens is None
    # a handoff's new system prompt: the count starts over
    handed = loop.apply_handoff(state.evolve(prompt_tokens=5, prompt_len=1), "b")
    assert handed.prompt_tokens is None


def test_a_shorter_history_than_the_observed_one_is_counted_afresh() -> None:
    request = ModelRequest(agent_name="a", messages=(Message("user", "x" * 40),))
    count = tokens.counter(object(), None)
    assert tokens.request_tokens(count, request, (999, 5)) == count(request)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"context_window": 0}, "context_window must be an int >= 1"),
        ({"compaction": "yes"}, "compaction must be Compaction"),
        (
            {"model": "my-local-model", "compaction": rg.Compaction()},
            "needs the model's context window",
        ),
        (
            {"model": "gpt-4", "compaction": rg.Compaction(10_000)},
            "over the model's context window",
        ),
        (
            {"model": "gpt-4o", "compaction": rg.Compaction(1000, summarizer="cheap")},
            r"summarizer=\) must be an Agent, a Model",
        ),
    ],
)
def test_agent_context_options_are_checked(options: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        rg.Agent("a", **options)  # type: ignore[arg-type]


def test_agent_window_defaults_to_the_known_one() -> None:
    assert rg.Agent("a", model="gpt-4o-mini").window() == 128_000
    assert rg.Agent("a", model="my-local-model", context_window=4096).window() == 4096
    assert rg.Agent("a", model="x", context_window=8000, compaction=rg.Compaction()).window()
