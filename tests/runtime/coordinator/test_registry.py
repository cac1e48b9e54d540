"""The agent actor registry without Ray: graphs, retiring actors of older definitions and idle
ones, and replacing an unresponsive actor (fake actor handles; creating actors needs Ray)."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import FakeHandle

from raygents.errors import RaygentsError
from raygents.runtime.coordinator.registry import ActorRegistry
from raygents.runtime.link.handles import actor_key


class _Actor:
    def __init__(self, takes: bool = True) -> None:
        self.retired = False
        self.asked: list[Any] = []
        self.takes = takes
        self.adopted: list[tuple[str, str]] = []

    def retire(self, grace_s: float = 2.0, serving: tuple[str, str] | None = None) -> None:
        self.retired = True

    async def adopt(
        self, graph: bytes, name: str, graph_fp: str, definitions: Any, idle_s: float
    ) -> bool:
        if self.takes:
            self.adopted.append((graph_fp, name))
        return self.takes

    def suspend(self, requests: list[Any]) -> None:
        self.asked.append(list(requests))


def _handle(actor_id: str) -> FakeHandle:
    return FakeHandle(_Actor(), actor_id=actor_id, fire_and_forget=True)


def test_an_unknown_graph_is_refused() -> None:
    registry = ActorRegistry("test")
    with pytest.raises(RaygentsError, match="unknown agent graph 'fp1'"):
        registry.agent_actors("fp1", "agent")


def test_a_new_definition_of_an_agent_retires_the_actors_of_the_old_one() -> None:
    registry = ActorRegistry("test")
    registry.register_graph("fp1", b"graph-1", {"a": 1, "b": 1})
    old_a, old_b = _handle("a1"), _handle("b1")
    registry.actors[("fp1", "a")] = [old_a]
    registry.actors[("fp1", "b")] = [old_b]
    registry.beats.beat("a1", 0.0)
    registry.register_graph("fp2", b"graph-2", {"a": 1})  # a new definition of "a" only
    assert old_a.target.retired and not old_b.target.retired
    assert set(registry.actors) == {("fp1", "b")}
    assert registry.beats.of("a1") is None
    registry.register_graph("fp2", b"again", {"b": 1})  # known: nothing changes
    assert registry.graphs["fp2"].blob == b"graph-2" and not old_b.target.retired


def test_a_stale_actor_is_no_longer_handed_out() -> None:
    registry = ActorRegistry("test")
    first, second = _handle("x1"), _handle("x2")
    registry.actors[("gone", "a")] = [first, second]
    registry.replace_actor("gone", "a", FakeHandle(_Actor(), actor_id="x1"))  # another copy
    assert registry.actors[("gone", "a")] == [second], "no graph to create a fresh one from"
    registry.replace_actor("gone", "a", first)  # reported again: already replaced
    registry.replace_actor("other", "a", first)  # not one of its actors
    assert registry.actors[("gone", "a")] == [second]


def test_a_graph_with_the_same_definition_of_an_agent_keeps_its_actors() -> None:
    """A chat loop that starts each turn on the last agent of the one before registers
    another graph of the same agents: their actors keep serving the first graph."""
    registry = ActorRegistry("test")
    registry.register_graph("fp1", b"graph-1", {"a": 1, "b": 1}, {"a": "da", "b": "db"})
    old_a, old_b = _handle("a1"), _handle("b1")
    registry.actors[("fp1", "a")] = [old_a]
    registry.actors[("fp1", "b")] = [old_b]
    registry.register_graph("fp2", b"graph-2", {"b": 1, "a": 1}, {"a": "da", "b": "db2"})
    assert not old_a.target.retired, "the same definition of 'a': its actor stays"
    assert old_b.target.retired, "a new definition of 'b'"
    assert set(registry.actors) == {("fp1", "a")}
    registry.register_graph("fp3", b"graph-3", {"a": 1})  # definitions unknown: all new
    assert old_a.target.retired


class _Registry(ActorRegistry):
    """Creates fake actors, named as Ray would name them."""

    def _create(self, graph: Any, graph_fp: str, name: str, index: int | str) -> Any:
        handle = _handle(f"{name}#{index}")
        handle.index = index  # type: ignore[attr-defined]
        return handle


def test_a_retiring_actor_is_handed_out_no_more_and_its_successor_has_a_new_name() -> None:
    registry = _Registry("test")
    registry.register_graph("fp1", b"graph-1", {"a": 2})
    first = registry.agent_actors("fp1", "a")
    assert [h.index for h in first] == [0, 1]
    registry.beats.beat("a#1", 0.0)
    registry.retiring("fp1", "a", "a#1")
    assert registry.actors[("fp1", "a")] == first[:1], "the other replica stays"
    assert registry.retired("a#1") and not registry.retired("a#0")
    assert registry.beats.of("a#1") is None
    registry.retiring("fp1", "a", "a#1")  # told again (a caller it refused): nothing changes
    again = registry.agent_actors("fp1", "a")
    assert again[0] is first[0] and len(again) == 2
    assert str(again[1].index).startswith("r"), "never the name the retiring one may hold"
    registry.retiring("fp1", "a", "a#0")
    registry.retiring("fp1", "a", actor_key(again[1]))
    assert ("fp1", "a") not in registry.actors
    assert all(str(h.index).startswith("r") for h in registry.agent_actors("fp1", "a"))


def test_an_actor_unknown_here_that_retires_still_frees_its_agents_names() -> None:
    """A restarted coordinator has not looked its predecessor's actors up yet: the next
    lookup must not find the retiring one by its name."""
    registry = _Registry("test")
    registry.register_graph("fp1", b"graph-1", {"a": 1})
    registry.retiring("fp1", "a", "a#0")
    assert registry.retired("a#0")
    (fresh,) = registry.agent_actors("fp1", "a")
    assert str(fresh.index).startswith("r")


def test_actors_of_an_older_definition_count_as_retired() -> None:
    registry = _Registry("test")
    registry.register_graph("fp1", b"graph-1", {"a": 1})
    (old,) = registry.agent_actors("fp1", "a")
    registry.register_graph("fp2", b"graph-2", {"a": 1})
    assert old.target.retired and registry.retired(actor_key(old))
    (later,) = registry.agent_actors("fp1", "a")  # a late run of the older graph
    assert later is not old and str(later.index).startswith("r")


def test_retired_ids_are_kept_up_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from raygents.runtime.coordinator import registry as module

    monkeypatch.setattr(module, "_RETIRED_KEPT", 3)
    registry = ActorRegistry("test")
    for n in range(5):
        registry.retiring("fp", "a", f"x{n}")
    assert [registry.retired(f"x{n}") for n in range(5)] == [False, False, True, True, True]


def test_an_actor_created_after_a_suspend_request_gets_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run may be on its way to an agent that has no actor yet when a suspend comes: the
    actors created in the next minute get the newest request of each run."""
    from raygents.runtime.coordinator import registry as module

    now = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    registry = ActorRegistry("test")
    created: list[FakeHandle] = []

    def create(*_: Any) -> FakeHandle:
        created.append(_handle(f"new{len(created)}"))
        return created[-1]

    monkeypatch.setattr(registry, "_create_actor", create)
    registry.register_graph("fp1", b"graph-1", {"a": 1, "b": 1})
    registry.asked([("r1", "drain", 2), ("r2", "cancel", 1)])
    now[0] += 30
    registry.asked([("r1", "cancel", 2)])  # (the newest of a run replaces its older one)
    registry.agent_actors("fp1", "a")
    assert created[0].target.asked == [[("r2", "cancel", 1), ("r1", "cancel", 2)]]
    now[0] += 40  # r2's request is 70 s old now, r1's 40 s
    registry.replace_actor("fp1", "a", created[0])
    assert created[1].target.asked == [[("r1", "cancel", 2)]]
    now[0] += 30
    registry.agent_actors("fp1", "b")
    assert created[2].target.asked == [], "a minute on, nothing is sent"


