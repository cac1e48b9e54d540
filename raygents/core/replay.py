"""Replay: the turn logic re-driven over a run's recorded conversation with (possibly new)
agent views, calling no model and no tool, to find the first decision it makes differently.

The recording is the run's messages: each assistant message is the model's reply of one turn,
each tool message a call's result. The loop is fed those replies and results in order; after
each step, the conversation it built must be the recording's so far, and each call it now
answers without running (a rejection, a handoff, a skip) must have been answered so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from typing_extensions import assert_never

from raygents.core import loop
from raygents.core.envelope import RunState
from raygents.core.messages import Message, ModelResponse, ToolCall, ToolResult
from raygents.errors import excerpt

__all__ = ["Outcome", "ReplayReport", "replay"]

Outcome = Literal["completed", "failed", "stopped"]

_QUOTE = 160


@dataclass(frozen=True)
class ReplayReport:
    """Whether an agent graph makes a run's recorded decisions again (see
    :func:`raygents.replay`)."""

    run_id: str
    ok: bool
    """The new code makes every recorded decision again."""
    turn: int | None = None
    """At a divergence: the model turn it happens after (0: before the first reply)."""
    expected: str | None = None
    """At a divergence: what the recording did there."""
    got: str | None = None
    """At a divergence: what the new code does instead."""
    checked: int = 0
    """How many recorded messages the replay went through."""

    def __str__(self) -> str:
        if self.ok:
            return f"{self.run_id}: ok ({self.checked} messages replayed)"
        return (
            f"{self.run_id}: diverges after turn {self.turn}: expected {self.expected}; "
            f"got {self.got}"
        )


def _say(m: Message | None) -> str:
    if m is None:
        return "the end of the recording"
    if m.tool_calls:
        names = ", ".join(c.name for c in m.tool_calls)
        return f"{m.role} message calling {names}"
    return f"{m.role} message {excerpt(' '.join((m.content or '').split()), _QUOTE)!r}"


class _Diverged(Exception):
    def __init__(self, expected: str, got: str) -> None:
        super().__init__(expected)
        self.expected, self.got = expected, got


@dataclass
class _Replay:
    """One replay's cursor over the recording."""

    recording: Sequence[Message]
    views: Mapping[str, loop.AgentView]
    outcome: Outcome
    """How the recorded run stopped where its recording ends."""

    def view(self, name: str) -> loop.AgentView:
        found = self.views.get(name)
        if found is None:
            raise _Diverged(f"agent {name!r}", f"no agent {name!r} in the graph")
        return found

    def check(self, state: RunState) -> None:
        """The conversation so far must be the recording's."""
        ours = state.messages
        for index, message in enumerate(ours):
            theirs = self.recording[index] if index < len(self.recording) else None
            if theirs != message:
                raise _Diverged(_say(theirs), _say(message))

    def reply(self, at: int) -> ModelResponse | None:
        if at >= len(self.recording):
            return None
        message = self.recording[at]
        if message.role != "assistant":
            raise _Diverged(_say(message), "a model call")
        if message.tool_calls:
            return ModelResponse(message, finish_reason="tool_calls")
        return ModelResponse(message, finish_reason="stop")

    def results(self, at: int, batch: loop.RunTools) -> list[ToolResult] | None:
        """The recorded results of ``batch`` from message ``at`` on (None: not recorded)."""
        found: list[ToolResult] = []
        for offset, step in enumerate(batch.steps):
            index = at + offset
            if index >= len(self.recording):
                return None
            recorded = self.recording[index]
            fixed = loop.step_result(step)
            if recorded.role != "tool" or recorded.tool_call_id != step.call.id:
                raise _Diverged(_say(recorded), f"the result of call {step.call.id!r}")
            if fixed is not None and fixed.content != recorded.content:
                raise _Diverged(
                    f"call {_call(step.call)} answered {excerpt(recorded.content or '', _QUOTE)!r}",
                    f"{type(step).__name__.lower()}: {excerpt(fixed.content, _QUOTE)!r}",
                )
            found.append(fixed or ToolResult(recorded.content or ""))
        return found

    def advance(self, state: RunState, view: loop.AgentView, action: loop.Action) -> _Step | None:
        """Feed the loop the recording's answer to ``action``: the next step, or None where
        the replay ends in agreement with the recording."""
        self.check(state)
        at = len(state.messages)
        match action:
            case loop.CallModel():
                response = self.reply(at)
                if response is None:
                    return None
                return _step(loop.on_response(state, view, response), view)
            case loop.RunTools() as batch:
                results = self.results(at, batch)
                if results is None:
                    return None
                if callable(view.tool_use_behavior):
                    view = replace(view, tool_use_behavior=self.decide(at + len(results)))
                return _step(loop.on_results(state, view, batch, results), view)
            case loop.HandoffTo(target=target):
                view = self.view(target)
                state = loop.activate(loop.apply_handoff(state, target), view)
                return _step(loop.next_turn(state, view), view)
            case loop.Finish():
                if at < len(self.recording):
                    raise _Diverged(_say(self.recording[at]), "the run ends")
                return None
            case loop.Fail(error=error):
                if self.outcome == "failed" and at >= len(self.recording):
                    return None  # (the recorded run failed here too)
                expected = _say(self.recording[at] if at < len(self.recording) else None)
                raise _Diverged(expected, f"{type(error).__name__}: {error}")
            case _:
                assert_never(action)

    def decide(self, at: int) -> loop.DecideFinal:
        """A function ``tool_use_behavior`` as the recording decided it: final when the
        recording ends with an assistant message right after the batch's results."""

        def decide(state: RunState, ran: Sequence[tuple[ToolCall, ToolResult]]) -> str | None:
            last = len(self.recording) - 1
            if (
                self.outcome == "completed"
                and at == last
                and self.recording[last].role == "assistant"
            ):
                return self.recording[last].content or ""
            return None

        return decide


def _call(call: ToolCall) -> str:
    return f"{call.name}({call.id})"


def replay(
    start: RunState,
    recording: Sequence[Message],
    views: Mapping[str, loop.AgentView],
    *,
    outcome: Outcome,
) -> ReplayReport:
    """Re-drive the loop from ``start`` (the run's input, on its start agent) over
    ``recording`` (the run's whole conversation) with ``views`` (by agent name).

    ``outcome``: how the run stopped where the recording ends: ``"completed"`` (the replay
    must finish there), ``"failed"`` (a replay that fails there agrees with it; so does one
    that needs more of the recording) or ``"stopped"`` (suspended, awaiting approval,
    cancelled: a replay that needs more of the recording agrees with it so far).
    """
    cursor = _Replay(recording, views, outcome)
    state = start
    try:
        view = cursor.view(state.agent_name)
        state, action = loop.next_turn(loop.activate(state, view), view)
        step: _Step | None = (state, view, action)
        while step is not None:
            state = step[0]
            step = cursor.advance(*step)
    except _Diverged as exc:
        return ReplayReport(
            start.run_id,
            False,
            turn=state.turns,
            expected=exc.expected,
            got=exc.got,
            checked=len(state.messages),
        )
    return ReplayReport(start.run_id, True, checked=len(state.messages))


_Step = tuple[RunState, loop.AgentView, loop.Action]


def _step(moved: tuple[RunState, loop.Action], view: loop.AgentView) -> _Step:
    return moved[0], view, moved[1]
