"""A tool batch's journal records keep the run context as the agent actor holds it, so a
recovery that does not run a journaled call again still has what it wrote in the actor."""

from __future__ import annotations

import threading
from typing import Any

from raygents.core.contextdata import store
from raygents.core.envelope import RunState
from raygents.runtime.actor.journal import Journal


def _journal(state: RunState, live: Any) -> Journal:
    return Journal(writer=None, state=state, emit=lambda e: None, calls=2, live=lambda: live)  # type: ignore[arg-type]


def test_a_journal_record_keeps_the_actors_writes() -> None:
    state = RunState(run_id="r", agent_name="a", context=store({"n": 1}))
    recorded = _journal(state, {"n": 2, "local": "tool"})._context(state)
    assert recorded.context is not None and recorded.context.data == {"n": 2, "local": "tool"}
    same = _journal(state, {"n": 1})._context(state)
    assert same is state, "nothing written: the same state"


def test_no_durable_context_nothing_to_keep() -> None:
    state = RunState(run_id="r", agent_name="a")
    assert _journal(state, {"anything": 1})._context(state) is state


def test_a_context_that_is_no_longer_plain_data_is_left_to_the_batchs_end() -> None:
    state = RunState(run_id="r", agent_name="a", context=store({"n": 1}))
    assert _journal(state, {"n": threading.Lock()})._context(state) is state
