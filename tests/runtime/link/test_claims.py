"""Claims of runs a process dispatches (agent-as-tool children, recoveries) travel to the
coordinator in batches (no Ray: a fake coordinator handle)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fakes import FakeHandle

from raygents.runtime.link.directory import Directory

Claims = list[tuple[str, str, str, bool]]


class _Coordinator:
    """Answers ``claim_many`` as ``answer`` says."""

    def __init__(self, answer: Callable[[Claims], Awaitable[Any]]) -> None:
        self.answer = answer

    async def claim_many(self, claims: Claims) -> Any:
        return await self.answer(claims)


async def _epochs(claims: Claims) -> list[tuple[None, int]]:
    await asyncio.sleep(0.01)
    return [(None, len(run_id)) for run_id, *_ in claims]


def _directory(answer: Callable[[Claims], Awaitable[Any]]) -> tuple[Directory, FakeHandle]:
    coordinator = FakeHandle(_Coordinator(answer))
    return Directory("test", coordinator, owner="actor-1"), coordinator


async def test_claims_of_one_loop_turn_go_in_one_call_and_each_gets_its_answer() -> None:
    directory, coordinator = _directory(_epochs)
    first = await asyncio.gather(*(directory.claim("r" * n, "worker") for n in (1, 2, 3)))
    assert first == [(None, 1), (None, 2), (None, 3)]
    assert coordinator.calls["claim_many"] == [
        ([(run_id, "actor-1", "worker", True) for run_id in ("r", "rr", "rrr")],)
    ]
    assert await directory.claim("rrrr", "other") == (None, 4)  # a later turn: its own call
    assert len(coordinator.calls["claim_many"]) == 2


async def test_a_failed_claim_call_fails_every_claim_in_it() -> None:
    async def refuse(claims: Claims) -> Any:
        raise RuntimeError("the coordinator refused")

    directory, _ = _directory(refuse)
    results = await asyncio.gather(
        directory.claim("a", "worker"), directory.claim("b", "worker"), return_exceptions=True
    )
    assert [str(r) for r in results] == ["the coordinator refused"] * 2


async def test_a_cancelled_claim_leaves_the_others_of_its_call_alone() -> None:
    directory, coordinator = _directory(_epochs)
    gone = asyncio.ensure_future(directory.claim("gone", "worker"))
    kept = asyncio.ensure_future(directory.claim("kept", "worker"))
    await asyncio.sleep(0)  # both are in the call now
    gone.cancel()
    assert await kept == (None, 4)
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert len(coordinator.calls["claim_many"]) == 1
