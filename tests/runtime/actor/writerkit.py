"""A run's state and an agent actor's record writer without Ray, for the writer's tests: the
writer asks its coordinator (a real ``Coordinator`` or a stand-in) through a fake handle."""

from __future__ import annotations

from typing import Any

from fakes import FakeHandle

from raygents.core.envelope import RunState
from raygents.core.messages import Message
from raygents.runtime.actor.writer import RecordWriter
from raygents.runtime.link.directory import Directory
from raygents.stores.base import Store


async def _written(state: RunState, status: str, emit: Any) -> None:
    pass


async def writer(store: Store, coordinator: Any, handle: FakeHandle | None = None) -> RecordWriter:
    """A writer that puts records in ``store`` and asks ``coordinator`` (through ``handle``,
    a :class:`FakeHandle` of it, when the test looks at the calls)."""
    directory = Directory("ns", handle or FakeHandle(coordinator), owner="test")
    await directory.settings()
    made = RecordWriter(directory, _written)
    made.use_store(store)
    return made


def state(run_id: str, epoch: int = 1) -> RunState:
    """A running run's state after one turn, of dispatch ``epoch``."""
    return RunState(
        run_id=run_id,
        agent_name="worker",
        messages=(Message("user", "go"),),
        input_len=1,
        turns=1,
        epoch=epoch,
    )
