"""The Prometheus metrics raygents records, through ``ray.util.metrics``, made once per process.

Ray's metrics agent on each node serves them with its own (``ray_``-prefixed, so
``raygents_runs_started`` is scraped as ``ray_raygents_runs_started_total``), next to Ray's
metrics: the endpoint of ``ray start --metrics-export-port`` and the dashboard's. Labels are
bounded: agent, model and tool names and closed sets of statuses, never run ids or causes
(a suspend's cause is any string a caller gives). A record costs a few microseconds; one that
fails is dropped, never a run's failure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from raygents.stores import s3

if TYPE_CHECKING:
    from raygents.core.envelope import Outcome
    from raygents.core.messages import Usage

__all__ = [
    "checkpoint_bytes",
    "checkpoint_written",
    "model_call",
    "rate_limit_pause",
    "rate_limit_wait",
    "recovered",
    "run_ended",
    "run_started",
    "store_retries",
    "suspended",
    "tool_call",
    "turn",
]

log = logging.getLogger("raygents")

_CALL_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
"""Model and tool call latency buckets: a local tool's milliseconds to a long model answer."""
_WRITE_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""Checkpoint write buckets: a local file's fsync to a slow object store."""
_WAIT_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Rate-limit wait buckets, up to the longest pause a provider may ask for."""
_BYTES = tuple(float(4**i * 256) for i in range(10))
"""Checkpoint record size buckets: 256 B to 64 MiB, by fours."""

# name: (kind, description, label keys, bucket boundaries for a histogram)
_SPECS: dict[str, tuple[str, str, tuple[str, ...], Sequence[float]]] = {
    "runs_started": (
        "counter",
        "Runs that began on an agent: new, or resumed from a checkpoint (a recovery too).",
        ("agent", "how"),
        (),
    ),
    "runs_ended": (
        "counter",
        "Runs that stopped, by the agent they stopped on and their status.",
        ("agent", "status"),
        (),
    ),
    "turns": ("counter", "Model calls answered, by agent.", ("agent",), ()),
    "tokens": (
        "counter",
        "Tokens used by model calls, by model and direction (input or output).",
        ("model", "direction"),
        (),
    ),
    "model_call_seconds": (
        "histogram",
        "Model call latency (after any rate-limit wait), by agent, model and outcome.",
        ("agent", "model", "outcome"),
        _CALL_S,
    ),
    "tool_call_seconds": (
        "histogram",
        "Tool call latency, by agent, tool and outcome.",
        ("agent", "tool", "outcome"),
        _CALL_S,
    ),
    "checkpoint_bytes": (
        "histogram",
        "Size of checkpoint records, by agent and kind (full or delta).",
        ("agent", "kind"),
        _BYTES,
    ),
    "checkpoint_write_seconds": (
        "histogram",
        "Time from a checkpoint record's start to its acknowledgement, by agent.",
        ("agent",),
        _WRITE_S,
    ),
    "recoveries": (
        "counter",
        "Runs dispatched again after their agent actor died or went stale, by agent.",
        ("agent",),
        (),
    ),
    "suspends": ("counter", "Runs suspended with a checkpoint, by agent.", ("agent",), ()),
    "rate_limit_wait_seconds": (
        "histogram",
        "Time model calls waited for their turn at the namespace's rate limiter, by model.",
        ("model",),
        _WAIT_S,
    ),
    "rate_limit_pauses": (
        "counter",
        "Pauses a provider asked for (429 with Retry-After), by model.",
        ("model",),
        (),
    ),
    "store_retries": (
        "counter",
        "Requests to the checkpoint store sent again (throttled, a 5xx, a lost connection), "
        "by store and action (write, read, list, delete).",
        ("store", "action"),
        (),
    ),
}

_made: dict[str, Any] = {}
"""This process's metric objects by name, made on first use."""


def _metric(name: str) -> Any:
    found = _made.get(name)
    if found is None:
        from ray.util import metrics

        kind, description, keys, buckets = _SPECS[name]
        full = f"raygents_{name}"
        if kind == "counter":
            found = metrics.Counter(full, description, tag_keys=keys)
        else:
            found = metrics.Histogram(full, description, list(buckets), tag_keys=keys)
        _made[name] = found
    return found


