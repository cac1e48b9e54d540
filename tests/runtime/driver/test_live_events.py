"""Live events in another process: a Ray actor with its own raygents runtime (another driver
of the namespace) follows this driver's runs through ``attach`` and the coordinator's relay."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

import raygents as rg
from raygents.models.function import stream_text
from raygents.testing import FunctionModel, call, calls, text

pytestmark = [pytest.mark.usefixtures("rt"), pytest.mark.timeout(240)]

Seen = list[tuple[float, dict[str, Any]]]


class Words:
    """A model that answers ``count`` words, streamed with ``pause_s`` between them."""

    def __init__(self, count: int, pause_s: float) -> None:
        self.count = count
        self.pause_s = pause_s

    async def respond(self, request: rg.ModelRequest) -> rg.ModelResponse:
        return text(" ".join(f"w{i}" for i in range(self.count)))

    async def stream(self, request: rg.ModelRequest) -> AsyncIterator[str | rg.ModelResponse]:
        async for item in stream_text(await self.respond(request)):
            if isinstance(item, str) and self.pause_s:
                await asyncio.sleep(self.pause_s)
            yield item


class Follower:
    """Another process of the namespace: its own raygents runtime, following runs."""

    def __init__(self, namespace: str = "raygents", store: str = "memory://") -> None:
        rg.init(namespace=namespace, store=store, handle_sigterm=False)
        self.held: rg.RunHandle | None = None

    def follow(self, run_id: str, after: int | None = None, stop_at: int | None = None) -> Seen:
        """The run's events as this process gets them, each with the time it came."""
        handle = rg.attach(run_id)
        events = handle.events() if after is None else handle.events(after=after)
        seen: Seen = []
        for event in events:
            seen.append((time.time(), event.model_dump(mode="json")))
            if stop_at is not None and event.seq == stop_at:
                break
        return seen

    def hold(self, run_id: str) -> bool:
        """Attach and never read; whether attaching again gives the same handle (one
        follower per run and process)."""
        self.held = rg.attach(run_id)
        return rg.attach(run_id) is self.held or self.held.done()

    def held_events(self) -> int:
        """How many events the held handle got, once its run ended."""
        assert self.held is not None
        while not self.held.done():
            time.sleep(0.05)
        return len(self.held.events().snapshot())

    def close(self) -> None:
        rg.shutdown()


@pytest.fixture(scope="module")
def follower(ray_session: None) -> Iterator[Any]:
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    actor = ray.remote(num_cpus=0)(Follower).remote()
    yield actor
    ray.get(actor.close.remote(), timeout=60)
    ray.kill(actor)


def _mine(handle: rg.RunHandle) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json") for e in handle.events()]


def _id() -> str:
    return f"live-{uuid.uuid4().hex[:12]}"


