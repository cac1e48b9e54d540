"""The caller's side of run mailboxes, against a scripted actor (no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import ray.exceptions

from raygents.runtime.mailbox import ActorRestarted, Mailboxes, pack, unpack


class _Id:
    def hex(self) -> str:
        return "actor-1"


class _Take:
    def __init__(self, actor: FakeActor) -> None:
        self._actor = actor

    def remote(self, caller: str, wait_s: float, known: str | None) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._actor.takes.append((caller, future))
        self._actor.known.append(known)
        return future


class _Start:
    def __init__(self, actor: FakeActor) -> None:
        self._actor = actor

    def remote(self, envelopes: list[Any], caller: str) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._actor.starts.append((list(envelopes), future))
        return future


class FakeActor:
    """Every take and start waits until the test answers it."""

    def __init__(self) -> None:
        self._actor_id = _Id()
        self.takes: list[tuple[str, asyncio.Future[Any]]] = []
        self.known: list[str | None] = []
        """The incarnation each take said it last saw."""
        self.take = _Take(self)
        self.starts: list[tuple[list[Any], asyncio.Future[Any]]] = []
        self.start = _Start(self)

    async def next_take(self) -> tuple[str, asyncio.Future[Any]]:
        for _ in range(100):
            pending = [t for t in self.takes if not t[1].done()]
            if pending:
                return pending[0]
            await asyncio.sleep(0.001)
        raise AssertionError("no take was sent")


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_items_reach_their_runs_in_order() -> None:
    async def scenario() -> None:
        boxes, actor = Mailboxes(), FakeActor()
        caller, a = boxes.open(actor, "a")
        _, b = boxes.open(actor, "b")
        boxes.accepted(actor, a, "i1")
        boxes.accepted(actor, b, "i1")
        taker, take = await actor.next_take()
        assert taker == caller
        take.set_result(("i1", pack([("a", [1]), ("b", [2]), ("a", [3]), ("gone", [4])])))
        await _settle()
        assert [a.items.get_nowait(), a.items.get_nowait()] == [[1], [3]]
        assert b.items.get_nowait() == [2]
        # the runs go on before the next take is sent; runs are still registered: it takes
        assert len(actor.takes) == 1
        await actor.next_take()
        assert len(actor.takes) == 2
        boxes.close(actor, "a")
        boxes.close(actor, "b")
        (await actor.next_take())[1].set_result(("i1", pack([])))
        await _settle()
        assert len(actor.takes) == 2  # nothing to wait for: the poller ended
        again, _ = boxes.open(actor, "c")  # a new poller, with a caller id of its own
        assert again != caller and (await actor.next_take())[0] == again
        boxes.stop()

    asyncio.run(scenario())


def test_a_new_incarnation_fails_the_runs_the_old_one_accepted() -> None:
    async def scenario() -> None:
        boxes, actor = Mailboxes(), FakeActor()
        _, old = boxes.open(actor, "old")
        boxes.accepted(actor, old, "i1")  # before take 1 is sent
        _, take1 = await actor.next_take()
        _, new = boxes.open(actor, "new")
        take1.set_result(("i1", pack([])))  # answered by the incarnation that has "old"
        await _settle()
        assert old.items.empty()
        boxes.accepted(actor, new, "i2")  # take 2 is in flight: answered by i2 or not
        _, take2 = await actor.next_take()
        take2.set_result(("i2", pack([])))
        await _settle()
        assert isinstance(old.items.get_nowait(), ActorRestarted)
        assert new.items.empty()  # accepted while take 2 was in flight: no verdict from it
        _, take3 = await actor.next_take()
        # each take names the newest incarnation seen, so a restarted actor answers at once
        assert actor.known == ["i1", "i1", "i2"]
        take3.set_result(("i2", pack([("new", ["ok"])])))
        await _settle()
        assert new.items.get_nowait() == ["ok"]
        boxes.stop()

    asyncio.run(scenario())


def test_a_failed_take_fails_accepted_runs_not_those_on_their_way() -> None:
    async def scenario() -> None:
        boxes, actor = Mailboxes(), FakeActor()
        _, here = boxes.open(actor, "here")
        _, take1 = await actor.next_take()
        boxes.accepted(actor, here, "i1")
        take1.set_result(("i1", pack([])))
        await _settle()
        _, on_way = boxes.open(actor, "on_way")  # its start is still in flight
        _, take2 = await actor.next_take()
        take2.set_exception(ray.exceptions.RayActorError())
        await asyncio.sleep(0.01)
        assert isinstance(here.items.get_nowait(), ray.exceptions.RayActorError)
        assert on_way.items.empty()
        boxes.close(actor, "here")
        await asyncio.sleep(0.3)  # it takes again after a pause: "on_way" still waits
        assert [t for t in actor.takes if not t[1].done()]
        boxes.stop()

    asyncio.run(scenario())


def test_a_take_that_fails_otherwise_fails_every_run_instead_of_leaving_it_waiting() -> None:
    async def scenario() -> None:
        from raygents.errors import RaygentsError

        boxes, actor = Mailboxes(), FakeActor()
        _, here = boxes.open(actor, "here")
        _, on_way = boxes.open(actor, "on_way")
        boxes.accepted(actor, here, "i1")
        _, take = await actor.next_take()
        take.set_exception(TypeError("a bug"))
        await _settle()
        for run in (here, on_way):
            error = run.items.get_nowait()
            assert isinstance(error, RaygentsError) and "a bug" in str(error)
        assert len(actor.takes) == 1  # and it stopped taking

    asyncio.run(scenario())


def test_abandon_stops_the_poller_of_an_actor_no_run_uses() -> None:
    async def scenario() -> None:
        boxes, actor = Mailboxes(), FakeActor()
        boxes.open(actor, "r")
        _, take = await actor.next_take()
        boxes.abandon(actor)  # a run still uses it: keep polling
        await _settle()
        assert not take.cancelled()
        boxes.close(actor, "r")
        boxes.abandon(actor)
        await _settle()
        assert take.cancelled()

    asyncio.run(scenario())


def test_stop_cancels_every_poller() -> None:
    async def scenario() -> None:
        boxes, actor = Mailboxes(), FakeActor()
        boxes.open(actor, "r")
        _, take = await actor.next_take()
        tasks = boxes.stop()
        await asyncio.wait(tasks)
        assert take.cancelled() and all(t.cancelled() for t in tasks)

    asyncio.run(scenario())


def _starting(boxes: Mailboxes, actor: FakeActor, names: list[str]) -> list[Any]:
    """Open and start one run per name in this turn of the event loop."""
    tasks = []
    for name in names:
        caller, run = boxes.open(actor, name)
        tasks.append(asyncio.ensure_future(boxes.start(actor, caller, run, f"envelope {name}")))
    return tasks


def test_starts_of_one_loop_turn_go_in_one_call() -> None:
    async def scenario() -> None:
        boxes, actor = Mailboxes(), FakeActor()
        first = _starting(boxes, actor, ["a", "b", "c"])
        await _settle()
        [(envelopes, answer)] = actor.starts
        assert envelopes == ["envelope a", "envelope b", "envelope c"]
        answer.set_result("i1")
        assert await asyncio.gather(*first) == ["i1"] * 3
        later = _starting(boxes, actor, ["d"])  # a later turn: a call of its own
        await _settle()
        assert len(actor.starts) == 2 and actor.starts[1][0] == ["envelope d"]
        actor.starts[1][1].set_result("i1")
        await asyncio.gather(*later)
        boxes.stop()

    asyncio.run(scenario())


def test_a_start_that_fails_otherwise_is_tried_once_per_run() -> None:
    """One run's envelope that cannot travel (an unpicklable context) fails only that run."""

    async def scenario() -> None:
        boxes, actor = Mailboxes(), FakeActor()
        runs = _starting(boxes, actor, ["a", "bad", "c"])
        await _settle()
        actor.starts[0][1].set_exception(TypeError("cannot pickle"))
        await _settle()
        alone = {envelopes[0]: answer for envelopes, answer in actor.starts[1:]}
        assert sorted(alone) == ["envelope a", "envelope bad", "envelope c"]
        alone["envelope bad"].set_exception(TypeError("cannot pickle"))
        alone["envelope a"].set_result("i1")
        alone["envelope c"].set_result("i1")
        a, bad, c = await asyncio.gather(*runs, return_exceptions=True)
        assert (a, c) == ("i1", "i1") and isinstance(bad, TypeError)
        boxes.stop()

    asyncio.run(scenario())