def _inc(name: str, tags: dict[str, str], value: float = 1.0) -> None:
    try:
        _metric(name).inc(value, tags)
    except Exception as exc:  # a lost data point is never a run's failure
        log.debug("cannot record metric %s: %s", name, exc)


def _observe(name: str, tags: dict[str, str], value: float) -> None:
    try:
        _metric(name).observe(value, tags)
    except Exception as exc:
        log.debug("cannot record metric %s: %s", name, exc)


def run_started(agent: str, *, resumed: bool) -> None:
    """A run began on ``agent``: new, or resumed from a checkpoint (by a caller or a recovery)."""
    _inc("runs_started", {"agent": agent, "how": "resumed" if resumed else "new"})


def run_ended(agent: str, outcome: Outcome) -> None:
    """A run stopped on ``agent`` (a handoff is no end): completed, failed, cancelled,
    suspended, awaiting_approval or in_doubt."""
    status: str = outcome.kind
    if status == "handoff":
        return
    if status == "interrupted":
        status = "in_doubt" if outcome.state.in_doubt else "awaiting_approval"
    elif status == "failed" and type(outcome.error).__name__ == "RunCancelled":
        status = "cancelled"
    _inc("runs_ended", {"agent": agent, "status": status})


def turn(agent: str) -> None:
    """A model call of ``agent`` was answered."""
    _inc("turns", {"agent": agent})


def model_call(agent: str, model: str, seconds: float, usage: Usage | None) -> None:
    """A model call took ``seconds``; ``usage`` is its answer's (None: it failed)."""
    outcome = "error" if usage is None else "ok"
    _observe("model_call_seconds", {"agent": agent, "model": model, "outcome": outcome}, seconds)
    if usage is not None:
        if usage.input_tokens > 0:
            _inc("tokens", {"model": model, "direction": "input"}, usage.input_tokens)
        if usage.output_tokens > 0:
            _inc("tokens", {"model": model, "direction": "output"}, usage.output_tokens)


def tool_call(agent: str, tool: str, seconds: float, *, error: bool) -> None:
    """A tool call of ``agent`` took ``seconds`` and returned a result (an error or not)."""
    tags = {"agent": agent, "tool": tool, "outcome": "error" if error else "ok"}
    _observe("tool_call_seconds", tags, seconds)


def checkpoint_bytes(agent: str, size: int, *, full: bool) -> None:
    """A checkpoint record of ``size`` bytes was encoded for a run on ``agent``."""
    _observe("checkpoint_bytes", {"agent": agent, "kind": "full" if full else "delta"}, size)


def checkpoint_written(agent: str, seconds: float) -> None:
    """A checkpoint record a run waited for was acknowledged after ``seconds``."""
    _observe("checkpoint_write_seconds", {"agent": agent}, seconds)


def recovered(agent: str) -> None:
    """A run on ``agent`` was dispatched again after its actor was lost."""
    _inc("recoveries", {"agent": agent})


def suspended(agent: str) -> None:
    """A run on ``agent`` suspended with a checkpoint."""
    _inc("suspends", {"agent": agent})


def rate_limit_wait(model: str, seconds: float) -> None:
    """A call of ``model`` waited ``seconds`` at the rate limiter (zero: it went at once)."""
    _observe("rate_limit_wait_seconds", {"model": model}, seconds)


def rate_limit_pause(model: str) -> None:
    """A provider asked ``model``'s callers to pause."""
    _inc("rate_limit_pauses", {"model": model})


def store_retries(store: str, action: str, count: int) -> None:
    """``count`` requests of ``action`` to a ``store`` (``s3``) store were sent again."""
    _inc("store_retries", {"store": store, "action": action}, count)


def _s3_retries(action: str, count: int) -> None:
    store_retries("s3", action, count)


s3.on_retries(_s3_retries)  # (in every process that records metrics: S3 stores are opened there)
