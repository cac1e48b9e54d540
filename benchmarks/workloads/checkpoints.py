"""Workload 4: checkpoints.

Per-turn cost in each durability mode (sync, async, exit) and store (memory, file, S3 on a local
moto server in its own process): a run of T tool turns (one call of a ``remote=False`` tool
returning 512 bytes per turn, model latency 0) then the answer. Each (store, mode) pair has its
own raygents namespace (its own coordinator) on one Ray instance; runs alternate between the
pairs. Per-turn cost = (p50 run time - p50 run time in ``exit`` mode on the same store) / T;
``exit`` writes nothing while a run goes well.

Bytes: a 50-turn run (49 tool turns, then the answer) on the file store in ``sync`` mode. Just
before its last answer, the fake model (inside the agent actor) adds up the sizes of every file
in the store, i.e. every checkpoint record the run wrote (a completed run's records are deleted
afterwards). That is compared with the size of the run's final history (msgpack and JSON of its
messages), for tool results of 64 B and 1 KiB.

Also: ``Store.put`` of a 1 KiB record straight from the driver, per store, for reference, and
on S3 one put every 100 ms (the pace of the runs at a 100 ms model: the reference of that row).

S3 requests: a 2-turn and a 20-turn run in each mode, counted by kind and purpose, on the
run's path and off it, through a recording proxy (see ``s3requests``; 100 ms model latency,
on a Ray instance of their own after the timed runs).

Kept results: a completed run's marker keeps its output, usage and final history. What that
adds per run: its bytes (the 50-turn runs' markers, and a one-turn run's); the p50 time of a
one-turn run without tools (no checkpoint records: on a durable store the marker is the only
write) on the file and S3 stores minus the same on the memory store, which keeps none; and
building, encoding and putting such a marker straight from the driver, per store.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import fakes
import machine
import stats

from workloads import s3requests

STORES = ("memory", "file", "s3")
MODES = ("sync", "async", "exit")
PAYLOAD = 512


class MeasureStore:
    """Wraps a logic: when it answers, answer with the bytes and files under ``root`` instead."""

    def __init__(self, inner: Any, root: str) -> None:
        self.inner, self.root = inner, root

    def __call__(self, conv: Any) -> Any:
        decision = self.inner(conv)
        if not isinstance(decision, str):
            return decision
        total = files = 0
        parts = {
            "full_records": 0,
            "delta_records": 0,
            "append_bytes": 0,
            "state_bytes": 0,
            "journal_bytes": 0,
        }
        for directory, _, names in os.walk(self.root):
            for name in names:
                if name.endswith(".ckpt"):
                    path = os.path.join(directory, name)
                    total += os.path.getsize(path)
                    files += 1
                    try:
                        _breakdown(path, parts)
                    except Exception:
                        parts["undecodable"] = parts.get("undecodable", 0) + 1
        return json.dumps({"bytes": total, "files": files, "parts": parts})


def _breakdown(path: str, parts: dict[str, int]) -> None:
    """Where a record's bytes go: new messages, run state, the tool journal inside it."""
    import msgpack

    from raygents.records import checkpoint

    with open(path, "rb") as f:
        record = checkpoint.decode(f.read())
    parts["full_records" if record.get("kind") == "full" else "delta_records"] += 1
    parts["append_bytes"] += len(msgpack.packb(record.get("append") or []))
    state = record.get("state") or record.get("changes") or {}  # whole body, or what changed
    parts["state_bytes"] += len(msgpack.packb(state)) + len(msgpack.packb(record.get("unset", [])))
    parts["journal_bytes"] += len(msgpack.packb(state.get("journal") or {}))


def _store_url(store: str, mode: str, tmp: str, moto: machine.Moto) -> str:
    if store == "memory":
        return f"memory://ck-{mode}"
    if store == "file":
        return f"file://{os.path.join(tmp, 'ck-' + mode)}"
    return f"s3://{moto.bucket('ck-' + mode)}/runs-{mode}"


_PACE_S = 0.1
"""The model latency of the S3 rows at 100 ms: a run's puts come this far apart."""


