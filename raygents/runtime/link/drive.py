"""Driving a run across agent actors: send the envelope, follow handoffs, relay events, send
it on to the agent's next actor when the one it reached retires, and recover the run from its
newest checkpoint when its actor dies or stops answering."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable
from typing import Any

from raygents.core.envelope import Envelope, Outcome, SuspendRequest
from raygents.core.events import RunEvent
from raygents.errors import CANCEL, RaygentsError
from raygents.runtime.link.coalesce import Coalescer
from raygents.runtime.link.coordinator_client import CoordinatorClient
from raygents.runtime.link.directory import Directory
from raygents.runtime.link.handles import actor_key
from raygents.runtime.link.mailbox import LOST, ActorRestarted, ActorRetired, Mailboxes
from raygents.telemetry import metrics

__all__ = ["StaleActor", "SuspendToken", "drive"]

log = logging.getLogger("raygents")

_MAX_WAITS = 120  # about three minutes of an actor restarting or unreachable


class StaleActor(RaygentsError):
    """An agent actor stopped answering heartbeats."""

    actor: Any = None


class SuspendToken:
    """A run's suspend request, and the actor to tell about it.

    Lives in the process that drives the run (the driver for top-level runs, the parent's
    actor for agent-as-tool children); only touched from that process's event loop.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.cause: str | None = None
        self.actor: Any = None
        """Where requests go: the handle of the agent actor that has the run, or the
        coordinator's client (:class:`CoordinatorClient`) where the coordinator drives the
        run or passes requests on to its actor; None while the run is on its way."""
        self.epoch: int | None = None
        """The epoch of the run's dispatch the requests are for (None: not known here)."""

    def request(self, cause: str) -> None:
        """Ask for a suspend; the run stops at its next safe point (a cancel, ``CANCEL``,
        stops it at once and wins over a suspend asked for before). A request that changes
        nothing is not sent again: the actor has it, or the run's next dispatch carries it
        (a copy that came after the run left would wait there for its next dispatch)."""
        if self.cause == cause or (self.cause is not None and cause != CANCEL):
            return
        self.cause = cause
        if self.actor is not None:
            _tell(self.actor, self.run_id, cause, self.epoch)


def _send(
    key: tuple[asyncio.AbstractEventLoop, str], requests: list[tuple[Any, SuspendRequest]]
) -> None:
    _suspend(requests[0][0], [request for _, request in requests])


def _suspend(target: Any, requests: list[SuspendRequest]) -> None:
    if isinstance(target, CoordinatorClient):
        target.send_suspends(requests)
    else:
        target.suspend.remote(requests)


# Suspend requests for one actor made in the same turn of the event loop go in one call: a
# storm of suspends (a thousand runs, SIGTERM) would otherwise be a thousand calls, which Ray
# starts one after the other, each waiting for the busy actor's event loop. (Keyed by loop
# too: a loop that stopped first never holds a later one's requests.)
_requests: Coalescer[tuple[asyncio.AbstractEventLoop, str], tuple[Any, SuspendRequest]] = Coalescer(
    _send
)


def _tell(actor: Any, run_id: str, cause: str, epoch: int | None) -> None:
    request = (run_id, cause) if epoch is None else (run_id, cause, epoch)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not on an event loop: nothing to gather with
        _suspend(actor, [request])
        return
    handle = actor.handle() if isinstance(actor, CoordinatorClient) else actor
    _requests.add((loop, actor_key(handle)), (actor, request))


async def drive(
    envelope: Envelope,
    directory: Directory,
    token: SuspendToken,
    emit: Callable[[RunEvent], None],
    *,
    client: CoordinatorClient,
    mailboxes: Mailboxes,
) -> Outcome:
    """Run ``envelope`` to an end, hopping between actors on handoffs.

    When the actor running it dies or goes stale, the run is dispatched again (a new epoch
    fences the old copy) from its newest durable checkpoint, with bounded attempts and
    exponential backoff; the ``recovered`` event says so. An actor that retired (idle, or
    of an older definition of its agent) before it took the run is no loss: the run goes to
    the agent's next actor as it is, in the same dispatch.

    Args:
        envelope: the run.
        directory: finds the agent actors, watches them, and claims the run again.
        token: the run's suspend requests.
        emit: takes the run's events.
        client: the coordinator (settings, stale actors, the checkpoint to recover from).
        mailboxes: where the run's actors send its events and outcome back.
    """
    first = envelope
    attempt = waits = 0
    announced = -1  # the attempt the last ``recovered`` event reported
    while True:
        name = envelope.state.agent_name
        progress: list[bool] = []
        actor = None
        try:
            actor = await directory.actor(envelope.graph_fp, name)
            token.actor = actor  # (suspends asked from now on are sent to it)
            token.epoch = envelope.state.epoch
            if token.cause is not None:  # asked before: it goes with the run
                envelope = dataclasses.replace(envelope, suspend_cause=token.cause)
            outcome = await _call(actor, envelope, emit, directory, mailboxes, progress)
        except (*LOST, StaleActor, ActorRestarted, ActorRetired) as exc:
            if not progress and waits < _MAX_WAITS and await _retired(actor, exc, envelope, client):
                waits += 1
                directory.forget(envelope.graph_fp, name)
                continue  # (no recovery: the run never reached that actor)
            if "creation task" in str(exc):  # the agent cannot even be built: not transient
                error = RaygentsError(
                    f"cannot start the actor of agent {name!r}: {_first_lines(exc)}",
                    run_id=envelope.state.run_id,
                )
                return Outcome("failed", envelope.state, error=error)
            if not progress and not isinstance(exc, StaleActor) and waits < _MAX_WAITS:
                waits += 1  # restarting or unreachable before the run got there: wait
                await asyncio.sleep(min(0.2 * waits, 2.0))
            else:
                attempt += 1
            retry = await _recover(
                first, envelope, directory, client, emit, exc, attempt, announced
            )
            announced = attempt
            if isinstance(retry, Outcome):
                return retry
            envelope = retry
            continue
        finally:
            token.actor = None
        if outcome.kind != "handoff":
            return outcome
        envelope = dataclasses.replace(envelope, state=outcome.state, activate=True)


