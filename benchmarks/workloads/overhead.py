"""Workload 1: single-run overhead.

A 2-turn run: the model asks for K trivial tool calls (in parallel), then answers. K = 1, 4, 16;
model latency 0 and 100 ms. Sides, alternating run by run (the order rotates every repetition):

- ``raygents_task``: the tool is ``@tool(num_cpus=0)``, each call a Ray task;
- ``raygents_local``: ``@tool(remote=False)``, calls run inside the agent actor;
- ``raygents_task_exit``: ``raygents_task`` with durability ``exit`` (nothing of the store on
  the run's path but the completion marker);
- ``sdk``: the OpenAI Agents SDK, in-process asyncio (sync tools run in its thread pool);
- ``ray_floor``: one bare async actor call doing the same (sleep, K bare tasks, sleep);
- ``ray_floor_durable``: the floor's durable twin: the same, plus the fsynced puts ``sync``
  makes on a run's path (the tool batch's record before its tasks, the completion marker at
  the end), through the file store, so the table shows what durability itself costs;
- ``ray_floor_local``: the floor with the tool called inside the actor;
- ``ray_floor_beside_exit``: ``ray_floor`` again, alternated with the ``exit`` side in a block
  of their own (the ``exit`` side runs on a second raygents runtime of the same driver, which
  read slower when alternated with the first runtime's runs).

raygents runs with its defaults (durability ``sync`` on a ``file://`` store) but for the
``exit`` side. Overhead per turn = (latency - 2 x model latency) / 2.
"""

from __future__ import annotations

import os
import time
from typing import Any

import fakes
import machine
import rayfloor
import stats

KS = (1, 4, 16)
LATENCIES = (0.0, 0.1)


