"""Compaction policies and the pure functions that shorten a history under them.

A history (a run's messages, the system prompt aside) is cut only between *blocks*: a block is
one message, or an assistant message that calls tools together with the tool messages that
answer it. So a tool call is never parted from its result, and what follows a cut is never a
tool message without its call (the handoff to the next agent, a call and its ``"Transferred
to ..."`` result, stays whole). ``system`` messages of the history are never dropped, and a
block whose calls are not all answered yet (a batch that waits for an approval) is never
shortened. A *turn* is a block that starts with an assistant message (one model call).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from raygents.core.messages import Message, ModelRequest
from raygents.core.parts import TextPart
from raygents.errors import UserError

__all__ = [
    "SUMMARY_INSTRUCTIONS",
    "SUMMARY_PREFIX",
    "Compaction",
    "CompactionPolicy",
    "Counter",
    "TrimOldest",
    "TrimToolOutputs",
    "blocks",
    "check_policy",
    "compacted",
    "split_for_summary",
    "summary_request",
    "summary_span",
    "transcript",
    "trim_oldest",
    "trim_tool_outputs",
]

SUMMARY_INSTRUCTIONS = (
    "You compact the history of a conversation between a user, an assistant and its tools. "
    "Write a concise summary that keeps every fact, decision, open task, identifier, number "
    "and tool result the assistant may still need to go on, and drops chatter. Write the "
    "summary only, in the third person, with no preamble."
)
"""What the summariser is told unless ``Compaction(instructions=)`` says otherwise."""
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
"""How the summary message begins (the model reads it as the history it stands for)."""
_TRIMMED = "\n[tool output trimmed: {kept} of {total} characters kept]"
_STUB = re.compile(r"\n\[tool output trimmed: \d+ of \d+ characters kept\]\Z")

Counter = Callable[[Sequence[Message]], int]
"""The tokens a list of messages takes in a request."""


@dataclass(frozen=True)
class Compaction:
    """Summarise the older history once a request would take more than ``trigger_tokens``.

    Args:
        trigger_tokens: the request size (input tokens) that triggers a summary; ``None``:
            80% of the agent's ``context_window`` (which must then be known).
        keep_last_turns: the newest turns (model calls, with their tool results) kept verbatim.
        summarizer: the ``Agent`` (its model, instructions and model settings) or ``Model``
            that writes the summary; ``None``: the agent's own model.
        instructions: what the summariser is told (default :data:`SUMMARY_INSTRUCTIONS`;
            an ``Agent`` summariser's own instructions win where it has some).
    """

    trigger_tokens: int | None = None
    keep_last_turns: int = 4
    summarizer: Any = None
    instructions: str | None = None

    def __post_init__(self) -> None:
        _check_int("Compaction", "trigger_tokens", self.trigger_tokens, 1, optional=True)
        _check_int("Compaction", "keep_last_turns", self.keep_last_turns, 0)
        if not (self.instructions is None or isinstance(self.instructions, str)):
            raise UserError(
                f"Compaction: instructions must be a str or None, got {self.instructions!r:.80}"
            )


@dataclass(frozen=True)
class TrimToolOutputs:
    """Cut the results of old tool calls to ``max_chars`` characters, with a stub that says so;
    the tool results of the last ``keep_last_turns`` turns stay whole."""

    max_chars: int
    keep_last_turns: int = 2

    def __post_init__(self) -> None:
        _check_int("TrimToolOutputs", "max_chars", self.max_chars, 0)
        _check_int("TrimToolOutputs", "keep_last_turns", self.keep_last_turns, 0)


@dataclass(frozen=True)
class TrimOldest:
    """Drop the oldest turns (and the user messages between them) while a request would take
    more than ``max_tokens``; the newest block always stays."""

    max_tokens: int

    def __post_init__(self) -> None:
        _check_int("TrimOldest", "max_tokens", self.max_tokens, 1)


CompactionPolicy = Compaction | TrimToolOutputs | TrimOldest


def check_policy(owner: str, policy: Any) -> None:
    """Refuse anything but a policy (or None) as ``compaction=``."""
    if not (policy is None or isinstance(policy, Compaction | TrimToolOutputs | TrimOldest)):
        raise UserError(
            f"{owner}: compaction must be Compaction(...), TrimToolOutputs(...), TrimOldest(...) "
            f"or None, got {type(policy).__name__!r}"
        )


def _check_int(owner: str, name: str, value: Any, low: int, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise UserError(f"{owner}: {name} must be an int >= {low}, got {value!r:.80}")


def blocks(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """The ``(start, end)`` spans of the history's blocks, in order (see the module's
    docstring): tool messages join the block of the assistant message before them."""
    spans: list[tuple[int, int]] = []
    for i, message in enumerate(messages):
        if message.role == "tool" and spans:
            spans[-1] = (spans[-1][0], i + 1)
        else:
            spans.append((i, i + 1))
    return spans


def _answered(messages: Sequence[Message], span: tuple[int, int]) -> bool:
    """Whether every call of the block's assistant message has its result in the block."""
    first = messages[span[0]]
    ids = {m.tool_call_id for m in messages[span[0] + 1 : span[1]]}
    return all(c.id in ids for c in first.tool_calls)


def _turn_starts(messages: Sequence[Message], spans: Sequence[tuple[int, int]]) -> list[int]:
    """The indexes (into ``spans``) of the blocks that are turns."""
    return [i for i, (start, _) in enumerate(spans) if messages[start].role == "assistant"]


