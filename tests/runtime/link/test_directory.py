"""Finding agent actors and watching them, against a scripted coordinator (no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fakes import FakeHandle

from raygents.errors import RaygentsError
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.settings import Recovery, Settings

_RECOVERY = Recovery(heartbeat_s=0.02, stale_after_s=0.06)


class _Coordinator:
    def __init__(self, replicas: int = 2, *, beats: bool = True) -> None:
        self.graphs: set[str] = set()
        self.replicas = [FakeHandle(_Actor(), actor_id=f"actor-{i}") for i in range(replicas)]
        self.beats = beats

    def settings(self) -> Settings:
        return Settings(recovery=_RECOVERY)

    def register_graph(
        self,
        graph_fp: str,
        blob: bytes,
        replicas: dict[str, int],
        definitions: dict[str, str] | None = None,
    ) -> None:
        self.graphs.add(graph_fp)

    def agent_actors(self, graph_fp: str, name: str) -> list[Any]:
        if graph_fp not in self.graphs:
            raise RaygentsError(f"unknown agent graph {graph_fp!r}")
        return self.replicas

    def beat_of(self, key: str) -> tuple[float, float] | None:
        return (0.0, 0.0) if self.beats else None


class _Actor:
    """Answers its first ping (it started); later ones only if ``answers``."""

    def __init__(self, answers: bool = True) -> None:
        self.answers = answers
        self.pings = 0

    def ping(self) -> Any:
        self.pings += 1
        if self.answers or self.pings == 1:
            return 1
        return asyncio.get_running_loop().create_future()  # never answered


def _directory(coordinator: _Coordinator) -> tuple[Directory, FakeHandle]:
    handle = FakeHandle(coordinator, actor_id="coordinator")
    return Directory("ns", handle, owner="driver-1"), handle


async def test_replicas_are_used_in_turn_and_asked_for_once() -> None:
    coordinator = _Coordinator(replicas=2)
    coordinator.graphs.add("fp")
    directory, handle = _directory(coordinator)
    found = [await directory.actor("fp", "agent") for _ in range(4)]
    assert found == coordinator.replicas * 2
    assert len(handle.calls["agent_actors"]) == 1
    directory.forget("fp", "agent")
    await directory.actor("fp", "agent")
    assert len(handle.calls["agent_actors"]) == 2


async def test_a_graph_the_coordinator_lost_is_registered_again() -> None:
    coordinator = _Coordinator()
    directory, handle = _directory(coordinator)
    known = (b"graph", {"agent": 2}, {"agent": "definition"})  # known here, not to a restarted one
    directory.graphs["fp"] = known
    assert await directory.actor("fp", "agent") in coordinator.replicas
    assert handle.calls["register_graph"] == [("fp", *known)]


async def test_an_unknown_graph_nobody_here_knows_fails() -> None:
    directory, _ = _directory(_Coordinator())
    with pytest.raises(RaygentsError, match="unknown agent graph"):
        await directory.actor("never-registered", "agent")


async def test_another_coordinator_forgets_the_actors_and_settings_of_the_old_one() -> None:
    old = _Coordinator()
    old.graphs.add("fp")
    directory, _ = _directory(old)
    await directory.settings()
    await directory.actor("fp", "agent")
    new = _Coordinator()
    new.graphs.add("fp")
    fresh = FakeHandle(new, actor_id="coordinator-2")
    directory.replace(fresh)
    assert directory.coordinator() is fresh
    assert await directory.actor("fp", "agent") in new.replicas
    await directory.settings()
    assert len(fresh.calls["settings"]) == 1


async def test_a_watched_actor_that_answers_is_never_stale() -> None:
    directory, _ = _directory(_Coordinator())
    actor = FakeHandle(_Actor(answers=True))
    stale = directory.watch(actor)
    await asyncio.sleep(0.2)
    assert not stale.done()
    directory.unwatch(actor)
    await asyncio.wait(directory.stop_watches(), timeout=1)


async def test_an_actor_that_neither_answers_nor_beats_goes_stale() -> None:
    directory, _ = _directory(_Coordinator(beats=False))
    actor = FakeHandle(_Actor(answers=False))
    stale = directory.watch(actor)
    await asyncio.wait_for(stale, 5)


async def test_a_late_answer_is_waited_for_while_the_actor_still_beats() -> None:
    directory, _ = _directory(_Coordinator(beats=True))
    actor = FakeHandle(_Actor(answers=False))
    stale = directory.watch(actor)
    await asyncio.sleep(0.3)  # several times stale_after_s
    assert not stale.done()
    directory.unwatch(actor)
    await asyncio.wait(directory.stop_watches(), timeout=1)


async def test_watches_of_one_actor_share_one_heartbeat_loop() -> None:
    directory, _ = _directory(_Coordinator())
    actor = FakeHandle(_Actor())
    first, second = directory.watch(actor), directory.watch(actor)
    assert first is second
    assert len(directory.stop_watches()) == 1