def _time(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run(mode: str, tmp: str) -> dict[str, Any]:
    import ray
    from agents import Agent as SdkAgent
    from agents import Runner

    import raygents as rg

    quick = mode == "quick"
    reps = {0.0: 20 if quick else 200, 0.1: 8 if quick else 60}
    ks = KS
    if mode == "smoke":
        reps, ks = {0.0: 2, 0.1: 2}, (1, 4)
    fakes.sdk_setup()
    machine.init_raygents(store=f"file://{os.path.join(tmp, 'store')}")
    on_exit = _exit_runtime(rg, os.path.join(tmp, "store-exit"))
    twin = os.path.join(tmp, "store-floor")
    fl = rayfloor.floor()
    floor_actor = fl["FloorAgent"].remote()
    sdk_loop = fakes.SdkLoop()

    # the raw Ray floor's building blocks
    ray.get(floor_actor.ping.remote())
    ray.get(fl["bare_task"].remote(0))
    n_micro = 100 if quick else 500
    micro = {"actor_call": [], "task": [], "k4_tasks_from_driver": []}
    for _ in range(n_micro):
        micro["actor_call"].append(_time(lambda: ray.get(floor_actor.ping.remote())))
        micro["task"].append(_time(lambda: ray.get(fl["bare_task"].remote(0))))
        micro["k4_tasks_from_driver"].append(
            _time(lambda: ray.get([fl["bare_task"].remote(i) for i in range(4)]))
        )
    floor_micro = {
        k: {q: stats.ms(v) for q, v in stats.summary(vals).items() if q != "n"}
        for k, vals in micro.items()
    }

    results: list[dict[str, Any]] = []
    for latency in LATENCIES:
        tag = int(latency * 1000)
        logic = fakes.ToolTurns()
        rg_agents = {
            kind: rg.Agent(
                f"ov_{kind}_{tag}", tools=fakes.rg_tools(kind), model=fakes.rg_model(logic, latency)
            )
            for kind in ("task", "local")
        }
        rg_agents["exit"] = rg.Agent(  # (its own agent: one actor in each runtime's namespace)
            f"ov_exit_{tag}", tools=fakes.rg_tools("task"), model=fakes.rg_model(logic, latency)
        )
        sdk_agent = SdkAgent(
            name=f"ov_sdk_{tag}",
            instructions="",
            tools=fakes.sdk_tools("task"),
            model=fakes.sdk_model(logic, latency),
        )
        sides = {
            "raygents_task": lambda k, a=rg_agents["task"]: rg.run(a, f"k={k}"),
            "raygents_local": lambda k, a=rg_agents["local"]: rg.run(a, f"k={k}"),
            "raygents_task_exit": on_exit(lambda k, a=rg_agents["exit"]: rg.run(a, f"k={k}")),
            "sdk": lambda k, a=sdk_agent: sdk_loop.run(Runner.run(a, f"k={k}")),
            "ray_floor": lambda k, lat=latency: ray.get(
                floor_actor.tools_turns.remote(lat, k, 1, False)
            ),
            "ray_floor_durable": lambda k, lat=latency: ray.get(
                floor_actor.tools_turns.remote(lat, k, 1, False, twin)
            ),
            "ray_floor_local": lambda k, lat=latency: ray.get(
                floor_actor.tools_turns.remote(lat, k, 1, True)
            ),
        }
        for k in ks:
            machine.log(f"overhead: latency={tag}ms K={k}")
            for fn in sides.values():  # warm up (actors, workers, imports)
                for _ in range(3):
                    fn(k)
            load0 = machine.load()
            # (the exit side runs on a second raygents runtime of this driver; alternated with
            # the default runtime's runs it read ~250 ms slower per run, which one runtime per
            # driver never pays: it alternates with the floor alone, in a block of its own)
            main = [s for s in sides if s != "raygents_task_exit"]
            times = _rotate({s: sides[s] for s in main}, reps[latency], k)
            beside = _rotate(
                {s: sides[s] for s in ("raygents_task_exit", "ray_floor")}, reps[latency], k
            )
            times["raygents_task_exit"] = beside["raygents_task_exit"]
            times["ray_floor_beside_exit"] = beside["ray_floor"]
            row: dict[str, Any] = {
                "latency_ms": tag,
                "k": k,
                "reps": reps[latency],
                "load_before": load0,
                "load_after": machine.load(),
                "sides": {},
            }
            for side, vals in times.items():
                s = stats.summary(vals)
                row["sides"][side] = {
                    "p50_ms": stats.ms(s["p50"]),
                    "p99_ms": stats.ms(s["p99"]),
                    "min_ms": stats.ms(s["min"]),
                    "max_ms": stats.ms(s["max"]),
                    "overhead_per_turn_p50_ms": stats.ms((s["p50"] - 2 * latency) / 2),
                }
            sdk50 = row["sides"]["sdk"]["p50_ms"]
            fl50 = row["sides"]["ray_floor"]["p50_ms"]
            for side in ("raygents_task", "raygents_local", "raygents_task_exit"):
                row["sides"][side]["ratio_vs_sdk_p50"] = stats.ratio(
                    row["sides"][side]["p50_ms"], sdk50
                )
                row["sides"][side]["ratio_vs_floor_p50"] = stats.ratio(
                    row["sides"][side]["p50_ms"], fl50
                )
            results.append(row)
            machine.log(
                "  " + ", ".join(f"{s}={v['p50_ms']:.1f}ms" for s, v in row["sides"].items())
            )

    phases = _phases(rg, sdk_loop, 10 if mode == "smoke" else 30 if quick else 100)
    sdk_loop.close()
    rg.shutdown()
    ray.shutdown()

    checks, durability = _checks(results)
    return {
        "floor_micro_ms": floor_micro,
        "rows": results,
        "checks": checks,
        "durability_per_turn_ms": durability,
        "phases_ms": phases,
        "config": {"durability": "sync", "store": "file", "reps": reps},
    }


def _rotate(sides: dict[str, Any], reps: int, k: int) -> dict[str, list[float]]:
    """Each side's times over ``reps`` rounds, one run of every side a round, the order
    rotating every round."""
    times: dict[str, list[float]] = {s: [] for s in sides}
    names = list(sides)
    for rep in range(reps):
        for side in names[rep % len(names) :] + names[: rep % len(names)]:
            times[side].append(_time(lambda fn=sides[side]: fn(k)))
    return times


def _checks(results: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, float]]:
    """The per-turn targets (K=4, model latency 100 ms), and what durability costs per turn:
    the floor's durable twin over the floor, raygents ``sync`` over the twin."""
    k4 = next(r for r in results if r["k"] == 4 and r["latency_ms"] == 100)["sides"]

    def over(side: str, base: str = "ray_floor") -> float:
        return round(k4[side]["overhead_per_turn_p50_ms"] - k4[base]["overhead_per_turn_p50_ms"], 2)

    def at_most(value: float | None, target: float, unit: str = "value") -> dict[str, Any]:
        sign = "+" if unit == "value_ms" else ""
        suffix = " ms" if unit == "value_ms" else ""
        return {
            unit: value,
            "target": f"<= {sign}{target:g}{suffix}",
            "pass": (value if value is not None else 99) <= target,
        }

    checks = {
        "2-turn run at 100 ms <= 1.05x SDK latency (K=4, tool tasks, sync, p50)": at_most(
            k4["raygents_task"]["ratio_vs_sdk_p50"], 1.05
        ),
        "2-turn run at 100 ms <= 1.05x SDK latency (K=4, remote=False, p50)": at_most(
            k4["raygents_local"]["ratio_vs_sdk_p50"], 1.05
        ),
        "sync: overhead per turn <= the Ray floor's + 5 ms (p50, 4 tool tasks, 100 ms)": at_most(
            over("raygents_task"), 5.0, "value_ms"
        ),
        "exit: overhead per turn <= the Ray floor's + 3.5 ms (p50, 4 tool tasks, 100 ms)": at_most(
            over("raygents_task_exit", "ray_floor_beside_exit"), 3.5, "value_ms"
        ),
    }
    durability = {  # (not targets: what the store's puts cost, and what raygents adds to them)
        "floor_durable_over_floor_ms": over("ray_floor_durable"),
        "sync_over_floor_durable_ms": over("raygents_task", "ray_floor_durable"),
    }
    return checks, durability


