"""The workloads of the benchmark suite; each runs in a fresh process (see ``run.py``)."""

NAMES = (
    "overhead",
    "throughput",
    "fanout",
    "checkpoints",
    "suspend",
    "coldstart",
    "coordinator",
    "batch",
    "tracing",
    "ratelimit",
    "serve",
    "context",
    "cluster",
    "models",
)
