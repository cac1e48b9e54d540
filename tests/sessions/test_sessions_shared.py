"""A MemorySession is shared by the whole cluster: tasks, actors and the driver see one store."""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from raygents.core.messages import Message, ToolCall
from raygents.sessions import (
    MemorySession,
    SQLiteSession,
    StoreSession,
    load_session,
    save_session,
)

pytestmark = pytest.mark.usefixtures("rt")

CONVERSATION = [
    Message("user", "add 2 and 3"),
    Message("assistant", None, tool_calls=[ToolCall("call_1", "add", '{"a": 2, "b": 3}')]),
    Message("tool", "5", tool_call_id="call_1"),
    Message("assistant", "5"),
]


@ray.remote(num_cpus=0)
def save_in_task(session: object, session_id: str, messages: list[Message]) -> None:
    session.save(session_id, messages)  # type: ignore[attr-defined]


@ray.remote(num_cpus=0)
def load_in_task(session: object, session_id: str) -> list[Message]:
    return session.load(session_id)  # type: ignore[attr-defined,no-any-return]


@ray.remote(num_cpus=0)
class AgentLike:
    """An async actor using a session the way agent actors do: through the runtime helpers."""

    def __init__(self, session: object) -> None:
        self.session = session

    async def remember(self, session_id: str, messages: list[Message]) -> None:
        await save_session(self.session, session_id, messages)  # type: ignore[arg-type]

    async def recall(self, session_id: str) -> list[Message]:
        return await load_session(self.session, session_id)  # type: ignore[arg-type]


def test_saved_in_a_task_is_seen_by_the_driver_and_another_task() -> None:
    session = MemorySession()
    try:
        ray.get(save_in_task.remote(session, "conv", CONVERSATION))
        assert session.load("conv") == CONVERSATION
        assert ray.get(load_in_task.remote(session, "conv")) == CONVERSATION
        assert ray.get(load_in_task.remote(session, "unknown")) == []
        handle = ray.get_actor(session.name, namespace="raygents")
        assert handle is not None
    finally:
        session.close()


def test_saved_in_an_actor_is_seen_by_the_driver_task_and_other_actor() -> None:
    session = MemorySession()
    writer, reader = AgentLike.remote(session), AgentLike.remote(session)
    try:
        ray.get(writer.remember.remote("conv", CONVERSATION[:2]))
        assert session.load("conv") == CONVERSATION[:2]
        assert ray.get(reader.recall.remote("conv")) == CONVERSATION[:2]
        session.save("conv", CONVERSATION)  # the driver overwrites; the actors see it
        assert ray.get(writer.recall.remote("conv")) == CONVERSATION
        assert ray.get(load_in_task.remote(session, "conv")) == CONVERSATION
    finally:
        ray.kill(writer)
        ray.kill(reader)
        session.close()


def test_instances_are_separate_and_close_forgets() -> None:
    one, two = MemorySession(), MemorySession()
    ray.get(save_in_task.remote(one, "conv", CONVERSATION))
    assert two.load("conv") == []
    one.close()
    with pytest.raises(ValueError):
        ray.get_actor(one.name, namespace="raygents")
    assert one.load("conv") == []  # a later use starts afresh
    one.close()
    two.close()


def test_durable_sessions_work_from_tasks(tmp_path: Path) -> None:
    for session in (SQLiteSession(tmp_path / "s.db"), StoreSession(f"file://{tmp_path}/store")):
        ray.get(save_in_task.remote(session, "conv", CONVERSATION))
        assert session.load("conv") == CONVERSATION
        assert ray.get(load_in_task.remote(session, "conv")) == CONVERSATION