def _exit_runtime(rg: Any, root: str) -> Any:
    """A second raygents runtime on the same Ray instance, durability ``exit`` on a file store
    at ``root``, and a wrapper that runs a side on it (the default runtime stays current
    otherwise). Both are kept for the whole workload: shutting one down would remove its
    namespace's coordinator and agent actors."""
    from raygents.runtime.driver import client

    default = client._runtime
    client._runtime = None
    rg.init(namespace="ov-exit", store=f"file://{root}", durability="exit", handle_sigterm=False)
    exit_runtime, client._runtime = client._runtime, default

    def on_exit(side: Any) -> Any:
        def run(k: int) -> Any:
            client._runtime = exit_runtime
            try:
                return side(k)
            finally:
                client._runtime = default

        return run

    return on_exit


PHASES = (
    "start_to_model1",
    "model1_to_first_tool",
    "tool_spread",
    "last_tool_to_model2",
    "model2_to_result",
)


def _phases(rg: Any, sdk_loop: Any, reps: int) -> dict[str, Any]:
    """Where the time of a 2-turn run with K=4 calls goes (model latency 0): the model stamps
    its calls and the tools stamp their execution, all with the machine's wall clock."""
    from agents import Agent as SdkAgent
    from agents import Runner

    logic = fakes.Stamped(k=4)
    rg_task = rg.Agent("ph_task", tools=fakes.rg_tools("stamp"), model=fakes.rg_model(logic, 0.0))
    rg_local = rg.Agent(
        "ph_local", tools=fakes.rg_tools("stamp_local"), model=fakes.rg_model(logic, 0.0)
    )
    sdk_agent = SdkAgent(
        name="ph_sdk",
        instructions="",
        tools=fakes.sdk_tools("stamp"),
        model=fakes.sdk_model(logic, 0.0),
    )

    def rg_side(agent: Any) -> Any:
        def go() -> tuple[list[str], str]:
            r = rg.run(agent, "stamp")
            return [m.text for m in r.messages if m.role == "tool"], r.final_output

        return go

    def sdk_side() -> tuple[list[str], str]:
        r = sdk_loop.run(Runner.run(sdk_agent, "stamp"))
        outs = [
            i["output"]
            for i in r.to_input_list()
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        return [str(o) for o in outs], str(r.final_output)

    sides = {
        "raygents_task": rg_side(rg_task),
        "raygents_local": rg_side(rg_local),
        "sdk": sdk_side,
    }
    for fn in sides.values():
        for _ in range(3):
            fn()
    got: dict[str, dict[str, list[float]]] = {s: {p: [] for p in PHASES} for s in sides}
    names = list(sides)
    for rep in range(reps):
        for side in names[rep % 3 :] + names[: rep % 3]:
            t0 = time.time()
            tools, final = sides[side]()
            t3 = time.time()
            pairs = [tuple(float(x) for x in t.split(",")) for t in tools]
            t1 = pairs[0][0]
            runs = [p[1] for p in pairs]
            t2 = float(final)
            for name, value in zip(
                PHASES,
                (t1 - t0, min(runs) - t1, max(runs) - min(runs), t2 - max(runs), t3 - t2),
                strict=False,
            ):
                got[side][name].append(value)
    return {
        side: {p: stats.ms(stats.summary(v)["p50"]) for p, v in d.items()}
        for side, d in got.items()
    }
