"""CPU and memory of a fresh Ray worker's first call of a tool task, for raygents checkouts.

    cd benchmarks && python first_call.py --trees /tmp/base /work/main [--reps 15]

For each checkout (through ``PYTHONPATH``), a process builds the remote function raygents
submits for ``@tool(num_cpus=0)`` on the benchmarks' ``noop`` tool and packs one call. Then,
alternating the checkouts, fresh processes stand in for a fresh worker: they import what a
Ray worker has loaded by the time its first task's argument is deserialised (``ray``, and the
serialisers Ray registers then: ``ray.util.serialization_addons`` loads pydantic, starlette and
pyarrow's helpers), and measure the CPU time and resident memory that loading the function
and running its first call add, and the CPU of loading and calling it again. Prints medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)

import common as C  # noqa: E402

_BUILD = r"""
import sys, types
import raygents as rg
import raygents.runtime.tasks as T
from ray import cloudpickle
from raygents.runtime import wire
from raygents.tools import ToolContext
from common import noop

made = {}
class _Options:
    def options(self, **kw):
        return self
T.ray = types.SimpleNamespace(remote=lambda fn: made.setdefault("fn", fn) and _Options())
tool = rg.tool(num_cpus=0)(noop)
T.remote_tool(tool)
arguments = '{"i": 1}'
# Since raygents.runtime.worker the agent actor checks a function tool's arguments and the
# task gets keyword arguments; before, the task got the JSON text.
payload = tool.parse_arguments(arguments) if hasattr(tool, "parse_arguments") else arguments
with open(sys.argv[1] + "/function.pkl", "wb") as f:
    f.write(cloudpickle.dumps(made["fn"]))
with open(sys.argv[1] + "/call.pkl", "wb") as f:
    f.write(wire.dumps((ToolContext("run", "call", "noop", "agent"), payload)))
"""

_WORKER = r"""
import sys, time
import ray, ray.util.serialization_addons
from ray import cloudpickle

class _Context:  # takes every registration; apply() is run for the modules it imports
    def __getattr__(self, name):
        return lambda *args, **kwargs: None

ray.util.serialization_addons.apply(_Context())

def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS")) / 1024

with open(sys.argv[1] + "/function.pkl", "rb") as f:
    function = f.read()
with open(sys.argv[1] + "/call.pkl", "rb") as f:
    call = f.read()
before = rss_mb()
t0 = time.process_time()
cloudpickle.loads(function)(call)
t1 = time.process_time()
cloudpickle.loads(function)(call)
t2 = time.process_time()
print(t1 - t0, t2 - t1, rss_mb() - before)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", nargs="+", required=True, help="raygents checkouts to compare")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    dirs = {tree: C.scratch("rgfirst-") for tree in args.trees}
    for tree, d in dirs.items():
        subprocess.run([sys.executable, "-c", _BUILD, d], check=True, env=_env(tree), cwd=d)
    rows: dict[str, list[list[float]]] = {tree: [] for tree in args.trees}
    for _ in range(args.reps):
        for tree, d in dirs.items():
            out = subprocess.run(
                [sys.executable, "-c", _WORKER, d],
                env=_env(tree),
                cwd=d,
                capture_output=True,
                text=True,
                check=True,
            )
            rows[tree].append([float(x) for x in out.stdout.split()])
    print(f"medians of {args.reps}:")
    for tree, got in rows.items():
        first, second, mb = (statistics.median(r[i] for r in got) for i in range(3))
        print(
            f"  {tree}: first call {first * 1000:.1f} ms CPU (loading the function included), "
            f"again {second * 1000:.2f} ms, memory +{mb:.1f} MB"
        )


def _env(tree: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{os.path.abspath(tree)}:{BENCH_DIR}"}


if __name__ == "__main__":
    main()
