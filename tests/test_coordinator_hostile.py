"""The coordinator against a hostile or damaged store, and its bounds: a rebuild that never
raises (each bad run is listed with its reason), failure records that survive a restart,
completed runs that are never claimed again, and tables that stay bounded (no Ray: the plain
classes over ``memory://`` and ``file://`` stores)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from raygents import checkpoint, codec
from raygents.runtime import coordinator as coordinator_module
from raygents.runtime.coordinator import Coordinator, RunInfo
from raygents.store import _MEMORY, MemoryStore


def _url() -> str:
    return f"memory://hostile-{os.urandom(4).hex()}"


def _record(
    run_id: str = "good", seq: int = 1, status: str = "suspended", **extra: Any
) -> dict[str, Any]:
    state = {"agent_name": "agent", "turns": 3, "epoch": 1}
    record: dict[str, Any] = {
        "format": 1,
        "seq": seq,
        "kind": "full",
        "status": status,
        "keep": 0,
        "append": [],
        "state": state,
        "run_id": run_id,
        "at": time.time(),
    }
    return {**record, **extra}


def _put(url: str, key: str, value: Any, hmac_key: bytes | None = None) -> None:
    data = value if isinstance(value, bytes) else codec.encode(value, key=hmac_key)
    MemoryStore(url.removeprefix("memory://")).put(key, data)


def _plant(url: str, key: str, data: bytes) -> None:
    """A key no store would accept (``put`` validates keys), written behind its back."""
    name = url.removeprefix("memory://")
    MemoryStore(name)
    _MEMORY[name][key] = data


def _with_good_run(url: str) -> None:
    _put(url, checkpoint.key_for("good", 1, 1), _record())


def _rebuilt(url: str, **options: Any) -> Coordinator:
    coord = Coordinator("test", url, **options)
    asyncio.run(coord.rebuilt(timeout_s=10.0))
    return coord


def _assert_good_run_rebuilt(coord: Coordinator) -> None:
    good = coord.runs["good"]
    assert (good.status, good.agent_name, good.turns, good.seq) == ("suspended", "agent", 3, 1)


def _assert_listed(coord: Coordinator, run_id: str, *words: str) -> None:
    info = coord.runs[run_id]
    assert info.status == "failed", info
    assert info.last_error is not None and info.last_error.startswith("unreadable:"), info
    for word in words:
        assert word in info.last_error, (word, info.last_error)
    assert run_id in coord.unreadable


# --- 5: a rebuild never raises; each bad run is listed with its reason --------------------


def test_a_non_numeric_fence_mark_is_ignored_in_a_good_run_and_listed_alone() -> None:
    url = _url()
    _with_good_run(url)
    _put(url, "runs/good/fence.x", b"")  # beside good records: ignored, logged
    _put(url, "runs/evil/fence.x", b"")  # alone: nothing to rebuild, listed
    coord = _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    assert coord.epochs["good"] == 1
    _assert_listed(coord, "evil", "runs/evil/fence.x")


def test_an_unsigned_record_without_a_status_is_listed() -> None:
    url = _url()
    _with_good_run(url)
    record = _record("nostatus")
    del record["status"]
    _put(url, checkpoint.key_for("nostatus", 1, 1), record)
    coord = _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    _assert_listed(coord, "nostatus", "status", "0000000001.1.ckpt")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seq", "1"),
        ("seq", True),
        ("seq", 7),  # not the key's seq
        ("status", "exploded"),
        ("status", ["failed"]),
        ("state", ["not", "a", "dict"]),
        ("at", "yesterday"),
        ("error", {"nested": True}),
        ("run_id", "someone-else"),
    ],
)
def test_a_record_with_a_wrong_field_is_listed(field: str, value: Any) -> None:
    url = _url()
    _with_good_run(url)
    _put(url, checkpoint.key_for("odd", 1, 1), {**_record("odd"), field: value})
    coord = _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    _assert_listed(coord, "odd", "0000000001.1.ckpt")
    error = coord.runs["odd"].last_error or ""
    assert any(word in error for word in (field, "belongs to run", "not a valid record")), error


@pytest.mark.parametrize(
    ("field", "value"),
    [("turns", "many"), ("turns", -1), ("agent_name", 7), ("epoch", "e"), ("epoch", 2**40)],
)
def test_a_state_with_a_wrong_field_is_listed(field: str, value: Any) -> None:
    url = _url()
    _with_good_run(url)
    record = _record("odd")
    record["state"] = {**record["state"], field: value}
    _put(url, checkpoint.key_for("odd", 1, 1), record)
    coord = _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    _assert_listed(coord, "odd", "0000000001.1.ckpt")
    error = coord.runs["odd"].last_error or ""
    assert any(word in error for word in (field, "belongs to run")), error


@pytest.mark.parametrize(
    "data",
    [b"", b"RGCK", b"x" * 14, os.urandom(200), codec.encode([1, 2]), b"RGCK\x01" + bytes(60)],
)
def test_a_record_that_does_not_decode_is_listed(data: bytes) -> None:
    url = _url()
    _with_good_run(url)
    _put(url, checkpoint.key_for("broken", 1, 1), data)
    coord = _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    _assert_listed(coord, "broken", "0000000001.1.ckpt")


def test_a_short_hmac_key_fails_each_read_not_the_coordinator() -> None:
    url = _url()
    _with_good_run(url)
    coord = _rebuilt(url, hmac_key=b"k" * 14)  # codec refuses keys under 16 bytes
    _assert_listed(coord, "good", "key")


def test_keys_no_run_writes_are_listed_under_their_run_id() -> None:
    url = _url()
    _with_good_run(url)
    data = codec.encode(_record("x"))
    _plant(url, "runs/a b/0000000001.1.ckpt", data)
    _plant(url, "runs/../0000000001.1.ckpt", data)
    _plant(url, "runs//0000000001.1.ckpt", data)
    _plant(url, "runs/" + "r" * 300 + "/0000000001.1.ckpt", data)
    _plant(url, "runs/lonely", data)  # a file where a run's folder should be
    coord = _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    for run_id in ("a b", "..", "", "r" * 300):
        _assert_listed(coord, run_id, "run id")
    _assert_listed(coord, "lonely", "runs/lonely")


def test_a_rebuild_over_a_file_store_with_planted_files_lists_them(tmp_path: Any) -> None:
    url = f"file://{tmp_path}"
    Coordinator("test", url)  # makes the store
    good = tmp_path / "runs" / "good"
    good.mkdir(parents=True)
    (good / "0000000001.1.ckpt").write_bytes(codec.encode(_record()))
    (good / "fence.x").write_bytes(b"")
    evil = tmp_path / "runs" / "evil"
    evil.mkdir()
    (evil / "0000000001.1.ckpt").write_bytes(b"x" * 14)
    coord = _rebuilt(url)
    _assert_good_run_rebuilt(coord)
    _assert_listed(coord, "evil", "0000000001.1.ckpt")


def test_an_unlistable_store_starts_an_empty_table() -> None:
    class Broken(MemoryStore):
        def _list(self, prefix: str) -> list[str]:
            raise OSError("the disk is on fire")

    url = _url()
    _with_good_run(url)
    original = coordinator_module.open_store
    try:
        coordinator_module.open_store = lambda _: Broken(url.removeprefix("memory://"))  # type: ignore[assignment]
        coord = Coordinator("test", url)
    finally:
        coordinator_module.open_store = original
    assert coord.runs == {}
    assert coord.rebuild_error is not None and "fire" in coord.rebuild_error


def test_list_runs_of_a_rebuilt_table_reports_the_unreadable_runs() -> None:
    url = _url()
    _with_good_run(url)
    _put(url, checkpoint.key_for("broken", 1, 1), b"x" * 14)

    async def main() -> list[RunInfo]:
        coord = Coordinator("test", url)
        return await coord.list_runs("failed")

    [broken] = asyncio.run(main())
    assert broken.run_id == "broken" and broken.last_error is not None


# --- 6: a failure record is stored after the failing activation's own records ------------


class _Remote:
    """A coordinator method as an agent actor calls it on a Ray handle (``.remote``)."""

    def __init__(self, method: Any) -> None:
        self.method = method

    def remote(self, *args: Any) -> Any:
        result = self.method(*args)
        if asyncio.iscoroutine(result):
            return asyncio.ensure_future(result)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(result)
        return done


class _Handle:
    """A plain Coordinator behind the handle interface agent actors use."""

    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord

    def __getattr__(self, name: str) -> _Remote:
        return _Remote(getattr(self.coord, name))


def test_a_run_that_fails_after_its_own_records_stores_its_failure(tmp_path: Any) -> None:
    import raygents as rg
    from raygents.envelope import Envelope, RunState
    from raygents.errors import ModelError
    from raygents.messages import Message
    from raygents.runtime.actor import AgentActor
    from raygents.runtime.drive import SuspendToken
    from raygents.testing import ScriptedModel, calls

    @rg.tool(remote=False)
    def lookup(q: str) -> str:
        """Look up ``q``."""
        return q.upper()

    model = ScriptedModel([calls(("lookup", {"q": "x"})), ModelError("the provider is down")])
    agent = rg.Agent("failing", model=model, tools=[lookup])
    url = f"file://{tmp_path}"

    async def main() -> None:
        coord = Coordinator("test", url)
        actor = AgentActor({"failing": agent}, "failing", "fp", "ns", coordinator=_Handle(coord))
        actor._beater = object()  # type: ignore[assignment]  # (no beats outside Ray)
        actor._store, actor._store_known = coord.store, True  # it writes records itself
        _, epoch = await coord.claim("r1", "driver", "failing")
        state = RunState(
            run_id="r1",
            agent_name="failing",
            messages=(Message("user", "go"),),
            input_len=1,
            epoch=epoch,
        )
        outcome = await actor._run(Envelope(state, "fp"), SuspendToken("r1"), lambda e: None)
        assert outcome.kind == "failed" and "provider is down" in str(outcome.error)
        await coord.flush()
        assert coord.runs["r1"].status == "failed"

    asyncio.run(main())
    stored = Coordinator("test", url).store.list("runs/r1/")
    assert len([k for k in stored if k.endswith(".ckpt")]) >= 2, stored  # the batch's, the end
    rebuilt = _rebuilt(url)  # a coordinator that restarted
    info = rebuilt.runs["r1"]
    assert info.status == "failed", info
    assert info.last_error is not None and "provider is down" in info.last_error
