"""Finding agent actors: a per-process cache in front of the coordinator."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import ray
import ray.exceptions

from raygents.errors import RaygentsError
from raygents.runtime.link.coalesce import Coalescer
from raygents.runtime.link.coordinator_client import CoordinatorClient
from raygents.runtime.link.handles import actor_key
from raygents.runtime.link.mailbox import Mailboxes
from raygents.runtime.link.settings import Settings

__all__ = ["Directory"]

_Claim = tuple[str, str, "asyncio.Future[tuple[Any, int]]"]
"""A claim waiting to go: the run id, its agent, and the caller's future."""


class Directory:
    """Looks up (and has the coordinator create) the actors serving each agent.

    Replicas are used round-robin. Only used from one event loop per process.
    """

    def __init__(
        self,
        namespace: str,
        coordinator: Any = None,
        owner: str = "",
        revive: Callable[[Any], Awaitable[bool]] | None = None,
    ) -> None:
        self.namespace = namespace
        self.client = CoordinatorClient(namespace, coordinator, revive)
        """The coordinator's calls (``revive``: see :class:`CoordinatorClient`)."""
        self.graphs: dict[str, tuple[bytes, dict[str, int], dict[str, str] | None]] = {}
        """Graph snapshots this process knows (pickle, replicas, definition fingerprints), to
        register again with a restarted coordinator."""
        self._actors: dict[tuple[str, str], list[Any]] = {}
        self._turn = itertools.count()
        self._watches: dict[str, _Watch] = {}
        self.owner = owner
        self._claims: Coalescer[None, _Claim] = Coalescer(self._claim_all)
        self.mailboxes = Mailboxes()
        """Where the runs this process dispatched to agent actors send their events back."""

    async def settings(self) -> Settings:
        """The coordinator's checkpoint settings (durability mode, integrity key), cached."""
        return await self.client.settings()

    def cached_settings(self) -> Settings:
        """The settings fetched by :meth:`settings` earlier."""
        return self.client.cached_settings()

    async def claim(self, run_id: str, agent_name: str) -> tuple[Any, int]:
        """Dispatch a run for this process, taking it over if another owner has it (see
        ``Coordinator.claim``): ``(previous owner's entry or None, epoch)``. Claims made in
        one turn of the event loop (the children of one tool batch) go in one call."""
        future: asyncio.Future[tuple[Any, int]] = asyncio.get_running_loop().create_future()
        self._claims.add(None, (run_id, agent_name, future))
        return await future

    async def _claim_all(self, key: None, claims: list[_Claim]) -> None:
        args = [(run_id, self.owner, agent_name, True) for run_id, agent_name, _ in claims]
        try:
            answers = await self.client.claim_many(args)
        except BaseException as exc:
            for *_, future in claims:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (*_, future), answer in zip(claims, answers, strict=True):
            if not future.done():  # (its run was cancelled meanwhile)
                future.set_result(answer)

    def coordinator(self) -> Any:
        """The namespace's coordinator actor."""
        return self.client.handle()

    def replace(self, coordinator: Any, settings: Settings | None = None) -> None:
        """Use another coordinator from now on (the one before is gone for good), with its
        ``settings`` if known; forget the agent actors the old one gave (they went with it)."""
        self.client.replace(coordinator, settings)
        self._actors.clear()

    async def actor(self, graph_fp: str, name: str) -> Any:
        """An actor serving agent ``name`` of graph ``graph_fp``."""
        key = (graph_fp, name)
        handles = self._actors.get(key)
        if not handles:
            try:
                handles = await self.client.agent_actors(graph_fp, name)
            except RaygentsError as exc:
                known = self.graphs.get(graph_fp)
                if known is None or "unknown agent graph" not in str(exc):
                    raise
                await self.client.register_graph(graph_fp, *known)
                handles = await self.client.agent_actors(graph_fp, name)
            self._actors[key] = handles
        return handles[next(self._turn) % len(handles)]

    def forget(self, graph_fp: str, name: str) -> None:
        """Drop cached actors that failed, so the next lookup asks the coordinator."""
        self._actors.pop((graph_fp, name), None)

    def watch(self, actor: Any) -> asyncio.Future[None]:
        """A future that completes when ``actor`` stops answering heartbeats.

        One heartbeat loop per actor and process, however many runs use the actor; it ends a
        beat after the last run stopped using the actor (runs one after another share it).
        """
        key = actor_key(actor)
        watch = self._watches.get(key)
        if watch is None:
            stale: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            watch = self._watches[key] = _Watch(stale)
            watch.task = asyncio.ensure_future(self._heartbeat(key, actor, watch))
        watch.users += 1
        return watch.stale

    def unwatch(self, actor: Any) -> None:
        """One run stopped using ``actor``."""
        watch = self._watches.get(actor_key(actor))
        if watch is not None:
            watch.users -= 1

    def stop_watches(self) -> list[asyncio.Future[None]]:
        """Cancel every heartbeat loop and mailbox poller (the process stops using raygents);
        returns them."""
        tasks = [w.task for w in self._watches.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        return tasks + self.mailboxes.stop()

    async def _heartbeat(self, key: str, actor: Any, watch: _Watch) -> None:
        try:
            recovery = (await self.settings()).recovery
            every, limit = recovery.heartbeat_s, recovery.stale_after_s
            with contextlib.suppress(ray.exceptions.RayError):
                await _ping(actor)  # an actor that is still starting is not stale
            while True:
                await asyncio.sleep(every)
                if watch.users <= 0:
                    return
                try:
                    answered = await self._answers(watch, key, actor, every, limit)
                except ray.exceptions.RayError:
                    continue  # dead or restarting: the run's own call reports that
                if not answered:
                    if not watch.stale.done():
                        watch.stale.set_result(None)
                    return
        finally:
            if self._watches.get(key) is watch:
                del self._watches[key]

    async def _answers(
        self, watch: _Watch, key: str, actor: Any, every: float, limit: float
    ) -> bool:
        """Ping ``actor``: whether it answers, or, while the answer is late, whether it
        still beats (see :mod:`raygents.runtime.link.liveness`), checked every ``every`` seconds
        once the ping is ``limit`` seconds old, as long as runs use the actor."""
        ping = asyncio.ensure_future(_ping(actor))
        try:
            wait = limit
            while True:
                done, _ = await asyncio.wait([ping], timeout=wait)
                if done:
                    ping.result()
                    return True
                if watch.users <= 0:
                    return True
                if not await self._beats(key, limit):
                    return False
                wait = every
        finally:
            ping.cancel()

    async def _beats(self, key: str, limit: float) -> bool:
        """Whether actor ``key`` sent the coordinator a beat in the last ``limit`` seconds,
        with its event loop not wedged that long."""
        try:
            found = await asyncio.wait_for(self.client.beat_of(key), limit)
        except (asyncio.TimeoutError, ray.exceptions.RayError):
            return False
        return found is not None and found[0] <= limit and found[1] <= limit


@dataclass
class _Watch:
    stale: asyncio.Future[None]
    task: asyncio.Future[None] | None = None
    users: int = 0


async def _ping(actor: Any) -> Any:
    return await actor.ping.remote()
