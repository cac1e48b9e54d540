"""Claims of runs a process dispatches (agent-as-tool children, recoveries) travel to the
coordinator in batches (no Ray: a fake coordinator handle)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raygents.runtime.directory import Directory


class _Method:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[list[tuple[str, str, str, bool]]] = []

    def remote(self, claims: list[tuple[str, str, str, bool]]) -> Any:
        self.calls.append(list(claims))
        return self.answer(claims)


class _Coordinator:
    def __init__(self, answer: Any) -> None:
        self.claim_many = _Method(answer)


async def _epochs(claims: list[tuple[str, str, str, bool]]) -> list[tuple[None, int]]:
    await asyncio.sleep(0.01)
    return [(None, len(run_id)) for run_id, *_ in claims]


def test_claims_of_one_loop_turn_go_in_one_call_and_each_gets_its_answer() -> None:
    coordinator = _Coordinator(_epochs)
    directory = Directory("test", coordinator, owner="actor-1")

    async def main() -> None:
        first = await asyncio.gather(*(directory.claim("r" * n, "worker") for n in (1, 2, 3)))
        assert first == [(None, 1), (None, 2), (None, 3)]
        assert coordinator.claim_many.calls == [
            [(run_id, "actor-1", "worker", True) for run_id in ("r", "rr", "rrr")]
        ]
        assert await directory.claim("rrrr", "other") == (None, 4)  # a later turn: its own call
        assert len(coordinator.claim_many.calls) == 2

    asyncio.run(main())


def test_a_failed_claim_call_fails_every_claim_in_it() -> None:
    async def refuse(claims: Any) -> Any:
        raise RuntimeError("the coordinator refused")

    directory = Directory("test", _Coordinator(refuse), owner="actor-1")

    async def main() -> None:
        results = await asyncio.gather(
            directory.claim("a", "worker"), directory.claim("b", "worker"), return_exceptions=True
        )
        assert [str(r) for r in results] == ["the coordinator refused"] * 2

    asyncio.run(main())


def test_a_cancelled_claim_leaves_the_others_of_its_call_alone() -> None:
    coordinator = _Coordinator(_epochs)
    directory = Directory("test", coordinator, owner="actor-1")

    async def main() -> None:
        gone = asyncio.ensure_future(directory.claim("gone", "worker"))
        kept = asyncio.ensure_future(directory.claim("kept", "worker"))
        await asyncio.sleep(0)  # both are in the call now
        gone.cancel()
        assert await kept == (None, 4)
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert len(coordinator.claim_many.calls) == 1

    asyncio.run(main())
