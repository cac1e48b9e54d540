"""The caller's side of run mailboxes, against a scripted actor (no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import ray.exceptions
from fakes import FakeHandle

from raygents.runtime.link.mailbox import ActorRestarted, Mailboxes, pack, unpack


class _Actor:
    """Every take and start waits until the test answers it."""

    def __init__(self) -> None:
        self.takes: list[tuple[str, asyncio.Future[Any]]] = []
        self.known: list[str | None] = []
        """The incarnation each take said it last saw."""
        self.starts: list[tuple[list[Any], asyncio.Future[Any]]] = []

    def take(self, caller: str, wait_s: float, known: str | None) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.takes.append((caller, future))
        self.known.append(known)
        return future

    def start(self, envelopes: list[Any], caller: str) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.starts.append((list(envelopes), future))
        return future


class FakeActor(FakeHandle):
    """The handle of an :class:`_Actor`, with its takes and starts at hand."""

    def __init__(self) -> None:
        super().__init__(_Actor())

    @property
    def takes(self) -> list[tuple[str, asyncio.Future[Any]]]:
        return self.target.takes

    @property
    def known(self) -> list[str | None]:
        return self.target.known

    @property
    def starts(self) -> list[tuple[list[Any], asyncio.Future[Any]]]:
        return self.target.starts

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


async def test_items_reach_their_runs_in_order() -> None:
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


async def test_a_new_incarnation_fails_the_runs_the_old_one_accepted() -> None:
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


async def test_a_failed_take_fails_accepted_runs_not_those_on_their_way() -> None:
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


async def test_a_take_that_fails_otherwise_fails_every_run_instead_of_leaving_it_waiting() -> None:
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


async def test_abandon_stops_the_poller_of_an_actor_no_run_uses() -> None:
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


async def test_stop_cancels_every_poller() -> None:
    boxes, actor = Mailboxes(), FakeActor()
    boxes.open(actor, "r")
    _, take = await actor.next_take()
    tasks = boxes.stop()
    await asyncio.wait(tasks)
    assert take.cancelled() and all(t.cancelled() for t in tasks)


def _starting(boxes: Mailboxes, actor: FakeActor, names: list[str]) -> list[Any]:
    """Open and start one run per name in this turn of the event loop."""
    tasks = []
    for name in names:
        caller, run = boxes.open(actor, name)
        tasks.append(asyncio.ensure_future(boxes.start(actor, caller, run, f"envelope {name}")))
    return tasks


async def test_starts_of_one_loop_turn_go_in_one_call() -> None:
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


async def test_a_start_that_fails_otherwise_is_tried_once_per_run() -> None:
    """One run's envelope that cannot travel (an unpicklable context) fails only that run."""
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


async def test_a_start_that_reaches_no_actor_fails_every_run_of_the_call() -> None:
    boxes, actor = Mailboxes(), FakeActor()
    runs = _starting(boxes, actor, ["a", "b"])
    await _settle()
    actor.starts[0][1].set_exception(ray.exceptions.RayActorError())
    results = await asyncio.gather(*runs, return_exceptions=True)
    assert all(isinstance(r, ray.exceptions.RayActorError) for r in results)
    assert len(actor.starts) == 1  # not tried again here: the run's recovery does that
    boxes.stop()


async def test_a_cancelled_start_leaves_the_others_of_its_turn_alone() -> None:
    boxes, actor = Mailboxes(), FakeActor()
    gone, kept = _starting(boxes, actor, ["gone", "kept"])
    gone.cancel()
    await _settle()
    [(envelopes, answer)] = actor.starts
    assert envelopes == ["envelope kept"]
    answer.set_result("i1")
    assert await kept == "i1"
    boxes.stop()


class _Local(Exception):
    """Defined in a test module that a worker may lack: still packed (through cloudpickle)."""


def test_pack_falls_back_to_cloudpickle_for_what_pickle_refuses() -> None:
    local = type("Dynamic", (_Local,), {})  # a class the standard pickler cannot name
    items = [("r1", ["e1"]), ("r2", [local("boom")])]
    [first, (run_id, [error])] = unpack(pack(items))
    assert first == ("r1", ["e1"]) and run_id == "r2"
    assert type(error).__name__ == "Dynamic" and error.args == ("boom",)
