"""Agents over Ray Data: :func:`map_agent` runs an agent on each row of a dataset, as a step of
a streaming pipeline with Ray Data's own backpressure and progress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ray

from raygents.agents.agent import Agent
from raygents.core.jobbudget import JobBudget
from raygents.core.messages import Message, Usage
from raygents.core.parts import TextPart, image_part
from raygents.errors import (
    RaygentsError,
    RunInDoubt,
    RunInterrupted,
    SuspendedError,
    UserError,
)
from raygents.ids import validate_id
from raygents.runtime.driver.runchecks import check_run_limits

__all__ = ["map_agent"]


def map_agent(
    dataset: Any,
    agent: Agent,
    *,
    input_column: str = "input",
    output_column: str = "output",
    context_column: str | None = None,
    image_column: str | None = None,
    batch_size: int = 32,
    concurrency: int = 2,
    num_cpus: float = 0.1,
    max_turns: int | None = None,
    max_tokens: int | None = None,
    max_cost_usd: float | None = None,
    job_max_tokens: int | None = None,
    job_max_cost_usd: float | None = None,
    timeout_s: float | None = None,
    tenant: str | None = None,
) -> Any:
    """Run ``agent`` on each row of ``dataset``; returns a ``ray.data.Dataset`` (lazy, as
    every Ray Data transform) with the row's columns and the run's.

    Each row's ``input_column`` is a run input (a string, or messages); its run's final
    output goes to ``output_column``, and the columns ``status`` (``completed``, ``failed``,
    ``suspended`` or ``interrupted``), ``error`` (a message, or None) and ``usage`` (a dict of
    ``input_tokens``, ``output_tokens``, ``requests`` and ``cost_usd``, or None) say how it
    ended. A failed run fails its row, never the dataset.

    Runs start from up to ``concurrency`` Ray actors (each asking for ``num_cpus``), each with the
    runs of one batch of ``batch_size`` rows in flight; they join the raygents namespace of
    this driver (its coordinator, store and durability).

    Args:
        dataset: a ``ray.data.Dataset``.
        agent: the start agent of every row's run.
        input_column: the column of run inputs.
        output_column: the column for the final outputs.
        context_column: a column of run contexts, if any.
        image_column: a column of images, if any: each row's image (bytes of a PNG, JPEG,
            GIF or WebP, an ``http(s)`` or ``data:`` URL, or an :class:`~raygents.ImagePart`)
            goes into its run's input, after its text in one user message (or as one more
            user message after the row's messages). A row whose image is refused fails.
        batch_size: rows per batch (the runs an actor has in flight).
        concurrency: actors that start runs.
        num_cpus: CPUs each of those actors asks for (it only waits on runs).
        max_turns: caps ``max_turns`` of every agent in each run.
        max_tokens: each run's token budget (see :func:`raygents.start`).
        max_cost_usd: each run's budget in dollars (see :func:`raygents.start`).
        job_max_tokens: the tokens all rows' runs may use together: once the completed
            runs' usage reaches it, no more runs start (their rows are ``suspended``, with
            no run) and each actor suspends the runs of its batch still in flight (their
            rows are ``suspended``; ``rg.resume`` goes on with one). Rows in flight on other
            actors may pass it by what they use before those actors see it.
        job_max_cost_usd: the same in US dollars, at the models' prices.
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
    check_run_limits(timeout_s, max_turns, max_tokens, max_cost_usd)
    budget = JobBudget(job_max_tokens, job_max_cost_usd)
    from raygents.runtime.driver.client import current

    rt = current()
    settings = rt.settings
    joined = {"namespace": rt.namespace, "store": settings.store, "durability": settings.durability}
    options = {"max_turns": max_turns, "timeout_s": timeout_s, "tenant": tenant}
    options |= {"max_tokens": max_tokens, "max_cost_usd": max_cost_usd}
    columns = (input_column, output_column, context_column, image_column)
    tally = None
    if budget.max_tokens is not None or budget.max_cost_usd is not None:
        tally = ray.remote(_Tally).options(num_cpus=0).remote(budget)
    return dataset.map_batches(
        _Runner,
        fn_constructor_args=(agent, joined, options, columns, tally),
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
        columns: tuple[str, str, str | None, str | None],
        tally: Any = None,
    ) -> None:
        from raygents.runtime.driver.client import init

        init(handle_sigterm=False, **joined)
        self.tally = tally
        self.agent = agent
        self.options = dict(options)
        self.input_column, self.output_column, self.context_column, self.image_column = columns

    def __call__(self, batch: Any) -> Any:
        """The runs of one batch (a pandas DataFrame), as its rows with the run's columns."""
        from raygents.runtime.driver.runs import start

        if self.input_column not in batch.columns:
            raise UserError(
                f"map_agent: the dataset has no column {self.input_column!r} "
                f"(it has {list(batch.columns)!r})"
            )
        inputs = batch[self.input_column].tolist()
        contexts, images = (
            batch[c].tolist() if c is not None else [None] * len(inputs)
            for c in (self.context_column, self.image_column)
        )
        started: list[Any] = []
        reached = self._reached()
        for value, context, image in zip(inputs, contexts, images, strict=True):
            if reached is not None:
                started.append(SuspendedError(f"map_agent stopped before this row: {reached}"))
                continue
            try:
                run_input = _with_image(_run_input(value), image, self.image_column)
                started.append(start(self.agent, run_input, context=context, **self.options))
            except RaygentsError as exc:
                started.append(exc)
        ended = self._wait(started)
        out = batch.copy()
        out[self.output_column] = [e[0] for e in ended]
        out["status"] = [e[1] for e in ended]
        out["error"] = [e[2] for e in ended]
        out["usage"] = [e[3] for e in ended]
        return out

    def _reached(self) -> str | None:
        """Why the job's budget stops it (None: it does not, or it has none)."""
        if self.tally is None:
            return None
        why: str | None = ray.get(self.tally.reached.remote())
        return why

    def _wait(self, started: list[Any]) -> list[tuple[Any, ...]]:
        """Each row's run as its columns, in order; once the job's budget is reached, the
        runs of this batch still in flight suspend."""
        ended = []
        for index, handle in enumerate(started):
            row = _ended(handle)
            ended.append(row)
            if self.tally is None or row[3] is None:
                continue
            why: str | None = ray.get(self.tally.add.remote(row[3]))
            if why is not None:
                for later in started[index + 1 :]:
                    if not isinstance(later, RaygentsError):
                        later.suspend()
        return ended