class _Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from raygents.runtime.coordinator import registry as module

        self.now = 100.0
        monkeypatch.setattr(module.time, "monotonic", lambda: self.now)


def _idle_registry(monkeypatch: pytest.MonkeyPatch, takes: bool = True) -> ActorRegistry:
    """Agents "a" (graph fp1) and "b" (fp2), actors retiring after 4 s idle (so idle ones take
    another agent after 1 s), fake actors created as Ray would name them."""
    registry = ActorRegistry("test", idle_actor_s=4.0)
    created: list[FakeHandle] = []

    def create(graph: Any, graph_fp: str, name: str, index: int | str) -> FakeHandle:
        created.append(FakeHandle(_Actor(takes), actor_id=f"{name}#{index}"))
        return created[-1]

    monkeypatch.setattr(registry, "_create_actor", create)
    registry.register_graph("fp1", b"graph-1", {"a": 1})
    registry.register_graph("fp2", b"graph-2", {"b": 1})
    return registry


async def test_an_actor_idle_long_enough_takes_an_agent_that_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock(monkeypatch)
    registry = _idle_registry(monkeypatch)
    (a,) = await registry.lookup("fp1", "a")
    clock.now += 1.5
    (b,) = await registry.lookup("fp2", "b")
    assert b is a and a.target.adopted == [("fp2", "b")], "no new process for b"
    assert set(registry.actors) == {("fp2", "b")}
    registry.retiring("fp1", "a", actor_key(a))  # (a caller of "a" it refused, as it must)
    assert registry.actors[("fp2", "b")] == [a] and not registry.retired(actor_key(a))
    (again,) = await registry.lookup("fp1", "a")
    assert again is not a and str(actor_key(again)).startswith("a#r"), "never a's old name"
    registry.register_graph("fp3", b"graph-3", {"b": 1})  # a new definition of "b"
    assert a.target.retired and registry.retired(actor_key(a))