async def _retired(
    actor: Any, exc: BaseException, envelope: Envelope, client: CoordinatorClient
) -> bool:
    """Whether the run did not reach ``actor`` because it retires: it refused the run, or it
    was gone when the run was sent and the coordinator knows it retired. The coordinator then
    hands it out no more."""
    if actor is None or isinstance(exc, (StaleActor, ActorRestarted)):
        return False
    actor_id = actor_key(actor)
    if not isinstance(exc, ActorRetired):
        try:
            return await client.actor_retired(actor_id)
        except LOST:  # (the coordinator is being replaced: recovery finds the new one)
            return False
    await client.actor_retiring(envelope.graph_fp, envelope.state.agent_name, actor_id)
    return True


def _first_lines(exc: BaseException, count: int = 12) -> str:
    return "\n".join(str(exc).splitlines()[:count])


async def _recover(
    first: Envelope,
    current: Envelope,
    directory: Directory,
    client: CoordinatorClient,
    emit: Callable[[RunEvent], None],
    exc: BaseException,
    attempt: int,
    announced: int,
) -> Envelope | Outcome:
    """The envelope to dispatch again after ``exc``, or the failed outcome past the limit.

    The ``recovered`` event (and the log line) comes once per attempt, not once per wait for
    an actor that is restarting.
    """
    recovery = (await client.settings()).recovery
    state = current.state
    announce = attempt != announced
    attempt = max(attempt, 1)
    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if attempt > recovery.attempts:
        error = RaygentsError(
            f"run {state.run_id} failed: its agent actor was lost {attempt - 1} time(s); "
            f"last: {reason}",
            run_id=state.run_id,
        )
        return Outcome("failed", state, error=error)
    base = recovery.backoff_s
    await asyncio.sleep(min(base * 2 ** (attempt - 1), 30.0) * (0.5 + random.random() / 2))
    if isinstance(exc, StaleActor):
        await client.replace_actor(current.graph_fp, state.agent_name, exc.actor)
    directory.forget(current.graph_fp, state.agent_name)
    # Dispatch first, then read: whatever the lost copy writes after the claim is void.
    _, epoch = await directory.claim(state.run_id, state.agent_name)
    found = await client.load_state(state.run_id)
    if found is None:  # nothing durable yet: start over from the input
        envelope = first
        from_seq = 0
    else:
        envelope = dataclasses.replace(current, state=found[0], activate=False, resumed=True)
        from_seq = found[0].seq
    envelope = dataclasses.replace(envelope, state=envelope.state.evolve(epoch=epoch))
    if not announce:
        return envelope
    metrics.recovered(state.agent_name)
    log.warning(
        "run %s recovered (attempt %d) from checkpoint %d after %s",
        state.run_id,
        attempt,
        from_seq,
        reason,
        extra={"run_id": state.run_id, "agent": state.agent_name},  # (no run task here)
    )
    emit(
        RunEvent(
            type="recovered",
            run_id=state.run_id,
            agent_name=envelope.state.agent_name,
            path=state.path,
            error=reason,
            data={"attempt": attempt, "from_seq": from_seq},
        )
    )
    return envelope


async def _call(
    actor: Any,
    envelope: Envelope,
    emit: Callable[[RunEvent], None],
    directory: Directory,
    mailboxes: Mailboxes,
    progress: list[bool],
) -> Outcome:
    consume = asyncio.ensure_future(_consume(actor, envelope, emit, mailboxes, progress))
    stale = directory.watch(actor)
    try:
        waiting: set[asyncio.Future[Any]] = {consume, stale}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if consume.done():
            return consume.result()
        consume.cancel()
        mailboxes.close(actor, envelope.state.run_id)
        mailboxes.abandon(actor)
        error = StaleActor(
            f"the actor of agent {envelope.state.agent_name!r} stopped answering",
            run_id=envelope.state.run_id,
        )
        error.actor = actor
        raise error
    finally:
        directory.unwatch(actor)


async def _consume(
    actor: Any,
    envelope: Envelope,
    emit: Callable[[RunEvent], None],
    mailboxes: Mailboxes,
    progress: list[bool],
) -> Outcome:
    run_id = envelope.state.run_id
    caller, box = mailboxes.open(actor, run_id)
    try:
        await mailboxes.start(actor, caller, box, envelope)
        progress.append(True)  # the actor has the run: losing it now counts as a loss
        while True:
            item = await box.items.get()
            if isinstance(item, BaseException):  # the actor was lost
                raise item
            if isinstance(item, Outcome):
                return item
            outcome: Outcome | None = None
            if isinstance(item, tuple):  # the last events, and the outcome
                item, outcome = item
            for event in item:
                emit(event)
            if isinstance(outcome, Outcome):
                return outcome
    finally:
        mailboxes.close(actor, run_id)
