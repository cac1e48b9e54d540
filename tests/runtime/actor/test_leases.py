"""Leases on runs' dispatches: a copy that holds one puts its checked records and its
completion marker alone, and a dispatch that replaces it marks the store only once the lease
lapsed (no Ray: the real coordinator object behind a fake handle, a file store or moto's S3
server)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import ray
import writerkit
from fakes import FakeHandle

from raygents.core.envelope import Outcome
from raygents.errors import CheckpointError
from raygents.records import checkpoint
from raygents.runtime.actor import reports as reports_module
from raygents.runtime.actor.leases import Leases, clock
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.coordinator.leases import MARGIN_S, LeaseBook
from raygents.runtime.link.settings import Recovery, Settings
from raygents.stores.base import Store
from raygents.stores.open import open_store

LEASE_S = 1.5  # (long enough for a loaded machine to ask and put within it)
RECOVERY = Recovery(stale_after_s=3 * LEASE_S)


@pytest.fixture(autouse=True)
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reports_module, "_NOTE_WINDOW_S", 0.01)


def _s3(request: pytest.FixtureRequest) -> str:
    from s3_server import create_bucket

    server = request.getfixturevalue("session_s3")
    return f"s3://{create_bucket(server.endpoint_url)}/runs"


def _counted(store: Store) -> list[str]:
    """The store's requests by kind, in order (wrapped on the instance)."""
    calls: list[str] = []
    own = type(store).put_if_dir is not Store.put_if_dir  # (else it is a put)
    for name in ("put", "put_if_dir", "has", "list", "mark") if own else ("put", "has", "list"):
        real = getattr(store, name)

        def counted(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls.append("put" if _name == "put_if_dir" else _name)
            return _real(*args)

        setattr(store, name, counted)
    return calls


# --- the actor's side ---------------------------------------------------------------------
async def test_runs_that_ask_in_one_turn_share_a_request_and_hold_only_their_grant() -> None:
    asked: list[list[tuple[str, int]]] = []

    async def ask(runs: list[tuple[str, int]]) -> list[str]:
        asked.append(list(runs))
        return [run_id for run_id, _ in runs if run_id != "denied"]

    leases = Leases(ask, LEASE_S)
    first, second = leases.renew("a", 1), leases.renew("b", 2)
    denied = leases.renew("denied", 1)
    assert first is second is denied and first is not None
    await first
    answered = clock()
    assert asked == [[("a", 1), ("b", 2), ("denied", 1)]]
    assert leases.holds("a", 1, clock()) and leases.holds("b", 2, clock())
    assert not leases.holds("denied", 1, clock()), "a run the coordinator refused"
    assert not leases.holds("a", 2, clock()), "another dispatch of the run"
    assert not leases.holds("a", 1, answered + LEASE_S), "past the lease, counted from the ask"
    assert leases.renew("a", 1) is None, "over half the lease left: no request"
    leases.drop("a")
    assert not leases.holds("a", 1, clock())


async def test_a_failed_request_grants_nothing_and_keeps_nobody_waiting() -> None:
    async def ask(runs: list[tuple[str, int]]) -> list[str]:
        raise ray.exceptions.RayActorError()

    leases = Leases(ask, LEASE_S)
    renewal = leases.renew("a", 1)
    assert renewal is not None
    await asyncio.wait_for(renewal, 5)
    assert not leases.holds("a", 1, clock())
    assert leases.renew("a", 1) is not None, "asked again next time"


# --- the coordinator's side ---------------------------------------------------------------
def test_the_coordinator_grants_only_a_running_runs_newest_dispatch() -> None:
    now = [100.0]
    running = {("r1", 2)}
    book = LeaseBook(LEASE_S, lambda run_id, epoch: (run_id, epoch) in running, lambda: now[0])
    lasts = LEASE_S * 1.01 + MARGIN_S
    now[0] += 1.0
    assert book.grant([("r1", 1), ("r1", 2), ("r2", 1)]) == ["r1"]
    now[0] += 0.1
    assert book.lapse_in("r1") == pytest.approx(lasts - 0.1), "the grant of 0.1 s ago"
    assert book.lapse_in("r1") == pytest.approx(lasts - 0.1), "a second claim meanwhile"
    book.dispatched("r1")  # its new dispatch, never granted
    assert book.lapse_in("r1") == 0.0
    assert book.lapse_in("r2") == pytest.approx(lasts - 1.1), (
        "a run not dispatched here: a predecessor may have granted it up to this one's start"
    )
    now[0] += lasts
    assert book.lapse_in("r3") == 0.0
    book.dispatched("r4")
    book.forget("r4")  # it left the run table
    assert book.lapse_in("r4") == 0.0


# --- both, with a store ---------------------------------------------------------------------
async def test_a_leased_copy_puts_its_intents_and_its_marker_alone(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On S3, without a lease each intent is followed by the fence mark's and the previous
    record's looks, and the completion marker by a listing. With one: the puts alone (the
    first intent waits for the lease asked beside its put)."""
    coord = Coordinator("ns", Settings(store=_s3(request), recovery=RECOVERY))
    store = open_store(coord.store.url)
    calls = _counted(store)
    writer = await writerkit.writer(store, coord)
    _, epoch = await coord.claim("r1", "driver", "worker")
    state = await writer.save(writerkit.state("r1", epoch), "running", None)  # asks beside its put
    state = await writer.save(state, "running", None, checked=False)  # the batch's result
    state = await writer.save(state, "running", None)  # the next intent, leased
    await writer.finish(Outcome("completed", state))
    assert calls == ["put", "put", "put", "put"], calls
    keys = [k.rsplit("/", 1)[1] for k in store.list("runs/r1/")]
    assert keys[-1] == f"done.{epoch}"


async def test_a_file_store_copy_asks_for_no_lease_and_looks_instead(tmp_path: Path) -> None:
    """A local file store's looks are ``stat`` calls, cheaper than asking the coordinator."""
    coord = Coordinator("ns", Settings(store=f"file://{tmp_path}", recovery=RECOVERY))
    store = open_store(coord.store.url)
    calls = _counted(store)
    handle = FakeHandle(coord)
    writer = await writerkit.writer(store, coord, handle)
    _, epoch = await coord.claim("r1", "driver", "worker")
    state = await writer.save(writerkit.state("r1", epoch), "running", None)
    state = await writer.save(state, "running", None)
    await writer.finish(Outcome("completed", state))
    assert calls == ["put", "has", "put", "has", "has", "list", "put"], calls
    assert "lease" not in handle.calls


async def test_a_new_dispatch_marks_the_store_only_once_the_old_copys_lease_lapsed(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The old copy's leased intent landed before the recovery marked the store and read the
    run; once the lease lapsed, the old copy's next intent is checked and finds it fenced."""
    coord = Coordinator("ns", Settings(store=_s3(request), recovery=RECOVERY))
    marked: list[float] = []
    real_mark = coord.store.mark

    def mark(key: str) -> None:
        marked.append(clock())
        real_mark(key)

    coord.store.mark = mark  # type: ignore[method-assign]
    store = open_store(coord.store.url)
    writer = await writerkit.writer(store, coord)
    _, epoch = await coord.claim("r1", "driver", "worker")
    state = await writer.save(writerkit.state("r1", epoch), "running", None)
    leases = writer.leases()
    assert leases.holds("r1", epoch, clock())
    _, again = await coord.claim("r1", "driver-2", "worker", True)  # a recovery
    assert again == epoch + 1 and len(marked) == 1
    assert not leases.holds("r1", epoch, marked[0]), "marked while the copy held its lease"
    blobs, _ = await coord.records.load("r1", True)
    restored, _ = checkpoint.restore(blobs, run_id="r1", key=None)
    assert restored.seq == state.seq, "the recovery reads the leased copy's intent"
    with pytest.raises(CheckpointError, match="fenced"):
        await writer.save(state, "running", None)  # its lease lapsed: checked
    assert not leases.holds("r1", again, clock()), "no lease for the stale copy's request"


async def test_a_put_that_returns_after_the_lease_lapsed_is_checked(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A copy frozen in its put (a slow network, a stopped process): the put lands after the
    lease lapsed and the recovery marked the store. Where the put *returned* decides: the copy
    checks, finds the mark, and its tools never run."""
    coord = Coordinator("ns", Settings(store=_s3(request), recovery=RECOVERY))
    store = open_store(coord.store.url)
    writer = await writerkit.writer(store, coord)
    _, epoch = await coord.claim("r1", "driver", "worker")
    state = await writer.save(writerkit.state("r1", epoch), "running", None)
    assert writer.leases().holds("r1", epoch, clock())
    release = threading.Event()
    real_put = store.put_if_dir

    def frozen_put(key: str, data: bytes) -> bool:
        release.wait(10)
        return bool(real_put(key, data))

    store.put_if_dir = frozen_put  # type: ignore[method-assign]
    intent = asyncio.ensure_future(writer.save(state, "running", None))
    await asyncio.sleep(0.05)
    _, again = await coord.claim("r1", "driver-2", "worker", True)  # waits out the lease
    release.set()
    with pytest.raises(CheckpointError, match="fenced"):
        await intent
    assert again == epoch + 1