async def test_actors_busy_or_idle_briefly_or_that_refuse_are_not_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock(monkeypatch)
    registry = _idle_registry(monkeypatch)
    (a,) = await registry.lookup("fp1", "a")
    clock.now += 0.5
    (b,) = await registry.lookup("fp2", "b")
    assert b is not a
    assert "adopt" not in a.calls, "idle for less than a quarter of idle_actor_s: not asked"
    clock.now += 1.5
    registry.beats.beat(actor_key(a), 0.0)  # a run is on it
    registry.beats.beat(actor_key(b), 0.0)
    registry.register_graph("fp4", b"graph-4", {"c": 1})
    (c,) = await registry.lookup("fp4", "c")
    assert c not in (a, b) and "adopt" not in a.calls and "adopt" not in b.calls
    refusing = _idle_registry(monkeypatch, takes=False)
    (a,) = await refusing.lookup("fp1", "a")
    clock.now += 1.5
    (b,) = await refusing.lookup("fp2", "b")
    assert b is not a and len(a.calls["adopt"]) == 1, "asked, refused: a new actor"


async def test_without_an_idle_time_no_actor_takes_another_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock(monkeypatch)
    registry = ActorRegistry("test")
    monkeypatch.setattr(registry, "_create_actor", lambda *a: _handle(f"{a[2]}#{a[3]}"))
    registry.register_graph("fp1", b"graph-1", {"a": 1})
    registry.register_graph("fp2", b"graph-2", {"b": 1})
    (a,) = await registry.lookup("fp1", "a")
    clock.now += 10_000
    (b,) = await registry.lookup("fp2", "b")
    assert b is not a and "adopt" not in a.calls


async def test_an_actor_that_took_an_agent_redefined_meanwhile_retires_after_its_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A newer definition registered while the lookup asked an idle actor found no actor of
    the older one to retire: the actor that took it serves this run, then retires."""
    clock = _Clock(monkeypatch)
    registry = _idle_registry(monkeypatch)
    (b,) = await registry.lookup("fp2", "b")
    clock.now += 1.5
    registry.register_graph("fp1b", b"graph-1b", {"a": 1})  # "a" redefined before a has actors
    (a,) = await registry.lookup("fp1", "a")
    assert a is b and b.target.adopted == [("fp1", "a")] and b.target.retired
    assert ("fp1", "a") not in registry.actors and registry.retired(actor_key(b))