def test_a_start_that_reaches_no_actor_fails_every_run_of_the_call() -> None:
    async def scenario() -> None:
        boxes, actor = Mailboxes(), FakeActor()
        runs = _starting(boxes, actor, ["a", "b"])
        await _settle()
        actor.starts[0][1].set_exception(ray.exceptions.RayActorError())
        results = await asyncio.gather(*runs, return_exceptions=True)
        assert all(isinstance(r, ray.exceptions.RayActorError) for r in results)
        assert len(actor.starts) == 1  # not tried again here: the run's recovery does that
        boxes.stop()

    asyncio.run(scenario())


def test_a_cancelled_start_leaves_the_others_of_its_turn_alone() -> None:
    async def scenario() -> None:
        boxes, actor = Mailboxes(), FakeActor()
        gone, kept = _starting(boxes, actor, ["gone", "kept"])
        gone.cancel()
        await _settle()
        [(envelopes, answer)] = actor.starts
        assert envelopes == ["envelope kept"]
        answer.set_result("i1")
        assert await kept == "i1"
        boxes.stop()

    asyncio.run(scenario())


# --- the actor's side: outboxes ------------------------------------------------------------


async def _take(actor: Any, *args: Any) -> tuple[str, list[tuple[str, Any]]]:
    """A real actor's take, its items unpacked as the caller's mailbox does."""
    instance, blob = await actor.take(*args)
    assert isinstance(blob, bytes)
    return instance, unpack(blob)


