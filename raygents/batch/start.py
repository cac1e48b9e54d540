"""start_batch and run_batch: a batch job's arguments checked, and its handle started.

What a job does once started, and how running it again continues it, is
:mod:`raygents.batch.job`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from raygents.agents.agent import Agent
from raygents.batch.earlier import OnChange
from raygents.batch.fingerprint import graph_fingerprint
from raygents.batch.items import BatchResult, check_job_id, length_of
from raygents.batch.job import BatchHandle
from raygents.batch.output import open_output
from raygents.batch.progress import open_display
from raygents.batch.runs import JobRuns
from raygents.core.jobbudget import JobBudget
from raygents.errors import UserError
from raygents.ids import validate_id
from raygents.runtime.driver.runchecks import check_run_limits

__all__ = ["run_batch", "start_batch"]


def start_batch(
    agent: Agent,
    inputs: Iterable[Any],
    *,
    job_id: str,
    concurrency: int = 64,
    output: str | None = None,
    max_failures: int | None = None,
    progress: bool | None = None,
    context: Any = None,
    max_turns: int | None = None,
    max_tokens: int | None = None,
    max_cost_usd: float | None = None,
    job_max_tokens: int | None = None,
    job_max_cost_usd: float | None = None,
    timeout_s: float | None = None,
    tenant: str | None = None,
    on_change: OnChange = "error",
) -> BatchHandle:
    """Run ``agent`` over ``inputs`` in the background and return the job's handle at once.

    Args:
        agent: the start agent of every item's run.
        inputs: any iterable, read lazily (never listed): each a run input (a string or
            messages), or a dict ``{"input": ..., "context": ...}``.
        job_id: names the job; item ``i`` runs as :func:`~raygents.batch.items.batch_run_id`
            ``(job_id, i)``. Running a job again skips its completed items, resumes
            suspended ones and starts the rest.
        concurrency: items in flight at most.
        output: a directory or ``s3://bucket/prefix``: items go to JSON Lines shards there
            as they end (:mod:`raygents.batch.output`) and are not kept in memory.
        max_failures: stop the job (suspending the items in flight) once more items than
            this failed; None never stops.
        progress: False shows nothing; otherwise a bar on a terminal, log lines elsewhere.
        context: every item's run context, unless its dict gives one.
        max_turns: caps ``max_turns`` of every agent in each run.
        max_tokens: each run's token budget (see :func:`raygents.start`).
        max_cost_usd: each run's budget in dollars (see :func:`raygents.start`).
        job_max_tokens: the tokens all items of the job may use together: once the
            completed items' usage reaches it (those of earlier runs of the job included),
            no more items start and those in flight suspend (``stopped`` says why); running
            the job again with a larger budget goes on. Items in flight may pass it by what
            they use before they suspend.
        job_max_cost_usd: the same in US dollars, at the models' prices.
        timeout_s: each run's wall-clock budget, after which it suspends.
        tenant: whose quota of runs in flight the runs count against. With
            ``max_concurrent_runs`` (``raygents.init``), items wait for a slot of the tenant
            (never failing with ``TooManyRuns``), and no more than the limit are in flight.
        on_change: what to do, running a job again, with an item its ledger holds as
            completed with another run input or agent graph (the ledger keeps their
            fingerprints, :mod:`raygents.batch.fingerprint`): ``"error"`` stops the job with
            a ``UserError`` naming the job and the first such index; ``"rerun"`` runs the
            item again, as run :func:`raygents.batch.fingerprint.changed_run_id`
            (``<job_id>.<index>-<16 hex digits>``), which cannot collide with its old run:
            that run and its kept result stay as they were. Only completed items are
            compared: an item whose run stopped (suspended, awaiting approval) resumes it.

    Raises:
        UserError: an argument is unusable (checked before anything starts).
    """
    if not isinstance(agent, Agent):
        raise UserError(f"expected an Agent, got {type(agent).__name__!r}")
    check_job_id(job_id)
    if type(concurrency) is not int or concurrency < 1:
        raise UserError(f"concurrency must be an int of at least 1, got {concurrency!r}")
    if max_failures is not None and (type(max_failures) is not int or max_failures < 0):
        raise UserError(f"max_failures must be an int of at least 0 or None, got {max_failures!r}")
    if tenant is not None:
        validate_id(tenant, "tenant")
    if on_change not in ("error", "rerun"):
        raise UserError(f"on_change must be 'error' or 'rerun', got {on_change!r}")
    graph_fp = graph_fingerprint(agent)
    check_run_limits(timeout_s, max_turns, max_tokens, max_cost_usd)
    budget = JobBudget(job_max_tokens, job_max_cost_usd)
    if isinstance(inputs, (str, bytes, Mapping)) or not isinstance(inputs, Iterable):
        raise UserError(f"inputs must be an iterable of run inputs, got {type(inputs).__name__}")
    options = {
        "max_turns": max_turns,
        "max_tokens": max_tokens,
        "max_cost_usd": max_cost_usd,
        "timeout_s": timeout_s,
        "tenant": tenant,
    }
    sink = None if output is None else open_output(output, job_id)
    from raygents.runtime.driver.client import current

    rt = current()  # (raygents starts here, in the caller's thread: the main one handles SIGTERM)
    limit = rt.directory.cached_settings().max_concurrent_runs
    if limit is not None:  # (the job's items wait for their tenant's slots: never more of them)
        concurrency = min(concurrency, limit)
    runs = JobRuns(agent, job_id, context, options)
    handle = BatchHandle(
        runs,
        inputs,
        concurrency,
        sink,
        max_failures,
        on_change=on_change,
        graph_fp=graph_fp,
        budget=budget,
    )
    handle._start(open_display(progress, job_id, length_of(inputs)), rt.stoppers)
    return handle


def run_batch(agent: Agent, inputs: Iterable[Any], *, job_id: str, **options: Any) -> BatchResult:
    """Run ``agent`` over ``inputs`` and return the job's :class:`BatchResult` (blocks).

    Takes the options of :func:`start_batch`.
    """
    return start_batch(agent, inputs, job_id=job_id, **options).result()
