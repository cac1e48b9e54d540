"""Markdown tables of a results file; ``python benchmarks/report.py results.json`` prints them."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

START = "<!-- results:start -->"
END = "<!-- results:end -->"


def _f(x: Any, nd: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def _rng(s: dict[str, Any], nd: int = 1) -> str:
    if not s or not s.get("n"):
        return "-"
    return f"{s['p50']:.{nd}f} [{s['min']:.{nd}f}-{s['max']:.{nd}f}]"


def _load(w: dict[str, Any]) -> str:
    a = w.get("load_before", {}).get("loadavg", ["?"])[0]
    b = w.get("load_after", {}).get("loadavg", ["?"])[0]
    text = f"load average (1 min) {_f(a, 2)} before, {_f(b, 2)} after"
    settled = w.get("settled")
    if settled:
        text += (
            f"; started after {_f(settled.get('waited_s'), 1)} s waiting for a quiet machine "
            f"(CPU {_f(settled.get('cpu_percent'), 0)}% over 2 s)"
        )
    return text


def checks(results: dict[str, Any]) -> list[str]:
    out = ["| workload | target | measured | pass |", "|---|---|---|---|"]
    order = [name for name, _, _ in SECTIONS]
    workloads = sorted(
        results["workloads"].items(),
        key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order),
    )
    for name, w in workloads:
        for title, c in (w.get("checks") or {}).items():
            value = next(
                (c[k] for k in ("value", "value_ms", "value_mb", "value_s") if k in c), None
            )
            unit = {"value_ms": " ms", "value_mb": " MB", "value_s": " s"}.get(
                next((k for k in ("value", "value_ms", "value_mb", "value_s") if k in c), ""), ""
            )
            out.append(
                f"| {name} | {title} ({c['target']}) | {_f(value, 2)}{unit} | "
                f"{'PASS' if c['pass'] else '**FAIL**'} |"
            )
    return out


def overhead(w: dict[str, Any]) -> list[str]:
    fm = w.get("floor_micro_ms", {})
    out = [
        f"Ray floor building blocks (driver → ray.get): bare async actor call p50 "
        f"{_f(fm.get('actor_call', {}).get('p50'), 2)} ms, bare task p50 "
        f"{_f(fm.get('task', {}).get('p50'), 2)} ms, 4 tasks p50 "
        f"{_f(fm.get('k4_tasks_from_driver', {}).get('p50'), 2)} ms.",
        "",
        "| model latency | K | side | p50 ms | p99 ms | min-max ms | overhead/turn p50 ms | vs SDK (p50) |",  # noqa: E501
        "|---|---|---|---|---|---|---|---|",
    ]
    ph = w.get("phases_ms")
    if ph:
        names = list(next(iter(ph.values())))
        tail = [
            "",
            "Where the time goes (K=4, model latency 0, p50 ms; stamps taken by the model and "
            "the tools inside the run):",
            "",
            "| side | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for side, v in ph.items():
            tail.append(f"| {side} | " + " | ".join(_f(v[n], 2) for n in names) + " |")
    else:
        tail = []
    dur = w.get("durability_per_turn_ms")
    if dur:
        tail = [
            "",
            "What durability costs per turn (K=4, model latency 100 ms, p50): the floor's "
            f"durable twin (its fsynced puts) {_f(dur['floor_durable_over_floor_ms'], 2)} ms "
            f"over the floor; raygents `sync` {_f(dur['sync_over_floor_durable_ms'], 2)} ms "
            "over the twin.",
            *tail,
        ]
    for r in w["rows"]:
        for side, s in r["sides"].items():
            out.append(
                f"| {r['latency_ms']} ms | {r['k']} | {side} | {_f(s['p50_ms'])} | {_f(s['p99_ms'])} | "  # noqa: E501
                f"{_f(s['min_ms'])}-{_f(s['max_ms'])} | {_f(s['overhead_per_turn_p50_ms'])} | "
                f"{_f(s.get('ratio_vs_sdk_p50'), 2) if 'ratio_vs_sdk_p50' in s else ''} |"
            )
    return out + tail


def throughput(w: dict[str, Any]) -> list[str]:
    cold = w.get("idle_after_init", {})
    warm = w.get("idle_after_warmup", {})
    out = [
        f"Idle footprint (driver + every Ray process, PSS): {_f(cold.get('total_pss_mb'), 0)} MB "
        f"after init ({cold.get('processes')} processes), {_f(warm.get('total_pss_mb'), 0)} MB "
        f"after warm-up ({warm.get('processes')} processes).",
        "",
        "| N | side | runs/s p50 [min-max] | vs SDK | latency p50 / p99 ms | time to start all, s | "  # noqa: E501
        "CPU s (all processes) | peak PSS MB (all) | errors (runs recovered) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in w["rows"]:
        for side, s in r["sides"].items():
            if not s.get("runs_per_s", {}).get("n"):
                out.append(f"| {r['n']} | {side} | {s.get('skipped', 'skipped')} | | | | | | |")
                continue
            recovered = f" ({s['recovered']})" if "recovered" in s else ""
            out.append(
                f"| {r['n']} | {side} | {_rng(s['runs_per_s'])} | "
                f"{_f(s.get('ratio_vs_sdk_runs_per_s'), 2) if side != 'sdk' else ''} | "
                f"{_f(s['latency_p50_ms'], 0)} / {_f(s['latency_p99_ms'], 0)} | "
                f"{_f(s['start_all_s']['p50'], 2)} | {_f(s['cpu_s_total']['p50'], 1)} | "
                f"{_f(s['peak_total_pss_mb'], 0)} | {s['errors']}{recovered} |"
            )
    big = next((r for r in w["rows"] if r["n"] == max(x["n"] for x in w["rows"])), None)
    if big:
        for side in ("raygents_task", "raygents_local", "sdk"):
            s = big["sides"].get(side, {})
            roles = s.get("processes_by_role")
            if not roles:
                continue
            out += [
                "",
                f"N={big['n']}, {side}: CPU seconds and peak PSS by process role (best repetition)",
                "",
                "| role | processes | CPU s | peak PSS MB |",
                "|---|---|---|---|",
            ]
            for role, v in roles.items():
                out.append(
                    f"| {role} | {v['count']} | {_f(v['cpu_s'], 2)} | {_f(v['peak_pss_mb'], 0)} |"
                )
    slopes = w.get("marginal_kb_per_run") or {}
    if slopes:
        shown = ", ".join(f"{side} {_f(kb, 0)} KB" for side, kb in slopes.items())
        out += [
            "",
            f"Marginal memory per concurrent run (PSS slope between the two largest N): {shown}.",
        ]
    return out


def fanout(w: dict[str, Any]) -> list[str]:
    cores = w.get("config", {}).get("cores", 2)
    out = [
        f"| tool | M | side | wall p50 s [min-max] | ideal {cores}-core s | vs ideal | "
        "speedup vs SDK |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in w["rows"]:
        for side in r.get("skipped", []):
            out.append(
                f"| {r['tool']} | {r['m']} | {side} | skipped in quick mode (one Ray worker "
                "per num_cpus=0 task) | | | |"
            )
        for side, s in r["sides"].items():
            out.append(
                f"| {r['tool']} | {r['m']} | {side} | {s['wall_p50_s']:.3f} [{s['min_s']:.3f}-"
                f"{s['max_s']:.3f}] | {r.get('ideal_s', r.get('ideal_2core_s')):.2f} | "
                f"{s.get('vs_ideal', s.get('vs_ideal_2core')):.2f} | "
                f"{_f(s.get('speedup_vs_sdk'), 2) if side != 'sdk' else ''} |"
            )
    sampled = [
        (r, side, s["cpu"]) for r in w["rows"] for side, s in r["sides"].items() if s.get("cpu")
    ]
    if sampled:
        r = sampled[0][0]
        roles = sorted({role for _, _, c in sampled for role in c["cpu_s_by_role_p50"]})
        roles.sort(
            key=lambda role: -max(c["cpu_s_by_role_p50"].get(role, 0) for _, _, c in sampled)
        )
        shown = [
            role
            for role in roles
            if any(c["cpu_s_by_role_p50"].get(role, 0) >= 0.05 for _, _, c in sampled)
        ]
        out += [
            "",
            f"CPU seconds of every process during one run, {r['tool']} tools, M = {r['m']} "
            f"(median of {r['reps']}; roles under 0.05 s in every column left out):",
            "",
            "| process | " + " | ".join(side for _, side, _ in sampled) + " |",
            "|---|" + "---|" * len(sampled),
            "| all | " + " | ".join(_f(c["cpu_s_total_p50"], 2) for _, _, c in sampled) + " |",
        ]
        for role in shown:
            out.append(
                f"| {role} | "
                + " | ".join(_f(c["cpu_s_by_role_p50"].get(role, 0.0), 2) for _, _, c in sampled)
                + " |"
            )
    return out


def checkpoints(w: dict[str, Any]) -> list[str]:
    cfg = w.get("config", {})
    out = [
        f"{cfg.get('turns')} tool turns per run (one remote=False call returning "
        f"{cfg.get('tool_result_bytes')} B each), model latency 0, {cfg.get('reps')} runs per "
        "pair, alternating. Cost = (p50 - p50 of `exit` on the same store) / turns.",
        "",
        "| store/mode | run p50 ms [min-max] | per turn ms | checkpoint cost per turn ms |",
        "|---|---|---|---|",
    ]
    for key, v in w["per_turn"].items():
        out.append(
            f"| {key} | {v['run_p50_ms']:.1f} [{v['run_min_ms']:.1f}-{v['run_max_ms']:.1f}] | "
            f"{v['per_turn_ms']:.2f} | {v['checkpoint_cost_per_turn_ms']:.2f} |"
        )
    at_100ms = w.get("s3_per_turn_over_exit_at_100ms_ms")
    if at_100ms:
        out += [
            "",
            "S3 at a 100 ms model, cost per turn over `exit`: "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in at_100ms.items())
            + " (what the run waits for that no model call hides).",
        ]
    micro = w.get("store_put_micro_1KiB", {})
    if micro:
        out += [
            "",
            "Store.put of 1 KiB from the driver: "
            + ", ".join(
                f"{k} p50 {v['p50_ms']:.2f} ms (p99 {v['p99_ms']:.2f})" for k, v in micro.items()
            ),
        ]
    out += [
        "",
        "| 50-turn run | records | bytes written | final history (msgpack / JSON) | ratio |",
        "|---|---|---|---|---|",
    ]
    for key, v in w["bytes"].items():
        out.append(
            f"| {key} | {v['checkpoint_records']} | {v['bytes_written']} | "
            f"{v['final_history_msgpack_bytes']} / {v['final_history_json_bytes']} | "
            f"{v['ratio_vs_msgpack_history']:.2f}x / {v['ratio_vs_json_history']:.2f}x |"
        )
    for key, v in w["bytes"].items():
        p = v.get("record_parts")
        if p:
            out.append(
                f"\n{key}: {p['full_records']} full + {p['delta_records']} delta records; "
                f"msgpack of their parts: new/replayed messages {p['append_bytes']} B, run "
                f"state {p['state_bytes']} B (of which tool journal {p['journal_bytes']} B), "
                "the rest is per-record header and integrity check."
            )
    if w.get("s3_requests"):
        from workloads import s3requests

        out += ["", *s3requests.markdown(w["s3_requests"])]
    return out


def suspend(w: dict[str, Any]) -> list[str]:
    s, r = w["suspend"], w["resume"]
    n = w["config"]["n"]
    procs = w.get("processes") or {}
    return [
        f"N = {n} runs; started in {w['start_all_s']} s; {w['running_before_suspend']} had finished "  # noqa: E501
        f"a tool call when all were suspended (load {w.get('load_at_suspend', {}).get('loadavg', ['?'])[0]}).",  # noqa: E501
        "",
        "| phase | outcome | p50 s | p99 s | max / all done s | rate |",
        "|---|---|---|---|---|---|",
        f"| suspend (all `suspend()` calls took {w['suspend_calls_s']} s) | {s['outcomes']} | "
        f"{s['latency_p50_s']} | {s['latency_p99_s']} | {s['latency_max_s']} | - |",
        f"| resume (all `resume()` calls took {w['resume_calls_s']} s) | {r['outcomes']} | "
        f"{r['latency_p50_s']} | {r['latency_p99_s']} | {r['all_done_s']} | "
        f"{r['resume_calls_per_s']} resume()/s, {r['completed_per_s']} completed/s |",
        "",
        f"Whole storm: CPU {_f(procs.get('cpu_s_total'))} s over {_f(procs.get('wall_s'))} s, "
        f"peak PSS {_f(procs.get('peak_total_pss_mb'), 0)} MB.",
    ]


def coldstart(w: dict[str, Any]) -> list[str]:
    out = [
        "| side | import s | init s | first run s | second run s | whole process s |",
        "|---|---|---|---|---|---|",
    ]
    for side, v in w["sides"].items():
        out.append(
            f"| {side} | {_f(v['import']['p50'], 2)} | {_f(v['init']['p50'] - v['import']['p50'], 2)} | "  # noqa: E501
            f"{_f(v['first_run_only']['p50'], 2)} [{_f(v['first_run_only']['min'], 2)}-"
            f"{_f(v['first_run_only']['max'], 2)}] | {_f(v['second_run_only']['p50'], 3)} | "
            f"{_f(v['process_total']['p50'], 2)} |"
        )
    return out


def coordinator(w: dict[str, Any]) -> list[str]:
    c, lat = w["config"], w["batch_latency_ms"]
    rss = ", ".join(f"{n // 1000}k: {mb:.0f}" for n, mb in w["rss_mb"])
    return [
        f"{c['reporters']} reporters, batches of {c['batch']} runs, {c['records_per_run']} "
        f"records of {c['record_bytes']} B reported per run, {c['runs']:,} runs in all.",
        "",
        "| runs/s | reports/s | coordinator CPU s per 1,000 runs | batch p50 ms | batch p99 ms "
        "| RSS growth after 10k runs |",
        "|---|---|---|---|---|---|",
        f"| {_f(w['runs_per_s'], 0)} | {_f(w['reports_per_s'], 0)} | "
        f"{_f(w['cpu_s_per_1000_runs'], 3)} | {_f(lat['p50'])} | {_f(lat['p99'])} | "
        f"{_f(w['rss_growth_after_10k_mb'])} MB |",
        "",
        f"Coordinator RSS (MB) by finished runs: {rss}; run table entries at the end: "
        f"{w['run_table_entries']:,}.",
    ]


def batch(w: dict[str, Any]) -> list[str]:
    c = w["config"]
    out = [
        f"`run_batch` over a generator of items, concurrency {c['concurrency']}, results to JSON "
        f"Lines shards; plain: {c['concurrency']} concurrent `raygents.start` runs "
        f"({_rng(w['plain_runs_per_s'])} runs/s).",
        "",
        "| items | runs/s | failed | driver peak RSS MB |",
        "|---|---|---|---|",
    ]
    for r in w["rows"]:
        out.append(
            f"| {r['items']:,} | {_rng(r['runs_per_s'])} | {r['failed']} | "
            f"{_f(r['driver_peak_rss_mb'])} |"
        )
    out += ["", f"A re-run of the largest job skips its items in {_rng(w['rerun_skip_s'], 2)} s."]
    return out


def ratelimit(w: dict[str, Any]) -> list[str]:
    c = w["config"]
    out = [
        f"One-call runs on {c['replicas']} agent actors, about {c['seconds_at_limit']} s of "
        "requests at each limit; the server answers 429 above 1.1x the limit.",
        "",
        "| limit /min | runs | achieved /s | of the limit | busiest second | 429s | failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in w["rows"]:
        out.append(
            f"| {r['limit_per_min']:,} | {r['runs']} | {_rng(r['achieved_per_s'])} | "
            f"{_f(r['ratio_to_limit'], 3)} | {r['peak_1s']} | {r['refused']} | {r['failed']} |"
        )
    return out


def tracing(w: dict[str, Any]) -> list[str]:
    spans, runs = w["spans_us_per_turn"], w["runs_ms"]
    out = [
        "An agent actor's spans per turn, in one process (on: the SDK with an exporter that "
        "drops every span behind its batch processor):",
        "",
        "| per turn | off p50 us | on p50 us | on p99 us | tool task span p50 us |",
        "|---|---|---|---|---|",
    ]
    for k in ("k=1", "k=4"):
        off, on = spans.get(f"off {k}", {}), spans.get(f"on_drop {k}", {})
        out.append(
            f"| {k} tool calls | {_f(off.get('turn_p50_us'))} | {_f(on.get('turn_p50_us'))} | "
            f"{_f(on.get('turn_p99_us'))} | {_f(on.get('task_p50_us'))} |"
        )
    out += [
        "",
        "2-turn runs with 4 tool tasks on Ray, half the traces sampled where tracing is on:",
        "",
        "| instance | runs | p50 ms | p99 ms |",
        "|---|---|---|---|",
    ]
    for name, r in runs.items():
        out.append(f"| {name} | {r['n']} | {_f(r['p50_ms'], 2)} | {_f(r['p99_ms'], 2)} |")
    return out


def context(w: dict[str, Any]) -> list[str]:
    out = [
        f"A {w['turns']}-turn run, one 1,000-character tool result a turn, model latency 0; "
        f"`Compaction(trigger_tokens={w['trigger_tokens']}, keep_last_turns=4)` against none "
        "(tokens as raygents' estimate counts them; first repetition):",
        "",
        "| policy | input tokens sent | largest request | last request | compactions | "
        "summariser tokens | ms per turn | a compaction p50 / max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in w["rows"].items():
        r = rows[0]
        took = f"{_f(r['compaction_ms_p50'], 2)} / {_f(r['compaction_ms_max'], 2)}"
        out.append(
            f"| {name} | {r['tokens_total']:,} | {r['tokens_max']:,} | {r['tokens_last']:,} | "
            f"{r['compactions']} | {r['summarizer_tokens']:,} | {_f(r['ms_per_turn'], 2)} | "
            f"{took if r['compactions'] else '-'} |"
        )
    return out


def cluster(w: dict[str, Any]) -> list[str]:
    cfg = w.get("config", {})
    out = [
        f"{cfg.get('nodes')} simulated nodes (`ray.cluster_utils.Cluster`: a head without CPUs, "
        f"{cfg.get('cpus_per_worker_node')} CPUs on each worker node), S3 store (moto), "
        f"`{cfg.get('durability')}`; 2-turn runs, {cfg.get('tool_calls_per_run')} tool tasks, "
        f"{cfg.get('latency_ms')} ms model.",
        "",
        "| N | runs/s p50 [min-max] | latency p50 / p99 ms | errors | recovered | "
        "tool calls by node |",
        "|---|---|---|---|---|---|",
    ]
    for r in w["rows"]:
        nodes = ", ".join(f"{k} {v}" for k, v in r["tool_calls_by_node"].items())
        out.append(
            f"| {r['n']} | {_rng(r['runs_per_s'])} | {_f(r['latency_p50_ms'])} / "
            f"{_f(r['latency_p99_ms'])} | {r['errors']} | {r['recovered']} | {nodes} |"
        )
    return out


def models(w: dict[str, Any]) -> list[str]:
    calls, affinity = w["per_call"], w["affinity"]
    out = [
        f"One fake Serve LLM deployment with {w['replicas']} replicas (CPU, answers at once): "
        "`ServeModel` through its deployment handle against `OpenAIChatModel` on Serve's HTTP "
        f"route to the same deployment; {w['runs']} concurrent 3-turn runs for the affinity.",
        "",
        "| side | per call p50 / p99 ms | turns on the run's first replica |",
        "|---|---|---|",
    ]
    for side, name in (
        ("serve_model", "`ServeModel` (handle)"),
        ("http", "`OpenAIChatModel` (HTTP)"),
    ):
        c, a = calls[side], affinity[side]
        out.append(
            f"| {name} | {_f(c['p50_ms'])} / {_f(c['p99_ms'])} | "
            f"{_f(100 * a['first_replica_share'], 0)}% of {a['turns']} |"
        )
    return out


SECTIONS = (
    ("overhead", "1. Single-run overhead (2-turn run, K tool calls)", overhead),
    (
        "throughput",
        "2. Throughput under concurrency (100 ms model, 4 trivial tools, sync file store)",
        throughput,
    ),
    ("fanout", "3. Fan-out through agent-as-tool (100 ms model)", fanout),
    ("checkpoints", "4. Checkpoints", checkpoints),
    ("suspend", "5. Suspend and resume storm", suspend),
    ("coldstart", "6. Cold start (fresh process, p50)", coldstart),
    ("coordinator", "7. One coordinator's ceiling (synthetic runs, memory store)", coordinator),
    ("batch", "8. Batch jobs (`run_batch`, 100 ms model, 4 tools in the actor)", batch),
    ("ratelimit", "9. A cluster-wide model rate limit (local server enforcing it)", ratelimit),
    ("tracing", "10. Tracing overhead (OpenTelemetry spans)", tracing),
    ("cluster", "12. A simulated 4-node cluster (S3 store)", cluster),
    ("context", "13. Context compaction (a 300-turn run)", context),
    ("models", "14. Models on the same cluster (Ray Serve)", models),
)


def _kept(results: dict[str, Any]) -> list[str]:
    """Where the workloads kept from earlier runs (``run.py --merge``) came from."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for name, w in results["workloads"].items():
        src = w.get("source") or {}
        if src.get("started") in (None, results["started"]):
            continue
        groups.setdefault((src["started"], src.get("command"), src.get("git")), []).append(name)
    return [
        f"Kept from an earlier run ({started}, `{command}`, raygents git {git}): "
        f"{', '.join(sorted(names))}."
        for (started, command, git), names in sorted(groups.items(), key=lambda kv: str(kv[0]))
    ]


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        f"Mode **{results['mode']}**, started {results['started']}, `{results['command']}`, "
        f"total {results.get('total_wall_s', '?')} s.",
        f"Machine: {m['cpus']} CPUs ({results.get('ray_cpus', 2)} declared to each workload's "
        f"Ray), {m['memory_gb']} GB, Python {m['python']}, "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items())
        + f", raygents git {m['git']}. "
        f"Load average at start {m['loadavg']}, at end {m.get('loadavg_end', '?')}.",
        *_kept(results),
        "",
        "### Targets",
        "",
        *checks(results),
    ]
    plots = results.get("plots") or []
    for name, title, fn in SECTIONS:
        w = results["workloads"].get(name)
        if not w:
            continue
        lines += ["", f"### {title}", ""]
        if not w.get("ok"):
            lines.append(f"FAILED: ```{(w.get('error') or '')[-800:]}```")
            continue
        lines.append(f"_{_load(w)}; took {w.get('wall_s')} s._")
        lines.append("")
        try:
            lines += fn(w)
        except Exception as exc:  # keep the rest of the report
            lines.append(f"(cannot render: {type(exc).__name__}: {exc})")
        for p in plots:
            if p.endswith(f"-{name}.png"):
                lines += ["", f"![{name}](results/{os.path.basename(p)})"]
    return "\n".join(lines) + "\n"


def readme_part(table: str, source: str) -> str:
    """What the README shows of a results table: its header and targets, the plots, and the
    file (``source``, relative to the README) with every workload's table."""
    head = table.split("\n### 1.")[0].rstrip()
    plots = [line for line in table.splitlines() if line.startswith("![")]
    return "\n\n".join([head, *plots, f"Every workload's table: [{source}]({source})."]) + "\n"


def update_readme(path: str, table: str, source: str) -> None:
    """Put :func:`readme_part` of ``table`` between the README's results markers."""
    with open(path) as f:
        text = f.read()
    if START not in text or END not in text:
        text += f"\n{START}\n{END}\n"
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    part = readme_part(table, os.path.relpath(source, os.path.dirname(os.path.abspath(path))))
    with open(path, "w") as f:
        f.write(f"{head}{START}\n{part}{END}{tail}")


if __name__ == "__main__":
    # python benchmarks/report.py results.json [--update-readme]
    with open(sys.argv[1]) as f:
        text = markdown(json.load(f))
    if "--update-readme" in sys.argv:
        readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md")
        update_readme(readme, text, os.path.abspath(sys.argv[1]))
    print(text)
