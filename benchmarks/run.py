"""Run the raygents benchmarks side by side with the OpenAI Agents SDK and the raw Ray floor.

    python benchmarks/run.py --quick                      # a few minutes
    python benchmarks/run.py --full                       # the full suite
    python benchmarks/run.py --quick --only fanout,overhead --out benchmarks/results/x.json
    python benchmarks/run.py --big --cpus 16              # a bigger machine: a few minutes

Each workload runs in a fresh Python process with a private local Ray instance (``--cpus``
CPUs, 2 by default; no dashboard). ``--big`` scales the workloads that grow with the machine
(throughput to N = 10,000, fan-out to M = 256, the simulated cluster to N = 10,000) and runs
only those unless ``--only`` says otherwise. The results go to one JSON file; the plots (PNG)
and a Markdown table go next to it. ``--update-readme`` copies its header, targets and plots
into benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)

from workloads import NAMES  # noqa: E402

TIMEOUT_S = {"smoke": 600, "quick": 900, "full": 3600}
BIG_NAMES = ("throughput", "fanout", "cluster")
"""What ``--big`` runs unless ``--only`` names others."""


def _worker(name: str, mode: str, out: str) -> int:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAY_ADDRESS", "RAYGENTS_STORE"):
        os.environ.pop(var, None)
    import importlib

    import machine

    module = importlib.import_module(f"workloads.{name}")
    tmp = tempfile.mkdtemp(prefix=f"rgbench-{name}-")
    started = time.time()
    load_before = machine.load()
    try:
        result = module.run(mode, tmp)
        result["ok"] = True
    except Exception:
        traceback.print_exc()
        result = {"ok": False, "error": traceback.format_exc()[-4000:]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["wall_s"] = round(time.time() - started, 1)
    result["load_before"] = load_before
    result["load_after"] = machine.load()
    machine.dump(result, out)
    return 0 if result["ok"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="a few minutes (default)")
    group.add_argument("--full", action="store_true", help="every repetition")
    group.add_argument("--smoke", action="store_true", help="tiny sizes, to check the harness")
    parser.add_argument(
        "--cpus",
        type=int,
        default=min(os.cpu_count() or 2, 2),
        help="CPUs each workload's Ray instance declares (default: this machine's, at most 2)",
    )
    parser.add_argument(
        "--big",
        action="store_true",
        help=f"the sizes of a bigger machine; runs {','.join(BIG_NAMES)} unless --only",
    )
    parser.add_argument("--only", default="", help=f"comma-separated subset of {','.join(NAMES)}")
    parser.add_argument(
        "--out", default="", help="the results JSON (default benchmarks/results/<mode>.json)"
    )
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the other workloads already in --out (re-run some of them)",
    )
    parser.add_argument(
        "--update-readme",
        action="store_true",
        help="copy the table's header, targets and plots into benchmarks/README.md",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        return _worker(args.worker, args.mode, args.worker_out)

    import machine
    import report

    mode = "full" if args.full else "smoke" if args.smoke else "quick"
    if args.cpus < 1:
        parser.error(f"--cpus must be at least 1, got {args.cpus}")
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(
        BIG_NAMES if args.big else NAMES
    )
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {NAMES}")
    label = f"big-{mode}" if args.big else mode
    out = args.out or os.path.join(BENCH_DIR, "results", f"{label}.json")
    command = "python benchmarks/run.py " + " ".join(sys.argv[1:])
    results = {
        "mode": mode,
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine.machine_info(),
        "ray_cpus": args.cpus,
        "big": args.big,
        "workloads": {},
    }
    source = {"started": results["started"], "command": command, "git": results["machine"]["git"]}
    if args.merge and os.path.exists(out):
        with open(out) as f:
            previous = json.load(f)
        earlier = {k: previous.get(k) for k in ("started", "command")}
        earlier["git"] = previous.get("machine", {}).get("git")
        results["workloads"] = {
            k: {"source": earlier, **v}  # a workload keeps where it came from
            for k, v in previous.get("workloads", {}).items()
            if k not in names
        }
    total0 = time.time()
    for name in names:
        settled = machine.settle()
        machine.log(
            f"=== {name} ({mode}) === after {settled['waited_s']} s for a quiet machine "
            f"(CPU {settled['cpu_percent']}%)"
        )
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            part = f.name
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
        env[machine.CPUS_ENV] = str(args.cpus)
        env[machine.BIG_ENV] = "1" if args.big else "0"
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "--worker",
                    name,
                    "--mode",
                    mode,
                    "--worker-out",
                    part,
                ],
                env=env,
                timeout=TIMEOUT_S["full" if args.big else mode],
                cwd=os.path.dirname(BENCH_DIR),
            )
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        try:
            with open(part) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {"ok": False, "error": f"the worker exited with {rc} and wrote no results"}
        os.unlink(part)
        data["exit"] = rc
        data["source"] = source
        data["settled"] = settled
        results["workloads"][name] = data
        machine.log(
            f"=== {name}: {'ok' if data.get('ok') else 'FAILED'} in {data.get('wall_s')} s ==="
        )
        machine.dump(results, out)  # keep what we have
    results["total_wall_s"] = round(time.time() - total0, 1)
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    machine.dump(results, out)
    base = os.path.splitext(out)[0]
    if not args.no_plots:
        import plots

        results["plots"] = plots.render(
            results, os.path.dirname(os.path.abspath(out)), prefix=os.path.basename(base)
        )
        machine.dump(results, out)
    table = report.markdown(results)
    with open(base + ".md", "w") as f:
        f.write(table)
    if args.update_readme:
        report.update_readme(os.path.join(BENCH_DIR, "README.md"), table, base + ".md")
    print(table)
    machine.log(f"results: {out} (+ {base}.md)")
    return 0 if all(w.get("ok") for w in results["workloads"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