def _actor() -> Any:
    import raygents as rg
    from raygents.runtime.actor import AgentActor
    from raygents.testing import ScriptedModel, text

    agent = rg.Agent("outboxed", model=ScriptedModel([text("x")]))
    return AgentActor({"outboxed": agent}, "outboxed", "fp", "ns")


def test_a_take_waits_for_items_and_hands_each_over_once() -> None:
    async def scenario() -> None:
        actor = _actor()
        me, _ = await _take(actor, "c", 0.01)  # nothing: it waited, then answered empty
        taking = asyncio.ensure_future(_take(actor, "c", 5.0, me))
        await _settle()
        assert not taking.done()
        outbox = actor._outbox("c")
        outbox.post("r1", ["e1"])
        outbox.post("r2", ["e2"])
        assert await asyncio.wait_for(taking, 1.0) == (me, [("r1", ["e1"]), ("r2", ["e2"])])
        assert await _take(actor, "c", 0.01, me) == (me, [])
        assert "c" not in actor._outboxes  # no runs, nothing left: forgotten

    asyncio.run(scenario())


def test_events_of_runs_that_do_not_stream_wait_for_company() -> None:
    """Lazy items wait up to ``_LAZY_EVENTS_S`` for an urgent one (an outcome, a streamed
    run's events), which sends everything waiting at once, in order."""

    async def scenario() -> None:
        from raygents.runtime import actor as actor_module

        actor = _actor()
        me, _ = await _take(actor, "c", 0.01)
        outbox = actor._outbox("c")
        outbox.post("r1", ["lazy 1"], urgent=False)
        taking = asyncio.ensure_future(_take(actor, "c", 5.0, me))
        await asyncio.sleep(actor_module._LAZY_EVENTS_S / 5)
        assert not taking.done()
        outbox.post("r2", ["lazy 2"], urgent=False)
        outbox.post("r1", "outcome")
        assert await asyncio.wait_for(taking, 1.0) == (
            me,
            [("r1", ["lazy 1"]), ("r2", ["lazy 2"]), ("r1", "outcome")],
        )
        # alone, lazy items go once the oldest has waited the window
        outbox = actor._outbox("c")  # (an empty outbox without runs was forgotten)
        outbox.post("r2", ["lazy 3"], urgent=False)
        loop = asyncio.get_running_loop()
        began = loop.time()
        taking = asyncio.ensure_future(_take(actor, "c", 5.0, me))
        await asyncio.sleep(0.01)
        outbox.post("r2", ["lazy 4"], urgent=False)  # joins; does not push the deadline
        assert await asyncio.wait_for(taking, 2.0) == (me, [("r2", ["lazy 3"]), ("r2", ["lazy 4"])])
        waited = loop.time() - began
        assert actor_module._LAZY_EVENTS_S * 0.8 <= waited < actor_module._LAZY_EVENTS_S * 3
        assert outbox.timer is None and not outbox.ready.is_set()
        assert not outbox.takes  # (a take that was woken, or timed out, leaves nothing behind)
        assert await _take(actor, "c", 0.05, me) == (me, [])
        assert not outbox.takes

    asyncio.run(scenario())


