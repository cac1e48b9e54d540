"""The keeper's records in a file store, read back as a restarted keeper reads them: queued
messages in the order they run (an interrupting one first), the runs started in the order
they started, deliveries with their body and how they ended; damaged or forged records are
left out."""

from __future__ import annotations

import asyncio
from pathlib import Path

from raygents.serve.keeperstore import KeeperRecords, Queued, app_folder

KEY = b"k" * 32


def _records(tmp_path: Path, key: bytes | None = KEY) -> KeeperRecords:
    return KeeperRecords(f"file://{tmp_path / 'store'}", key, app_folder("ns", "/"))


def test_threads_read_back_in_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        records = _records(tmp_path)
        a, b, c = (
            Queued(f"run-{n}", {"agent": "chat", "input": n}, seq)
            for n, seq in (("a", 1), ("b", 2), ("c", 3))
        )
        for q in (a, b, c):
            await records.accepted("t1", "chat", q)
        urgent = Queued("run-i", {"agent": "chat", "input": "i", "_carry": "run-a"}, 4, front=True)
        await records.accepted("t1", "chat", urgent)
        await records.started("t1", "chat", a, 1, turn=5)
        await records.started("t1", "chat", urgent, 2, turn=6)
        failed = Queued("run-x", {"agent": "chat", "input": "x"}, 7)
        await records.accepted("t2", "chat", failed)
        await records.started("t2", "chat", failed, None)  # (could not start: forgotten)

        back = await _records(tmp_path).read_back()
        t1 = back.threads["t1"]
        assert t1.agent == "chat"
        assert t1.started == [(5, "run-a", 1), (6, "run-i", 2)]
        assert [(q.run_id, q.request["input"], q.restored) for q in t1.queued] == [
            ("run-b", "b", True),
            ("run-c", "c", True),
        ]
        assert "t2" not in back.threads  # (its only message could not start)

    asyncio.run(scenario())


def test_interrupting_messages_go_first_latest_first(tmp_path: Path) -> None:
    async def scenario() -> None:
        records = _records(tmp_path)
        for run_id, seq, front in (
            ("q1", 1, False),
            ("i1", 2, True),
            ("q2", 3, False),
            ("i2", 4, True),
        ):
            await records.accepted("t", "chat", Queued(run_id, {"input": run_id}, seq, front))
        back = await _records(tmp_path).read_back()
        assert [q.run_id for q in back.threads["t"].queued] == ["i2", "i1", "q1", "q2"]

    asyncio.run(scenario())


def test_deliveries_read_back_with_their_body_and_end(tmp_path: Path) -> None:
    async def scenario() -> None:
        records = _records(tmp_path)
        await records.watching("r1", 1, "http://hooks.example/a")
        await records.body("r1", 1, b'{"run_id":"r1"}')
        await records.watching("r2", 1, "http://hooks.example/b")
        await records.body("r2", 1, b"old")
        await records.ended("r2", 1, {"state": "delivered", "attempts": 2})
        await records.watching("r2", 2, "http://hooks.example/b")  # (resumed: watched again)
        await records.watching("r3", 1, "http://hooks.example/c")
        await records.ended("r3", 1, {"state": "failed", "attempts": 5})
        back = (await _records(tmp_path).read_back()).webhooks
        assert (back["r1"].gen, back["r1"].body, back["r1"].done) == (1, b'{"run_id":"r1"}', None)
        assert (back["r2"].gen, back["r2"].body, back["r2"].done) == (2, None, None)
        assert back["r3"].done == {"state": "failed", "attempts": 5} and back["r3"].body is None
        await records.forget(["r3"])
        assert "r3" not in (await _records(tmp_path).read_back()).webhooks

    asyncio.run(scenario())


def test_records_of_another_key_or_damaged_are_left_out(tmp_path: Path) -> None:
    async def scenario() -> None:
        await _records(tmp_path, b"x" * 32).accepted(
            "t", "chat", Queued("forged", {"input": "pay"}, 1)
        )
        records = _records(tmp_path)
        await records.accepted("t", "chat", Queued("good", {"input": "hi"}, 2))
        records.store.put(f"{records.folder}/threads/t/000000000003-m", b"not a record")
        back = await records.read_back()
        assert [q.run_id for q in back.threads["t"].queued] == ["good"]

    asyncio.run(scenario())
