"""The coordinator's calls as its callers make them, against a scripted coordinator (no Ray)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import ray.exceptions
from fakes import FakeHandle

from raygents.errors import RunNotFound, TooManyRuns
from raygents.runtime.link.coordinator_client import CoordinatorClient
from raygents.runtime.link.settings import Settings


class _Coordinator:
    """Answers like the coordinator; fails its next ``failures`` calls as an unavailable actor."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures

    def _maybe_fail(self) -> None:
        if self.failures:
            self.failures -= 1
            raise ray.exceptions.ActorUnavailableError("restarting", None)

    def settings(self) -> Settings:
        return Settings()

    def claim(
        self,
        run_id: str,
        owner: str,
        agent_name: str,
        force: bool,
        tenant: str | None,
        group: tuple[str | None, str] | None = None,
    ) -> tuple[None, int]:
        self._maybe_fail()
        return None, 3

    def claim_many(self, claims: list[tuple[str, str, str, bool]]) -> list[list[Any]]:
        return [[None, i + 1] for i, _ in enumerate(claims)]  # (Ray may answer lists)

    def claim_runs(self, claims: list[tuple[str, str, str, str | None]]) -> list[Any]:
        return [[None, 1], TooManyRuns(tenant="acme", limit=2)]

    def load(self, run_id: str) -> tuple[bytes, ...]:
        return (b"a", b"b")

    def get_run(self, run_id: str) -> None:
        raise ray.exceptions.RayTaskError("get_run", "traceback", RunNotFound("no such run"))


def _client(coordinator: _Coordinator, **kwargs: Any) -> tuple[CoordinatorClient, FakeHandle]:
    handle = FakeHandle(coordinator)
    return CoordinatorClient("ns", handle, **kwargs), handle


async def test_each_call_answers_in_its_own_types() -> None:
    client, handle = _client(_Coordinator())
    assert await client.claim("r1", "me", "agent") == (None, 3)
    assert await client.claim_many([("a", "me", "x", True), ("b", "me", "x", True)]) == [
        (None, 1),
        (None, 2),
    ]
    first, refused = await client.claim_runs([("a", "me", "x", None), ("b", "me", "x", "acme")])
    assert first == (None, 1) and isinstance(refused, TooManyRuns) and refused.tenant == "acme"
    assert await client.load("r1") == [b"a", b"b"]
    assert handle.calls["claim"] == [("r1", "me", "agent", False, None, None)]


async def test_settings_are_fetched_once_and_again_after_a_replacement() -> None:
    client, handle = _client(_Coordinator())
    with pytest.raises(AssertionError):
        client.cached_settings()
    await client.settings()
    await client.settings()
    assert client.cached_settings().durability == "sync"
    assert len(handle.calls["settings"]) == 1
    other = FakeHandle(_Coordinator())
    client.replace(other)
    await client.settings()
    assert client.handle() is other and len(other.calls["settings"]) == 1


async def test_a_raygents_error_comes_back_without_rays_wrapping() -> None:
    client, _ = _client(_Coordinator())
    with pytest.raises(RunNotFound, match="no such run"):
        await client.get_run("nope")


async def test_a_restarting_coordinator_is_waited_for() -> None:
    client, handle = _client(_Coordinator(failures=2))
    assert await client.claim("r1", "me", "agent") == (None, 3)
    assert len(handle.calls["claim"]) == 3


async def test_a_driver_revives_a_coordinator_gone_for_good() -> None:
    revived: list[Any] = []
    fresh = FakeHandle(_Coordinator())

    async def revive(failed: Any) -> bool:
        revived.append(failed)
        client.replace(fresh)
        return True

    lost = _Coordinator(failures=1)
    client, handle = _client(lost, revive=revive)
    assert await client.claim("r1", "me", "agent") == (None, 3)
    assert revived == [handle] and len(fresh.calls["claim"]) == 1


async def test_past_its_patience_the_call_raises() -> None:
    client, _ = _client(_Coordinator(failures=1_000))
    with pytest.raises(ray.exceptions.ActorUnavailableError):
        await asyncio.wait_for(
            client._call(lambda c: c.claim.remote("r1", "me", "a", False, None), patience_s=0.0),
            5,
        )
