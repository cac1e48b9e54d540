"""PNG plots of a results file (matplotlib, Agg backend)."""

from __future__ import annotations

import os
from typing import Any

COLORS = {
    "raygents_task": "tab:blue",
    "raygents_local": "tab:cyan",
    "sdk": "tab:orange",
    "ray_floor": "tab:gray",
    "ray_floor_local": "silver",
}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def throughput(w: dict[str, Any], path: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows = w["rows"]
    sides = list(rows[0]["sides"])
    for side in sides:
        ns, med, lo, hi = [], [], [], []
        for r in rows:
            s = r["sides"].get(side)
            if not s or "runs_per_s" not in s or s["runs_per_s"].get("n", 0) == 0:
                continue
            rp = s["runs_per_s"]
            ns.append(r["n"])
            med.append(rp["p50"])
            lo.append(rp["p50"] - rp["min"])
            hi.append(rp["max"] - rp["p50"])
        if ns:
            ax.errorbar(
                ns, med, yerr=[lo, hi], marker="o", capsize=3, label=side, color=COLORS.get(side)
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("concurrent runs N")
    ax.set_ylabel("runs/s (median, min-max)")
    ax.set_title("Throughput: 2-turn runs, 4 trivial tools, 100 ms model")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fanout(w: dict[str, Any], path: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    cores = w.get("config", {}).get("cores", 2)
    for ax, tool in zip(axes, ("cpu", "trivial"), strict=False):
        rows = [r for r in w["rows"] if r["tool"] == tool]
        if not rows:
            continue
        ms = [r["m"] for r in rows]
        for side in rows[0]["sides"]:
            have = [r for r in rows if side in r["sides"]]
            med = [r["sides"][side]["wall_p50_s"] for r in have]
            lo = [r["sides"][side]["wall_p50_s"] - r["sides"][side]["min_s"] for r in have]
            hi = [r["sides"][side]["max_s"] - r["sides"][side]["wall_p50_s"] for r in have]
            ax.errorbar(
                [r["m"] for r in have],
                med,
                yerr=[lo, hi],
                marker="o",
                capsize=3,
                label=side,
                color=COLORS.get(side),
            )
        ideal = [r.get("ideal_s", r.get("ideal_2core_s")) for r in rows]
        ax.plot(ms, ideal, "k--", label=f"ideal, {cores} cores")
        if tool == "cpu":
            ax.plot(ms, [r["ideal_1core_s"] for r in rows], "k:", label="ideal, 1 core")
            ax.plot(
                ms,
                [1.15 * x for x in ideal],
                color="green",
                lw=0.8,
                ls="-.",
                label="target: 1.15 x ideal",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sub-agents M")
        ax.set_ylabel("wall time of the run, s (median, min-max)")
        ax.set_title(
            f"Fan-out, {'200 ms CPU tools' if tool == 'cpu' else 'trivial tools'}, 100 ms model"
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def overhead(w: dict[str, Any], path: str) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, lat in zip(axes, (0, 100), strict=False):
        rows = [r for r in w["rows"] if r["latency_ms"] == lat]
        if not rows:
            continue
        sides = list(rows[0]["sides"])
        width = 0.8 / len(sides)
        for i, side in enumerate(sides):
            xs = [j + i * width for j in range(len(rows))]
            ax.bar(
                xs,
                [r["sides"][side]["p50_ms"] for r in rows],
                width,
                label=side,
                color=COLORS.get(side),
            )
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rows))])
        ax.set_xticklabels([f"K={r['k']}" for r in rows])
        ax.set_yscale("log")
        ax.set_ylabel("2-turn run latency, ms (p50)")
        ax.set_title(f"Single run, model latency {lat} ms")
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(results: dict[str, Any], out_dir: str, prefix: str = "quick") -> list[str]:
    """Write the plots for the workloads present; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    made = []
    ws = results.get("workloads", {})
    for name, fn in (("throughput", throughput), ("fanout", fanout), ("overhead", overhead)):
        w = ws.get(name)
        if w and w.get("ok") and w.get("rows"):
            path = os.path.join(out_dir, f"{prefix}-{name}.png")
            try:
                fn(w, path)
                made.append(path)
            except Exception as exc:  # a plot must not lose the results
                print(f"plot {name} failed: {exc}")
    return made