def _put_micro(tmp: str, moto: machine.Moto, n: int) -> dict[str, Any]:
    from raygents.stores.open import open_store

    urls = {
        "memory": "memory://micro",
        "file": f"file://{os.path.join(tmp, 'micro')}",
        "s3": f"s3://{moto.bucket('ck-micro')}/micro",
    }
    out = {store: _put_times(open_store(url), n, "r") for store, url in urls.items()}
    # At a 100 ms model a run puts one record per model call, after 100 ms of quiet; moto
    # answers a request after such a pause slower than one of a tight loop (any request, not
    # only boto's: perf log 68), so the S3 target of that row is set against this p50.
    out["s3, a put per 100 ms"] = _put_times(open_store(urls["s3"]), max(20, n // 4), "p", _PACE_S)
    return out


def _put_times(store: Any, n: int, run: str, pause_s: float = 0.0) -> dict[str, float]:
    """p50 and p99 of ``n`` puts of 1 KiB to ``store``, ``pause_s`` apart."""
    ts = []
    for i in range(n):
        time.sleep(pause_s)
        t = time.perf_counter()
        store.put(f"runs/{run}{i % 7}/{i:010d}.ckpt", os.urandom(1024))
        ts.append(time.perf_counter() - t)
    sm = stats.summary(ts)
    return {"p50_ms": stats.ms(sm["p50"]), "p99_ms": stats.ms(sm["p99"])}


def _kept_costs(
    quick_times: dict[tuple[str, str], list[float]],
    tmp: str,
    moto: machine.Moto,
    result: Any,
    n: int,
) -> dict[str, Any]:
    """What a kept result adds to a one-turn run (p50, a durable store minus the memory
    store, sync mode) and what its marker costs straight from the driver."""
    p50 = {k: stats.summary(v)["p50"] for k, v in quick_times.items()}
    base = p50[("memory", "sync")]
    return {
        "one_turn_run_p50_ms": {f"{s}/{d}": stats.ms(v) for (s, d), v in p50.items()},
        "added_per_run_ms": {s: stats.ms(p50[(s, "sync")] - base) for s in ("file", "s3")},
        "put_micro_1_turn": _kept_put_micro(tmp, moto, result, n, "one"),
    }


def _kept_put_micro(
    tmp: str, moto: machine.Moto, result: Any, n: int, label: str
) -> dict[str, Any]:
    """Build, encode and put the marker of ``result`` (a completed run's) ``n`` times per
    store, as an agent actor does when the run completes."""
    from raygents.records import codec
    from raygents.records.keptresult import done_marker
    from raygents.records.runinfo import RunInfo, RunSummary
    from raygents.stores.open import open_store

    summary = RunSummary(
        final_output=result.output_text,
        messages=result.messages,
        usage=result.usage,
        turns=result.turns,
        agent_name=result.last_agent.name,
        input_count=result.input_count,
    )
    urls = {
        "memory": f"memory://kept-{label}",
        "file": f"file://{os.path.join(tmp, 'kept-' + label)}",
        "s3": f"s3://{moto.bucket('ck-kept-' + label)}/kept",
    }
    out: dict[str, Any] = {}
    for store, url in urls.items():
        s = open_store(url)
        ts, size = [], 0
        for i in range(n):
            t = time.perf_counter()
            info = RunInfo(f"k{i}", "completed", summary["agent_name"], result.turns, seq=1)
            data = codec.encode(done_marker(info, 1, summary))
            s.put(f"runs/k{i}/done.1", data)
            ts.append(time.perf_counter() - t)
            size = len(data)
        sm = stats.summary(ts)
        out[store] = {"bytes": size, "p50_ms": stats.ms(sm["p50"]), "p99_ms": stats.ms(sm["p99"])}
    return out


def _s3_at_100ms(use: Any, turns: int, reps: int) -> dict[str, float]:
    """Per-turn cost over ``exit`` of each mode on S3 at a 100 ms model: what a run waits
    for that a model call does not hide (at latency 0 nothing is hidden)."""
    import raygents as rg

    agent = rg.Agent(
        "ck100",
        tools=fakes.rg_tools("payload_local"),
        model=fakes.rg_model(fakes.ToolTurns(k=1, tool="payload", n=PAYLOAD), 0.1),
        max_turns=turns + 5,
    )
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for mode in MODES:  # (warm: the agent's actor in each namespace)
        use("s3", mode)
        rg.run(agent, f"k=1 turns={turns}")
    for rep in range(reps):
        for mode in MODES[rep % 3 :] + MODES[: rep % 3]:
            use("s3", mode)
            t = time.perf_counter()
            rg.run(agent, f"k=1 turns={turns}")
            times[mode].append(time.perf_counter() - t)
    base = stats.summary(times["exit"])["p50"]
    out = {f"s3/{m}": stats.ms((stats.summary(times[m])["p50"] - base) / turns) for m in MODES}
    machine.log(f"  at 100 ms model, per turn over exit: {out}")
    return out


def _count_requests(moto: machine.Moto) -> dict[str, Any]:
    """S3 requests per run by kind, on its path and off it (see ``s3requests``), on a Ray
    instance of their own whose S3 endpoint is a recording proxy in front of ``moto``."""
    import ray

    proxy = s3requests.start_proxy(moto.endpoint)
    os.environ["AWS_ENDPOINT_URL_S3"] = proxy.endpoint_url  # before Ray starts: inherited
    try:
        ray.init(
            address="local",
            num_cpus=machine.cpus(),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
        try:
            return s3requests.measure(moto.bucket, proxy)
        finally:
            ray.shutdown()
    finally:
        os.environ["AWS_ENDPOINT_URL_S3"] = moto.endpoint
        proxy.stop()


def run(mode: str, tmp: str) -> dict[str, Any]:
    import msgpack
    import ray

    import raygents as rg

    quick = mode == "quick"
    turns = 10 if quick else 20
    reps = 5 if quick else 20
    if mode == "smoke":
        turns, reps = 3, 1
    moto = machine.Moto()
    moto.start()  # sets the AWS environment before Ray starts, so the coordinators inherit it
    try:
        machine.register_by_value()
        ray.init(
            address="local",
            num_cpus=machine.cpus(),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
        urls = {(s, m): _store_url(s, m, tmp, moto) for s in STORES for m in MODES}
        micro = _put_micro(tmp, moto, 50 if quick else 200)
        agent = rg.Agent(
            "ck",
            tools=fakes.rg_tools("payload_local"),
            model=fakes.rg_model(fakes.ToolTurns(k=1, tool="payload", n=PAYLOAD), 0.0),
            max_turns=turns + 5,
        )

        from raygents.runtime.driver import client

        runtimes: dict[tuple[str, str], Any] = {}

        def use(store: str, dur: str) -> None:
            # One runtime per pair, kept for the whole workload and switched between (never
            # shut down: that would remove its namespace's coordinator and agent actor, and the
            # next run there would pay for new ones).
            client._runtime = runtimes.get((store, dur))
            if client._runtime is None:
                rg.init(
                    namespace=f"ck-{store}-{dur}",
                    store=urls[(store, dur)],
                    durability=dur,
                    handle_sigterm=False,
                )
                runtimes[(store, dur)] = client._runtime

        for key in urls:  # warm up every pair: coordinator, actor
            use(*key)
            for _ in range(2):
                rg.run(agent, f"k=1 turns={turns}")
        times: dict[tuple[str, str], list[float]] = {k: [] for k in urls}
        quick_times: dict[tuple[str, str], list[float]] = {k: [] for k in urls}
        keys = list(urls)
        load0 = machine.load()
        machine.log(f"checkpoints: {len(keys)} pairs x {reps} reps x {turns} turns")
        for rep in range(reps):
            order = keys[rep % len(keys) :] + keys[: rep % len(keys)]
            for key in order:
                use(*key)
                t = time.perf_counter()
                rg.run(agent, f"k=1 turns={turns}")
                times[key].append(time.perf_counter() - t)
                t = time.perf_counter()
                quick_result = rg.run(agent, "k=0")  # one turn, no records
                quick_times[key].append(time.perf_counter() - t)
        load1 = machine.load()
        table: dict[str, dict[str, Any]] = {}
        for store in STORES:
            base = stats.summary(times[(store, "exit")])["p50"]
            for dur in MODES:
                s = stats.summary(times[(store, dur)])
                table[f"{store}/{dur}"] = {
                    "run_p50_ms": stats.ms(s["p50"]),
                    "run_min_ms": stats.ms(s["min"]),
                    "run_max_ms": stats.ms(s["max"]),
                    "per_turn_ms": stats.ms(s["p50"] / turns),
                    "checkpoint_cost_per_turn_ms": stats.ms((s["p50"] - base) / turns),
                }
            machine.log(
                "  "
                + ", ".join(
                    f"{store}/{d}={table[f'{store}/{d}']['checkpoint_cost_per_turn_ms']:.2f}ms"
                    for d in MODES
                )
            )

        at_100ms = _s3_at_100ms(use, turns, reps)

        kept = _kept_costs(quick_times, tmp, moto, quick_result, 50 if quick else 200)

        # bytes written by a 50-turn run
        sizes = {}
        client._runtime = None
        for size in (64, 1024):
            root = os.path.join(tmp, f"bytes-{size}")
            rg.shutdown()
            rg.init(
                namespace=f"ck-bytes-{size}",
                store=f"file://{root}",
                durability="sync",
                handle_sigterm=False,
            )
            a = rg.Agent(
                f"ck_bytes_{size}",
                tools=fakes.rg_tools("payload_local"),
                model=fakes.rg_model(
                    MeasureStore(fakes.ToolTurns(k=1, turns=49, tool="payload", n=size), root), 0.0
                ),
                max_turns=60,
            )
            result = rg.run(a, "write a long history")
            written = json.loads(result.final_output)
            marker = os.path.join(root, "runs", result.run_id, "done.1")
            kept[f"marker_bytes_50_turns_{size}B_results"] = os.path.getsize(marker)
            history = [m.model_dump(mode="json") for m in result.messages]
            hist_msgpack = len(msgpack.packb(history))
            hist_json = len(json.dumps(history).encode())
            sizes[f"tool_result_{size}B"] = {
                "turns": result.turns,
                "messages": len(result.messages),
                "checkpoint_records": written["files"],
                "bytes_written": written["bytes"],
                "record_parts": written.get("parts"),
                "final_history_msgpack_bytes": hist_msgpack,
                "final_history_json_bytes": hist_json,
                "ratio_vs_msgpack_history": round(written["bytes"] / hist_msgpack, 2),
                "ratio_vs_json_history": round(written["bytes"] / hist_json, 2),
            }
            machine.log(f"  bytes ({size} B results): {sizes[f'tool_result_{size}B']}")
            long_result = result
        reps_long = 20 if quick else 50
        kept["put_micro_50_turns"] = _kept_put_micro(tmp, moto, long_result, reps_long, "long")
        machine.log(f"  kept results: {kept}")
        rg.shutdown()
        ray.shutdown()
        requests = _count_requests(moto)
    finally:
        moto.stop()

    sync_file = table["file/sync"]["checkpoint_cost_per_turn_ms"]
    put_s3, paced_s3 = micro["s3"]["p50_ms"], micro["s3, a put per 100 ms"]["p50_ms"]
    sync_s3, async_s3 = at_100ms["s3/sync"], at_100ms["s3/async"]
    worst = max(v["ratio_vs_msgpack_history"] for v in sizes.values())
    checks = {
        "a sync checkpoint on the file store adds <= 3 ms per turn (median)": {
            "value_ms": sync_file,
            "target": "<= 3 ms",
            "pass": sync_file <= 3.0,
        },
        "a 50-turn run writes <= 3x its final history size (worst of 64 B / 1 KiB results)": {
            "value": worst,
            "target": "<= 3",
            "pass": worst <= 3.0,
        },
        "sync on S3 adds <= 1.5x a PUT's p50 per turn over exit (100 ms model; a put per "
        "100 ms, as the run makes them)": {
            "value_ms": sync_s3,
            "target": f"<= {1.5 * paced_s3:.2f} ms (1.5 x {paced_s3:.2f}; back to back "
            f"{put_s3:.2f})",
            "pass": sync_s3 <= 1.5 * paced_s3,
        },
        "async on S3 adds <= 1 ms per turn over exit (100 ms model)": {
            "value_ms": async_s3,
            "target": "<= 1 ms",
            "pass": async_s3 <= 1.0,
        },
    }
    return {
        "config": {"turns": turns, "reps": reps, "tool_result_bytes": PAYLOAD, "latency_ms": 0},
        "load_before": load0,
        "load_after": load1,
        "per_turn": table,
        "s3_per_turn_over_exit_at_100ms_ms": at_100ms,
        "store_put_micro_1KiB": micro,
        "bytes": sizes,
        "kept_results": kept,
        "s3_requests": requests,
        "checks": checks,
    }