class _Tally:
    """What the rows of one ``map_agent`` spent together, against its job budget (a small
    Ray actor that its dataset's actors share)."""

    def __init__(self, budget: JobBudget) -> None:
        self.budget = budget

    def add(self, usage: dict[str, Any]) -> str | None:
        """Count one completed row's usage; why the job must stop now, or None."""
        self.budget.add(
            Usage(
                usage["input_tokens"],
                usage["output_tokens"],
                requests=usage["requests"],
                cost_usd=usage["cost_usd"],
            )
        )
        return self.budget.reached()

    def reached(self) -> str | None:
        """Why the job must stop, or None."""
        return self.budget.reached()


def _run_input(value: Any) -> Any:
    """A cell as a run input: Ray Data hands lists back as arrays."""
    if hasattr(value, "tolist") and not isinstance(value, str):
        return value.tolist()
    return value


def _with_image(value: Any, image: Any, column: str | None) -> Any:
    """A row's run input with its image (None: it has none) after its text.

    Raises:
        UserError: the image is not one raygents takes.
    """
    if column is None or image is None:
        return value
    part = image_part(image, f"the image in column {column!r}")
    if isinstance(value, str):
        return [Message("user", [TextPart(value), part])]
    return [*value, Message("user", [part])]


def _ended(
    handle: Any,
) -> tuple[str | None, str, str | None, dict[str, int | float | None] | None]:
    """A row's run as its columns: ``(output, status, error, usage)``."""
    if isinstance(handle, SuspendedError):  # (the job's budget stopped it before its run)
        return None, "suspended", handle.message, None
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
        "cost_usd": usage.cost_usd,
    }
    return result.output_text, "completed", None, counts