def _until(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_another_process_sees_the_text_deltas_as_they_happen(follower: Any) -> None:
    handle = rg.run_streamed(rg.Agent("talker", model=Words(30, 0.05)), "talk", run_id=_id())
    seen = follower.follow.remote(handle.run_id)
    handle.result(timeout_s=60)
    ended = time.time()
    got = ray.get(seen, timeout=60)
    assert [event for _, event in got] == _mine(handle)  # (the same numbers everywhere)
    assert [e["seq"] for _, e in got] == list(range(1, len(got) + 1))
    deltas = [at for at, event in got if event["type"] == "llm_delta"]
    assert len(deltas) == 30
    assert deltas[0] < ended - 0.5, "the first words came only at the end"
    assert deltas[-1] - deltas[0] > 0.5, "the words came all at once"


def test_a_reconnect_after_a_seq_gets_exactly_the_events_after_it(follower: Any) -> None:
    handle = rg.run_streamed(rg.Agent("talker", model=Words(30, 0.04)), "talk", run_id=_id())
    first = follower.follow.remote(handle.run_id, stop_at=5)
    rest = follower.follow.remote(handle.run_id, after=5)  # (after the first, same actor)
    handle.result(timeout_s=60)
    head, tail = ray.get(first, timeout=60), ray.get(rest, timeout=60)
    mine = _mine(handle)
    assert [e for _, e in head] == mine[:5]
    assert [e for _, e in tail] == mine[5:]
    again = ray.get(follower.follow.remote(handle.run_id, after=20), timeout=60)  # (ended)
    assert [e for _, e in again] == mine[20:]
    assert again[-1][1]["type"] == "complete"


def test_a_subscriber_that_never_reads_does_not_hold_the_run(follower: Any) -> None:
    handle = rg.run_streamed(rg.Agent("chatty", model=Words(3000, 0.0)), "talk", run_id=_id())
    assert ray.get(follower.hold.remote(handle.run_id), timeout=60)
    handle.result(timeout_s=60)  # (while the follower reads nothing)
    assert ray.get(follower.held_events.remote(), timeout=60) == len(_mine(handle))


def test_childrens_events_come_with_their_path(follower: Any) -> None:
    child = rg.Agent("helper_agent", model=Words(5, 0.05))

    def parent_reply(request: rg.ModelRequest) -> rg.ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return text("parent done")
        return calls(call("helper", {"input": "work"}, id="h0"))

    parent = rg.Agent(
        "parent_agent",
        tools=[child.as_tool("helper", "Ask the helper.")],
        model=FunctionModel(parent_reply, latency_s=0.3),
    )
    handle = rg.run_streamed(parent, "go", run_id=_id())
    seen = follower.follow.remote(handle.run_id)
    handle.result(timeout_s=60)
    got = [event for _, event in ray.get(seen, timeout=60)]
    assert got == _mine(handle)
    children = [e for e in got if e["path"]]
    assert children and {tuple(e["path"]) for e in children} == {("helper_agent/h0",)}
    assert "llm_delta" in {e["type"] for e in children}
    assert got[-1]["type"] == "complete" and not got[-1]["path"]


@rg.tool(num_cpus=0)
def tick(n: int) -> str:
    """Tick."""
    return f"tick {n}"


@rg.tool(num_cpus=0, needs_approval=True)
def wire(amount: int) -> str:
    """Wire money."""
    return f"wired {amount}"


def _ticker(name: str) -> rg.Agent:
    def reply(request: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        return calls(call("tick", {"n": done}, id=f"t{done}"))

    return rg.Agent(name, tools=[tick], model=FunctionModel(reply, latency_s=0.1))


def _followed(handle: rg.RunHandle, follower: Any) -> Any:
    """Start following ``handle``'s run from the follower; returns once the relay has it."""
    seen = follower.follow.remote(handle.run_id)
    _until(lambda: handle._tap is not None)
    return seen


def test_cancel_and_suspend_reach_a_follower(follower: Any) -> None:
    cancelled = rg.start(_ticker("ticker"), "go", max_turns=1000, run_id=_id())
    seen = _followed(cancelled, follower)
    cancelled.cancel()
    with pytest.raises(rg.RunCancelled):
        cancelled.result(timeout_s=60)
    last = ray.get(seen, timeout=60)[-1][1]
    assert last["type"] == "error" and "cancel" in last["error"]
    assert last == _mine(cancelled)[-1]

    suspended = rg.start(_ticker("ticker"), "go", max_turns=1000, run_id=_id())
    seen = _followed(suspended, follower)
    suspended.suspend()
    with pytest.raises(rg.SuspendedError):
        suspended.result(timeout_s=60)
    last = ray.get(seen, timeout=60)[-1][1]
    assert last["type"] == "suspended" and last == _mine(suspended)[-1]


def test_an_approval_and_the_resumed_run_reach_a_follower_numbered_on(follower: Any) -> None:
    def reply(request: rg.ModelRequest) -> rg.ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return text("wired")
        return calls(call("wire", {"amount": 5}, id="w1"))

    agent = rg.Agent("banker", tools=[wire], model=FunctionModel(reply, latency_s=0.5))
    handle = rg.start(agent, "pay", run_id=_id())
    seen = _followed(handle, follower)
    with pytest.raises(rg.RunInterrupted):
        handle.result(timeout_s=60)
    got = [e for _, e in ray.get(seen, timeout=60)]
    assert got == _mine(handle)
    interrupted = got[-1]
    assert interrupted["type"] == "interrupted"
    assert [p["call_id"] for p in interrupted["data"]["pending"]] == ["w1"]

    resumed = rg.resume(handle.run_id, agent=agent, approvals={"w1": True})
    seen = _followed(resumed, follower)
    resumed.result(timeout_s=60)
    after = [e for _, e in ray.get(seen, timeout=60)]
    assert after == _mine(resumed)
    assert after[0]["seq"] == interrupted["seq"] + 1  # (a resumed run numbers on)
    assert after[-1]["type"] == "complete"


def test_a_run_that_ended_unfollowed_gives_its_history_and_its_numbered_end(
    follower: Any,
) -> None:
    handle = rg.start(_ticker_to_end(), "go", run_id=_id())
    handle.result(timeout_s=60)
    run_id, last_seq = handle.run_id, _mine(handle)[-1]["seq"]
    del handle
    gc.collect()
    got = [e for _, e in ray.get(follower.follow.remote(run_id), timeout=60)]
    assert got[-1]["type"] == "complete" and got[-1]["seq"] == last_seq
    history = got[:-1]
    assert history and all(e["data"]["replayed"] and e["seq"] is None for e in history)
    assert [e["type"] for e in history[:3]] == ["agent_start", "tool_start", "tool_end"]
    only_end = [e for _, e in ray.get(follower.follow.remote(run_id, after=1), timeout=60)]
    assert [e["type"] for e in only_end] == ["complete"]


def _ticker_to_end() -> rg.Agent:
    def reply(request: rg.ModelRequest) -> rg.ModelResponse:
        if any(m.role == "tool" for m in request.messages):
            return text("done")
        return calls(call("tick", {"n": 0}, id="t0"))

    return rg.Agent("ticker_to_end", tools=[tick], model=FunctionModel(reply))


def test_a_detached_run_is_followed_live_and_reconnected_to(
    own_raygents: None, tmp_path: Path
) -> None:
    """The coordinator drives a detached run and numbers its events: its driver and another
    process see the same numbers, live, and a reconnect picks up after a seq."""
    namespace, store = f"relay-{uuid.uuid4().hex[:8]}", f"file://{tmp_path / 'store'}"
    rg.shutdown()
    rg.init(namespace=namespace, store=store, detached=True)
    other = ray.remote(num_cpus=0)(Follower).remote(namespace, store)
    try:
        handle = rg.run_streamed(rg.Agent("talker", model=Words(20, 0.05)), "hi", run_id=_id())
        head = other.follow.remote(handle.run_id, stop_at=4)
        tail = other.follow.remote(handle.run_id, after=4)
        handle.result(timeout_s=60)
        ended = time.time()
        mine = _mine(handle)
        first, rest = ray.get(head, timeout=60), ray.get(tail, timeout=60)
        assert [e for _, e in first] == mine[:4] and [e for _, e in rest] == mine[4:]
        assert first[0][0] < ended - 0.3, "the first events came only at the end"
        assert mine[-1]["type"] == "complete" and mine[-1]["seq"] == len(mine)
    finally:
        ray.get(other.close.remote(), timeout=60)
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["namespace"] == namespace:
                ray.kill(ray.get_actor(entry["name"], namespace=namespace))


def test_a_detached_run_ends_with_the_run_tables_entry(own_raygents: None, tmp_path: Path) -> None:
    """The coordinator that drove a detached run sends its table entry with the outcome, so
    the driver (a Serve replica answering ``"wait": true``) need not ask for it."""
    namespace, store = f"entry-{uuid.uuid4().hex[:8]}", f"file://{tmp_path / 'store'}"
    rg.shutdown()
    rg.init(namespace=namespace, store=store, detached=True)
    try:
        handle = rg.start(_ticker_to_end(), "go", run_id=_id())
        handle.result(timeout_s=60)
        entry = handle._entry
        assert entry is not None, "the outcome came without the run table's entry"
        from raygents.runtime.driver.client import current

        rt = current()
        table = rt.ask(rt.directory.client.get_run(handle.run_id))
        assert table is not None
        assert (entry.run_id, entry.status, entry.turns) == (handle.run_id, "completed", 2)
        assert entry.started_at is not None and entry.started_at == table.started_at
        assert entry.attempts == table.attempts and entry.agent_name == table.agent_name
    finally:
        for found in ray.util.list_named_actors(all_namespaces=True):
            if found["namespace"] == namespace:
                ray.kill(ray.get_actor(found["name"], namespace=namespace))
