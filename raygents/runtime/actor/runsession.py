"""A top-level run's session, from its actor: taken and loaded at the start, saved at the end.

Runs on one session are serialised: the coordinator holds a lock per session, which a run
takes when it starts (or resumes) and releases when it stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from raygents.agents.agent import Agent
from raygents.core.envelope import RunState
from raygents.errors import UserError
from raygents.runtime.link.directory import Directory
from raygents.sessions import load_session, save_session

__all__ = ["open_session", "resume_session", "save_run_session"]

log = logging.getLogger("raygents")


async def open_session(directory: Directory, agent: Agent, state: RunState) -> RunState:
    """Prepend the start agent's session history (a fresh top-level run only)."""
    if state.session_id is None or agent.session is None:
        return state
    holder = await directory.client.lock_session(state.session_id, state.run_id)
    if holder is not None:
        raise UserError(
            f"session {state.session_id!r} is in use by run {holder!r}; runs on one session "
            "are serialised: wait for it to end, or use another session_id",
            run_id=state.run_id,
        )
    history = await load_session(agent.session, state.session_id)
    messages = (*history, *state.messages)
    return state.evolve(
        messages=messages, input_len=len(messages), recorded=0, loaded_len=len(history)
    )


async def resume_session(
    directory: Directory, start: Agent | None, state: RunState, suspending: Callable[[], bool]
) -> None:
    """A resumed top-level run takes its session again (a run releases it when it stops);
    ``start`` is the run's start agent.

    While another run holds it, this one waits for that run to end (or stop), polling,
    unless it is asked to suspend (``suspending``): then it goes on to halt at its first safe
    point, before any save. It waits rather than fails: a resumed run cannot pick another
    session, and failing would store it as failed, with the approvals it was given spent.
    """
    session_id = state.session_id
    if session_id is None or state.depth or start is None or start.session is None:
        return
    delay, waited = 0.05, False
    while True:
        holder = await directory.client.lock_session(session_id, state.run_id)
        if holder is None or suspending():
            return
        if not waited:
            log.info(
                "run %s waits for run %s, which holds session %r", state.run_id, holder, session_id
            )
            waited = True
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


async def save_run_session(start: Agent, state: RunState) -> None:
    """Save the conversation to the start agent's session (on success only), keeping what
    other runs saved since this one loaded it (see :func:`~raygents.sessions.save_session`)."""
    if state.session_id is None or state.depth or start.session is None:
        return
    messages = list(state.messages)
    if state.session_summary is not None and state.loaded_len is not None:
        # (a compaction: its summary takes the place of what it stands for in the session)
        upto, summary_len = state.session_summary
        compacted = (state.loaded_len, upto, summary_len)
        await save_session(start.session, state.session_id, messages, compacted=compacted)
        return
    # (a history an input_filter rewrote no longer begins with what the run loaded)
    input_len = None if state.rewritten else state.input_len
    await save_session(start.session, state.session_id, messages, input_len=input_len)
