"""History, fork and replay over HTTP: a run's checkpoints, a new run from one of them, and
a check of a served agent graph against a run's recorded decisions (``raygents.history``,
``raygents.fork``, ``raygents.replay`` in a replica)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import raygents as rg
from raygents.errors import CheckpointNotFound, RaygentsError, UserError
from raygents.serve.body import ForkRequest, ReplayRequest
from raygents.serve.problems import Problem, problem_of
from raygents.serve.service import Service, checked_id
from raygents.serve.webhook import check_url

__all__ = ["fork", "history", "replay"]


def _problem(exc: RaygentsError, field: str | None = None) -> Problem:
    """The answer for an error of history, fork or replay: an unknown checkpoint names the
    field ``at``; another ``UserError`` (the graph lacks the run's agents, input after calls
    owed results, a child run) is the request's, 422."""
    if isinstance(exc, CheckpointNotFound):
        return Problem(422, type(exc).__name__, str(exc), field="at")
    problem = problem_of(exc)
    if field is not None and problem.status == 422:
        problem.fields.setdefault("field", field)
    return problem


async def history(service: Service, run_id: str) -> dict[str, Any]:
    """``GET /v1/runs/{run_id}/history``: the run's durable checkpoints, oldest first."""
    run_id = checked_id(run_id)
    try:
        found = await asyncio.to_thread(rg.history, run_id)
    except RaygentsError as exc:
        raise _problem(exc) from None
    checkpoints = []
    for checkpoint in found:
        doc = dataclasses.asdict(checkpoint)
        doc["at"] = checkpoint.at.isoformat()
        checkpoints.append(doc)
    return {"run_id": run_id, "checkpoints": checkpoints}


def _served(service: Service, name: str) -> rg.Agent:
    agent = service.agents.get(name)
    if agent is None:
        raise Problem(404, "AgentNotFound", f"no agent {name!r} is served here", field="agent")
    return agent


async def fork(service: Service, run_id: str, request: ForkRequest) -> tuple[int, dict[str, Any]]:
    """``POST /v1/runs/{run_id}/fork``: 201 and the fork's info (its outcome with ``wait``)."""
    source = checked_id(run_id)
    agent = _served(service, request.agent)
    if request.run_id is not None:
        checked_id(request.run_id)
        if request.run_id == source or await service.known(request.run_id):
            raise Problem(409, "RunExists", f"run id {request.run_id!r} is already in use")
    if request.webhook is not None:
        check_url(request.webhook, service.settings.webhook_networks)
    options = {
        "agent": agent,
        "at": request.at,
        "input": request.input,
        "run_id": request.run_id,
        "context": request.context,
        "timeout_s": request.timeout_s,
        "max_turns": request.max_turns,
        "max_tokens": request.max_tokens,
    }
    try:
        handle = await service.begin(
            lambda: rg.fork(source, **options), request.webhook, wait=request.wait
        )
    except RaygentsError as exc:
        raise _problem(exc, "input" if request.input is not None else None) from None
    except (TypeError, ValueError) as exc:  # (input that is not messages)
        raise Problem(422, "ValidationError", f"input: {exc}", field="input") from None
    return await service.answer(handle, wait=request.wait, webhook=request.webhook)


async def replay(service: Service, run_id: str, request: ReplayRequest) -> dict[str, Any]:
    """``POST /v1/runs/{run_id}/replay``: the report of re-driving the run's recorded
    decisions with a served agent's graph (no model and no tool is called)."""
    run_id = checked_id(run_id)
    agent = _served(service, request.agent)
    try:
        report = await asyncio.to_thread(rg.replay, run_id, agent=agent)
    except UserError as exc:  # (the graph lacks the run's agents, or it cannot be replayed)
        raise Problem(422, type(exc).__name__, str(exc), field="agent") from None
    except RaygentsError as exc:
        raise problem_of(exc) from None
    return dataclasses.asdict(report)
