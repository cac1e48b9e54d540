"""An agent actor's beat thread on a real Ray: it collects the beats' replies without
``ray.get``, which Ray reports as a blocked event loop in an async actor's process (even from
another thread)."""

from __future__ import annotations

import asyncio

import pytest
import ray

from raygents.runtime.link.liveness import Beater

pytestmark = pytest.mark.timeout(120)


@ray.remote(num_cpus=0)
class _Target:
    def beat(self, lag: float) -> float:
        return lag

    def fail(self, lag: float) -> float:
        raise RuntimeError("the coordinator is restarting")


@ray.remote(num_cpus=0)
class _Beating:
    async def beat_for(self, target: ray.actor.ActorHandle, method: str, seconds: float) -> bool:
        """Beat ``target`` for ``seconds``; whether Ray saw a blocking get in this process."""
        send = getattr(target, method).remote
        Beater(asyncio.get_running_loop(), send, every_s=0.02, busy=lambda: True).start()
        await asyncio.sleep(seconds)
        from ray._private import worker  # (the flag behind Ray's warning)

        return bool(worker.blocking_get_inside_async_warned)


@pytest.mark.parametrize("method", ["beat", "fail"])
def test_beats_are_collected_without_a_blocking_get(ray_session: None, method: str) -> None:
    target, beating = _Target.remote(), _Beating.remote()
    try:
        assert ray.get(beating.beat_for.remote(target, method, 0.5)) is False
    finally:
        ray.kill(beating)
        ray.kill(target)
