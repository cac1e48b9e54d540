"""Agents over Ray Data: :func:`map_agent` runs an agent on each row of a dataset, as a step of
a streaming pipeline with Ray Data's own backpressure and progress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raygents.agents.agent import Agent
from raygents.errors import (
    RaygentsError,
    RunInDoubt,
    RunInterrupted,
    SuspendedError,
    UserError,
)
from raygents.ids import validate_id

__all__ = ["map_agent"]


def map_agent(
    dataset: Any,
    agent: Agent,
    *,
    input_column: str = "input",
    output_column: str = "output",
    context_column: str | None = None,
    batch_size: int = 32,
    concurrency: int = 2,
    num_cpus: float = 0.1,
    max_turns: int | None = None,
    timeout_s: float | None = None,
    tenant: str | None = None,
) -> Any:
    """Run ``agent`` on each row of ``dataset``; returns a ``ray.data.Dataset`` (lazy, as
    every Ray Data transform) with the row's columns and the run's.

    Each row's ``input_column`` is a run input (a string, or messages); its run's final
    output goes to ``output_column``, and the columns ``status`` (``completed``, ``failed``,
    ``suspended`` or ``interrupted``), ``error`` (a message, or None) and ``usage`` (a dict of
    ``input_tokens``, ``output_tokens`` and ``requests``, or None) say how it ended. A failed
    run fails its row, never the dataset.

    Runs start from up to ``concurrency`` Ray actors (each asking for ``num_cpus``), each with the
    runs of one batch of ``batch_size`` rows in flight; they join the raygents namespace of
    this driver (its coordinator, store and durability).

    Args:
        dataset: a ``ray.data.Dataset``.
        agent: the start agent of every row's run.
        input_column: the column of run inputs.
        output_column: the column for the final outputs.
        context_column: a column of run contexts, if any.
        batch_size: rows per batch (the runs an actor has in flight).
        concurrency: actors that start runs.
        num_cpus: CPUs each of those actors asks for (it only waits on runs).
        max_turns: caps ``max_turns`` of every agent in each run.
        timeout_s: each run's wall-clock budget, after which it suspends.
        tenant: whose quota of runs in flight the runs count against.
    """
    if not isinstance(agent, Agent):
        raise UserError(f"expected an Agent, got {type(agent).__name__!r}")
    for name, value in (("batch_size", batch_size), ("concurrency", concurrency)):
        if type(value) is not int or value < 1:
            raise UserError(f"{name} must be an int of at least 1, got {value!r}")
    if tenant is not None:
        validate_id(tenant, "tenant")
    from raygents.runtime.driver.client import current

    rt = current()
    settings = rt.settings
    joined = {"namespace": rt.namespace, "store": settings.store, "durability": settings.durability}
    options = {"max_turns": max_turns, "timeout_s": timeout_s, "tenant": tenant}
    columns = (input_column, output_column, context_column)
    return dataset.map_batches(
        _Runner,
        fn_constructor_args=(agent, joined, options, columns),
        batch_size=batch_size,
        batch_format="pandas",
        concurrency=(1, concurrency),  # (a small dataset needs fewer actors)
        num_cpus=num_cpus,
    )


class _Runner:
    """A Ray Data actor that runs the agent on each row of its batches."""

    def __init__(
        self,
        agent: Agent,
        joined: Mapping[str, Any],
        options: Mapping[str, Any],
        columns: tuple[str, str, str | None],
    ) -> None:
        from raygents.runtime.driver.client import init

        init(handle_sigterm=False, **joined)
        self.agent = agent
        self.options = dict(options)
        self.input_column, self.output_column, self.context_column = columns

    def __call__(self, batch: Any) -> Any:
        """The runs of one batch (a pandas DataFrame), as its rows with the run's columns."""
        from raygents.runtime.driver.runs import start

        if self.input_column not in batch.columns:
            raise UserError(
                f"map_agent: the dataset has no column {self.input_column!r} "
                f"(it has {list(batch.columns)!r})"
            )
        inputs = batch[self.input_column].tolist()
        contexts = (
            batch[self.context_column].tolist()
            if self.context_column is not None
            else [None] * len(inputs)
        )
        started: list[Any] = []
        for value, context in zip(inputs, contexts, strict=True):
            try:
                started.append(
                    start(self.agent, _run_input(value), context=context, **self.options)
                )
            except RaygentsError as exc:
                started.append(exc)
        ended = [_ended(h) for h in started]
        out = batch.copy()
        out[self.output_column] = [e[0] for e in ended]
        out["status"] = [e[1] for e in ended]
        out["error"] = [e[2] for e in ended]
        out["usage"] = [e[3] for e in ended]
        return out


def _run_input(value: Any) -> Any:
    """A cell as a run input: Ray Data hands lists back as arrays."""
    if hasattr(value, "tolist") and not isinstance(value, str):
        return value.tolist()
    return value


def _ended(handle: Any) -> tuple[str | None, str, str | None, dict[str, int] | None]:
    """A row's run as its columns: ``(output, status, error, usage)``."""
    if isinstance(handle, RaygentsError):
        return None, "failed", handle.message, None
    try:
        result = handle.result()
    except SuspendedError as exc:
        return None, "suspended", exc.message, None
    except (RunInterrupted, RunInDoubt) as exc:  # (it waits for a person)
        return None, "interrupted", exc.message, None
    except RaygentsError as exc:
        return None, "failed", exc.message or type(exc).__name__, None
    except Exception as exc:
        return None, "failed", f"{type(exc).__name__}: {exc}", None
    usage = result.usage
    counts = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "requests": usage.requests,
    }
    return result.output_text, "completed", None, counts