def _kept_from(messages: Sequence[Message], keep_last_turns: int) -> int:
    """The index of the first message of the part kept verbatim: the last ``keep_last_turns``
    turns, what follows them, and any block from the first one not fully answered."""
    spans = blocks(messages)
    turns = _turn_starts(messages, spans)
    cut = len(spans) if keep_last_turns == 0 else 0
    if 0 < keep_last_turns <= len(turns):
        cut = turns[-keep_last_turns]
    open_block = next((i for i, s in enumerate(spans) if not _answered(messages, s)), None)
    if open_block is not None:
        cut = min(cut, open_block)
    return spans[cut][0] if cut < len(spans) else len(messages)


def trim_tool_outputs(
    messages: Sequence[Message], max_chars: int, keep_last_turns: int = 2
) -> tuple[Message, ...]:
    """The history with each tool result older than the last ``keep_last_turns`` turns cut to
    its first ``max_chars`` characters and a stub that says so (a result cut once is not cut
    again)."""
    start = _kept_from(messages, keep_last_turns)
    out = list(messages)
    for i in range(start):
        message = messages[i]
        text = message.text
        if message.role != "tool" or len(text) <= max_chars or _STUB.search(text):
            continue
        stub = _TRIMMED.format(kept=max_chars, total=len(text))
        cut = text[:max_chars] + stub
        others = tuple(p for p in message.parts if p.kind != "text")  # (images stay)
        parts = (TextPart(cut), *others) if others else ()
        out[i] = message.model_copy(update={"content": cut, "parts": parts})
    return tuple(out)


def trim_oldest(
    messages: Sequence[Message], max_tokens: int, count: Counter
) -> tuple[Message, ...]:
    """The history without its oldest blocks, as many as it takes for ``count`` to be at most
    ``max_tokens`` (``system`` messages and the newest block always stay, as do blocks from
    the first one not fully answered)."""
    spans = blocks(messages)
    limit = _kept_from(messages, 1)
    dropped: set[int] = set()
    current = tuple(messages)
    for index, (start, _) in enumerate(spans):
        if count(current) <= max_tokens or start >= limit or index == len(spans) - 1:
            break
        if messages[start].role == "system":
            continue
        dropped.add(index)
        current = tuple(
            m for i, (s, e) in enumerate(spans) if i not in dropped for m in messages[s:e]
        )
    return current


def split_for_summary(
    messages: Sequence[Message], keep_last_turns: int
) -> tuple[tuple[Message, ...], tuple[Message, ...], tuple[Message, ...]] | None:
    """The history as ``(system, older, kept)``: the ``system`` messages of the part to
    summarise, the rest of it, and the part kept verbatim; None when nothing would be
    summarised (no older part, or only one earlier summary)."""
    start = _kept_from(messages, keep_last_turns)
    head = messages[:start]
    system = tuple(m for m in head if m.role == "system")
    older = tuple(m for m in head if m.role != "system")
    if not older or (len(older) == 1 and older[0].summary):
        return None
    return system, older, tuple(messages[start:])


def transcript(messages: Sequence[Message]) -> str:
    """The messages as a plain-text transcript, for the summariser to read."""
    lines = []
    for message in messages:
        if message.summary:
            lines.append(f"[earlier summary]\n{message.text.removeprefix(SUMMARY_PREFIX)}")
            continue
        if message.role == "tool":
            lines.append(f"[tool result {message.tool_call_id}]\n{message.text}")
            continue
        if message.text:
            lines.append(f"[{message.role}]\n{message.text}")
        for call in message.tool_calls:
            lines.append(f"[{message.role} calls {call.name} ({call.id})] {call.arguments}")
    return "\n\n".join(lines)


def summary_request(
    agent_name: str, older: Sequence[Message], instructions: str | None
) -> ModelRequest:
    """The request that asks the summariser for a summary of ``older``."""
    text = "Summarise this conversation history:\n\n" + transcript(older)
    return ModelRequest(
        agent_name=agent_name,
        system=instructions or SUMMARY_INSTRUCTIONS,
        messages=(Message("user", text),),
    )


def compacted(
    system: Sequence[Message], summary: str, kept: Sequence[Message]
) -> tuple[Message, ...]:
    """The compacted history: the ``system`` messages, the summary as one user message
    (marked ``summary=True``), then the part kept verbatim."""
    note = Message("user", SUMMARY_PREFIX + summary.strip(), summary=True)
    return (*system, note, *kept)


def summary_span(
    old: Sequence[Message], new: Sequence[Message], loaded: int, before: tuple[int, int]
) -> tuple[int, int]:
    """Where a compaction leaves the history a run loaded from its session.

    ``old`` begins with ``before[1]`` messages standing for the first ``before[0]`` of the
    ``loaded`` messages loaded (``(0, 0)``: none), then the rest of those verbatim, then the
    run's own; ``new`` is ``old`` with a prefix replaced (every policy replaces one). The
    answer is the same pair for ``new``: ``(upto, summary_len)``, ``upto`` at most
    ``loaded`` (a summary of the run's own messages too stands for all that it loaded).
    """
    upto, length = before
    same = 0
    for a, b in zip(reversed(old), reversed(new), strict=False):
        if a != b:
            break
        same += 1
    cut, made = len(old) - same, len(new) - same  # new == new[:made] + old[cut:]
    if cut <= length:  # only messages that stood for earlier ones were replaced
        return upto, made + length - cut
    return min(loaded, upto + cut - length), made
