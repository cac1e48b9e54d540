"""The raw Ray floor: the workloads' runs with bare actors and tasks and no framework, and the
sides that set it against raygents on one Ray instance."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from fakes import ToolTurns, burn, nap, noop, rg_fanout_agent, rg_model, rg_tools
from machine import settle, settle_workers
from sampling import Sampler, idle_footprint

_FLOOR: dict[str, Any] = {}
_INTENT = b"i" * 580  # (the sizes of a 2-turn run's intent record and marker, K = 4)
_MARKER = b"m" * 724


def _durable_puts(root: str | None) -> Callable[[str, bytes], Any]:
    """The puts of the floor's durable twin: into a new run directory of a file store at
    ``root``, each through the file store's own ``put`` (an unnamed file, fsynced, linked,
    the directory fsynced) on a worker thread, as raygents' agent actor makes them; no-ops
    without ``root``. Call it in the actor's event loop."""
    import uuid

    from raygents.stores.file import FileStore

    if not root:

        async def nothing(name: str, data: bytes) -> None:
            pass

        return nothing
    store, run_dir = FileStore(root), f"runs/floor-{uuid.uuid4().hex}"
    # (the run's directory is made beside its first model call, as raygents makes it)
    made = asyncio.ensure_future(asyncio.to_thread(store.make_dir, f"{run_dir}/"))

    async def put(name: str, data: bytes) -> None:
        await made
        await asyncio.to_thread(store.put, f"{run_dir}/{name}", data)

    return put


async def marked_turns(bare_task: Any, latency_s: float, k: int) -> list[tuple[str, float]]:
    """What ``FloorAgent.tools_turns`` does for one turn of ``k`` tool tasks, with the time of
    each step (in an async actor; ``phases.py``)."""
    now = time.time()
    marks = [("actor_start", now), ("model_in", now)]
    await asyncio.sleep(latency_s)
    marks.append(("model_out", time.time()))
    await asyncio.gather(*(bare_task.remote(j) for j in range(k)))
    marks.append(("model_in", time.time()))
    await asyncio.sleep(latency_s)
    marks.append(("model_out", time.time()))
    return marks


def floor() -> dict[str, Any]:
    """Remote functions and actor classes of the Ray floor (defined once Ray is up)."""
    if _FLOOR:
        return _FLOOR
    import ray

    @ray.remote(num_cpus=0)
    def bare_task(i: int) -> str:
        return noop(i)

    @ray.remote
    def cpu_task(i: int) -> str:
        return burn(i)

    @ray.remote
    def nap_task(i: int) -> str:
        return nap(i)

    @ray.remote
    def pool_task(i: int) -> int:
        return i

    @ray.remote(num_cpus=0, max_concurrency=10_000)
    class FloorAgent:
        """An async actor doing a run's work with nothing around it."""

        async def ping(self) -> int:
            return 0

        async def tools_turns(
            self, latency_s: float, k: int, turns: int, local: bool, durable: str | None = None
        ) -> str:
            """``durable``: a ``file://`` store's root; each tool turn then puts a record
            before its tasks start and the run puts a marker at its end, the fsynced puts
            ``sync`` durability makes on a run's path (:func:`durable_twin`)."""
            put = _durable_puts(durable)
            for turn in range(turns):
                await asyncio.sleep(latency_s)
                await put(f"{turn + 1:010d}.1.ckpt", _INTENT)
                if local:
                    [noop(turn * k + j) for j in range(k)]
                else:
                    await asyncio.gather(*(bare_task.remote(turn * k + j) for j in range(k)))
            await asyncio.sleep(latency_s)
            await put("done.1", _MARKER)
            return "done"

        async def child(self, latency_s: float, tool: str) -> str:
            await asyncio.sleep(latency_s)
            await {"cpu": cpu_task, "sleep": nap_task}.get(tool, bare_task).remote(0)
            await asyncio.sleep(latency_s)
            return "answer"

        async def fan_out(self, sub: Any, latency_s: float, m: int, tool: str) -> str:
            """``tool``: ``cpu`` (200 ms of CPU), ``sleep`` (200 ms of sleep), else trivial."""
            await asyncio.sleep(latency_s)
            await asyncio.gather(*(sub.child.remote(latency_s, tool) for _ in range(m)))
            await asyncio.sleep(latency_s)
            return "merged"

    _FLOOR.update(
        bare_task=bare_task,
        cpu_task=cpu_task,
        nap_task=nap_task,
        pool_task=pool_task,
        FloorAgent=FloorAgent,
    )
    return _FLOOR


def fanout_sides(tool: str, m: int, name: str) -> dict[str, Callable[[], Any]]:
    """One fan-out of workload 3 (``m`` sub-agents with a ``tool`` tool, 100 ms model) on
    the Ray floor and with raygents (initialised), each run once to warm up actors and
    workers."""
    import ray

    import raygents as rg

    floor_actors = floor()
    orchestrator, sub = floor_actors["FloorAgent"].remote(), floor_actors["FloorAgent"].remote()
    agent = rg_fanout_agent(tool, name)
    sides: dict[str, Callable[[], Any]] = {
        "ray_floor": lambda: ray.get(orchestrator.fan_out.remote(sub, 0.1, m, tool)),
        "raygents": lambda: rg.run(agent, f"m={m}"),
    }
    for run in sides.values():
        run()
    return sides


def warm_pool(n: int) -> None:
    """Bring Ray's worker pool to the same state before a timed run: a backlog of ``n``
    trivial one-CPU tasks. Ray kills idle workers after a while and starts workers again for
    the next backlog, so the first run after an idle spell (another side's turn) would
    otherwise pay for starting Ray workers (the fan-out table's ``ray worker`` row)."""
    import ray

    task = floor()["pool_task"]
    ray.get([task.remote(i) for i in range(n)])


def zero_cpu_sides(n: int) -> tuple[dict[str, dict[str, Any]], int]:
    """Workload 2's ``raygents_task`` and ``ray_floor`` sides at N concurrent runs (4 zero-CPU
    tool tasks, 100 ms model) on the running raygents instance, one after the other, after a
    warm-up of 10 runs on every side; each once Ray is back to its idle workers and the CPU is
    quiet.
    Returns each side's batch result with its sampler's report (``"sampler"``), and how many
    idle workers Ray keeps."""
    from workloads import harness as H

    import raygents as rg

    agent = rg.Agent("tp_task", tools=rg_tools("task"), model=rg_model(ToolTurns(k=4), 0.1))
    floor_actor = floor()["FloorAgent"].remote()
    sides = {
        "raygents_task": lambda m: H.rg_batch(agent, [f"k=4 run {i}" for i in range(m)]),
        "ray_floor": lambda m: H.run_async(
            H.floor_batch_async([lambda: floor_actor.tools_turns.remote(0.1, 4, 1, False)] * m)
        ),
    }
    for side in sides.values():
        side(10)
    time.sleep(2.0)
    pool = idle_footprint()["by_role"].get("ray::IDLE worker", {}).get("count", 0)
    out: dict[str, dict[str, Any]] = {}
    for name, side in sides.items():
        settle_workers(pool)
        settle(max_s=30.0, window_s=1.0)
        with Sampler(interval_s=0.5) as sampler:
            out[name] = side(n)
        out[name]["sampler"] = sampler.report
    return out, pool