def test_events_of_a_run_that_does_not_stream_join_its_list_in_the_outbox() -> None:
    """A run's lazy events gather in one list among the items until something else of the
    run (its outcome) or a take comes; then its next events start a new list."""

    async def scenario() -> None:
        actor = _actor()
        outbox = actor._outbox("c")
        outbox.add_lazy("r1", "e1")
        outbox.add_lazy("r2", "x1")
        outbox.add_lazy("r1", "e2")
        assert outbox.items == [("r1", ["e1", "e2"]), ("r2", ["x1"])]
        assert outbox.timer is not None and not outbox.ready.is_set()  # lazy: no take wakes
        outbox.post("r1", "outcome")
        assert outbox.ready.is_set()
        outbox.add_lazy("r1", "after")  # (a run handed back here later) goes after it
        outbox.add_lazy("r2", "x2")
        items = [("r1", ["e1", "e2"]), ("r2", ["x1", "x2"]), ("r1", "outcome"), ("r1", ["after"])]
        assert outbox.items == items
        assert outbox.drain() == items
        outbox.add_lazy("r2", "x3")  # the lists taken are closed
        assert outbox.items == [("r2", ["x3"])]

    asyncio.run(scenario())


def test_a_take_from_a_caller_that_saw_another_incarnation_returns_at_once() -> None:
    async def scenario() -> None:
        actor = _actor()
        me, items = await asyncio.wait_for(_take(actor, "c", 30.0, "an-older-one"), 1.0)
        assert me != "an-older-one" and items == []

    asyncio.run(scenario())


def test_outboxes_of_callers_gone_for_long_are_dropped() -> None:
    async def scenario() -> None:
        from raygents.runtime import actor as actor_module

        actor = _actor()
        actor._outbox("gone").post("r", ["never taken"])
        actor._outbox("gone").taken -= actor_module._OUTBOX_IDLE_S + 1
        actor._outbox("here")  # a new caller's outbox sweeps out the stale ones
        assert set(actor._outboxes) == {"here"}

    asyncio.run(scenario())


def test_a_run_whose_task_raises_still_sends_a_failed_outcome() -> None:
    """A bug in the actor's run code must not leave the caller waiting for an outcome."""

    async def scenario() -> None:
        from raygents.envelope import Envelope, Outcome, RunState
        from raygents.messages import to_messages

        actor = _actor()

        async def broken(*args: Any) -> Any:
            raise RuntimeError("boom")

        actor._run = broken
        state = RunState(run_id="r1", agent_name="outboxed", messages=to_messages("hi"))
        me = await actor.start([Envelope(state, "fp", None)], "c")
        _, items = await _take(actor, "c", 2.0, me)
        [(run_id, outcome)] = items
        assert run_id == "r1" and isinstance(outcome, Outcome) and outcome.kind == "failed"
        assert "boom" in str(outcome.error)

    asyncio.run(scenario())


class _Local(Exception):
    """Defined in a test module that a worker may lack: still packed (through cloudpickle)."""


def test_pack_falls_back_to_cloudpickle_for_what_pickle_refuses() -> None:
    local = type("Dynamic", (_Local,), {})  # a class the standard pickler cannot name
    items = [("r1", ["e1"]), ("r2", [local("boom")])]
    [first, (run_id, [error])] = unpack(pack(items))
    assert first == ("r1", ["e1"]) and run_id == "r2"
    assert type(error).__name__ == "Dynamic" and error.args == ("boom",)
