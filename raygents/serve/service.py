"""Service: what each request of the API does, on raygents' runtime in the replica (a driver
like any other) and the app's keeper. It holds no run: any replica answers for any run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import raygents as rg
from raygents.agents.result import RunResult
from raygents.core.approvals import ApprovalDecision
from raygents.core.messages import to_messages
from raygents.errors import (
    CANCEL,
    SUSPEND_FOR_CHECKPOINT,
    RaygentsError,
    RunNotFound,
    UserError,
)
from raygents.ids import validate_id
from raygents.runtime.link.coordinator_client import Listed
from raygents.runtime.link.untied import untied
from raygents.serve.body import ApprovalsRequest, ResolutionsRequest, RunRequest
from raygents.serve.document import (
    ENDED,
    RUNNING,
    ask,
    info_document,
    messages_document,
    run_document,
    run_info,
    run_state,
)
from raygents.serve.keeper import keeper_actor, start_options
from raygents.serve.problems import Problem, problem_of
from raygents.serve.settings import unpacked
from raygents.serve.webhook import check_url

__all__ = ["Service"]

log = logging.getLogger("raygents")
T = TypeVar("T")
_MAX_LIST = 1000


def checked_id(value: str, what: str = "run id") -> str:
    """A run or thread id from a path or body, 422 where it is not one."""
    try:
        return validate_id(value, "run id" if what == "run id" else "session id")
    except UserError as exc:
        raise Problem(422, "ValidationError", str(exc).replace("session id", what)) from None


class Service:
    """The API's operations for one replica."""

    def __init__(self, app_settings: bytes) -> None:
        """``app_settings``: the app's :func:`~raygents.serve.settings.packed` settings."""
        self.settings = settings = unpacked(app_settings)
        self.agents = settings.agents
        rg.init(
            namespace=settings.namespace,
            store=settings.store,
            durability=settings.durability,
            detached=True,  # the coordinator drives runs: they outlive this replica
            handle_sigterm=False,
        )
        self.keeper = keeper_actor(settings, app_settings)

    # --- runs -----------------------------------------------------------------------------
    def _check(self, request: RunRequest) -> None:
        """What can be refused before a run is started: the agent, the ids, the input, the
        webhook URL."""
        if request.agent not in self.agents:
            raise Problem(
                404, "AgentNotFound", f"no agent {request.agent!r} is served here", field="agent"
            )
        if request.run_id is not None:
            checked_id(request.run_id)
        if request.thread_id is not None:
            checked_id(request.thread_id, "thread id")
            if self.agents[request.agent].session is None:
                raise Problem(
                    422,
                    "UserError",
                    f"agent {request.agent!r} has no session, so it cannot keep threads "
                    "(give it one: session=raygents.StoreSession())",
                    field="thread_id",
                )
        try:
            to_messages(request.input)
        except (TypeError, KeyError, ValueError) as exc:
            raise Problem(422, "ValidationError", f"input: {exc}", field="input") from None
        if request.webhook is not None:
            check_url(request.webhook, self.settings.webhook_networks)

    async def start(self, request: RunRequest) -> tuple[int, dict[str, Any]]:
        """``POST /v1/runs``: 201 and the run's info (its outcome with ``wait``)."""
        self._check(request)
        if request.thread_id is not None:
            return await self._start_in_thread(request.thread_id, request)
        if request.run_id is not None and await self.known(request.run_id):
            raise Problem(409, "RunExists", f"run id {request.run_id!r} is already in use")
        agent = self.agents[request.agent]
        options = start_options(request.model_dump())
        try:
            handle = await self.begin(
                lambda: rg.start(agent, request.input, **options),
                request.webhook,
                wait=request.wait,
            )
        except RaygentsError as exc:
            raise problem_of(exc) from None
        return await self.answer(handle, wait=request.wait, webhook=request.webhook)

    async def begin(
        self, start: Callable[[], rg.RunHandle], webhook: str | None, *, wait: bool
    ) -> rg.RunHandle:
        """Start a run (``start``, in a thread) and watch its webhook: done whole even if the
        client hangs up meanwhile (it finds the run by its id). Unless the answer waits for
        the run's end, the run's claim is sent at once: the answer (and the keeper) read
        the run table's entry."""

        def started() -> rg.RunHandle:
            handle = start()
            if not wait or webhook is not None:
                rg_runtime().send_notes()
            return handle

        async def work() -> rg.RunHandle:
            handle = await asyncio.to_thread(started)
            if webhook is not None:
                await _wait_claimed(handle.run_id)  # (the keeper reads its entry)
                await self.keeper.watch.remote(handle.run_id, webhook)
            return handle

        return await _even_if_hung_up(work())

    async def answer(
        self, handle: rg.RunHandle, *, wait: bool, webhook: str | None
    ) -> tuple[int, dict[str, Any]]:
        """201 and the info of a run :meth:`begin` started (its outcome with ``wait``)."""
        if not wait and webhook is None:
            await _wait_claimed(handle.run_id)  # (the answer reads its entry)
        error: BaseException | None = None
        result: RunResult | None = None
        if wait:
            try:
                result = await handle
            except RaygentsError as exc:
                error = exc
        # A run the coordinator drove came back with its table entry: no read of it here.
        info = handle._entry if wait else None
        doc = await run_document(handle.run_id, self.agents, info=info, error=error, result=result)
        doc["thread_id"] = None
        doc["webhook"] = None
        if webhook is not None:
            doc["webhook"] = await self.keeper.delivery.remote(handle.run_id)
        return 201, doc

    async def _start_in_thread(
        self, thread_id: str, request: RunRequest
    ) -> tuple[int, dict[str, Any]]:
        if request.run_id is not None and await self.known(request.run_id):
            raise Problem(409, "RunExists", f"run id {request.run_id!r} is already in use")
        body = request.model_dump(exclude={"wait", "if_busy", "webhook", "thread_id"})
        answer = await _even_if_hung_up(
            self._post(thread_id, body, request.if_busy, request.webhook)
        )
        if "busy" in answer:
            raise Problem(
                409,
                "ThreadBusy",
                f"thread {thread_id!r} has run {answer['busy']!r} in flight (send "
                "if_busy='enqueue' to run after it, or 'interrupt' to cancel it)",
                run_id=answer["busy"],
            )
        if "problem" in answer:
            status, kind, message = answer["problem"]
            raise Problem(status, kind, message)
        run_id = answer["run_id"]
        if request.wait:
            await self.keeper.wait.remote(run_id)
        elif not answer["queued"]:
            await _wait_claimed(run_id)
        return 201, await self._document(run_id)

    async def _post(
        self, thread_id: str, body: dict[str, Any], if_busy: str, webhook: str | None
    ) -> dict[str, Any]:
        answer: dict[str, Any] = await self.keeper.post.remote(thread_id, body, if_busy)
        if webhook is not None and "run_id" in answer:
            await self.keeper.watch.remote(answer["run_id"], webhook)
        return answer

    async def known(self, run_id: str) -> bool:
        """Whether a run of this id is in the run table."""
        return await ask(rg_client().get_run(run_id)) is not None

    async def _document(
        self, run_id: str, *, error: BaseException | None = None, messages: bool = False
    ) -> dict[str, Any]:
        """A run's document, with its thread and webhook (a queued run of a thread is
        ``queued``)."""
        try:
            doc = await run_document(run_id, self.agents, error=error, messages=messages)
        except RunNotFound:
            if not await self.keeper.queued.remote(run_id):
                raise
            doc = {"run_id": run_id, "status": "queued", "pending": [], "output": None}
        doc["thread_id"], doc["webhook"] = await self.keeper.about.remote(run_id)
        return doc

    async def get(self, run_id: str) -> dict[str, Any]:
        """``GET /v1/runs/{run_id}``."""
        return await self._document(checked_id(run_id))

    async def messages(self, run_id: str) -> dict[str, Any]:
        """``GET /v1/runs/{run_id}/messages``."""
        doc = await self._document(checked_id(run_id), messages=True)
        return {"run_id": run_id, "messages": doc.get("messages", [])}

    async def list(
        self, status: str | None, agent: str | None, thread_id: str | None, limit: int
    ) -> dict[str, Any]:
        """``GET /v1/runs``: newest first."""
        if not 1 <= limit <= _MAX_LIST:
            raise Problem(422, "ValidationError", f"limit: 1 to {_MAX_LIST}", field="limit")
        runs = None
        if thread_id is not None:
            runs = frozenset(await self.keeper.runs_of.remote(checked_id(thread_id, "thread id")))
        statuses = (
            None if status is None else RUNNING if status == "running" else frozenset({status})
        )
        infos = await ask(rg_client().list_runs(None, Listed(limit, statuses, agent, runs)))
        return {"runs": [info_document(i) for i in reversed(infos)]}

    # --- stopping and going on ------------------------------------------------------------
    async def cancel(self, run_id: str) -> dict[str, Any]:
        """``POST /v1/runs/{run_id}/cancel``: a running run stops at once (others stay)."""
        return await self._stop(checked_id(run_id), CANCEL)

    async def suspend(self, run_id: str) -> dict[str, Any]:
        """``POST /v1/runs/{run_id}/suspend``: a running run stops at its next safe point."""
        return await self._stop(checked_id(run_id), SUSPEND_FOR_CHECKPOINT)

    async def _stop(self, run_id: str, cause: str) -> dict[str, Any]:
        info = await run_info(run_id)
        if info.status in ENDED:
            what = "cancel" if cause == CANCEL else "suspend"
            raise Problem(
                409, "RunNotRunning", f"run {run_id!r} is {info.status}: nothing to {what}"
            )
        await ask(rg_client().suspend([(run_id, cause)]))
        return await self._document(run_id)

    async def resume(self, run_id: str, decisions: dict[str, Any] | None = None) -> dict[str, Any]:
        """``POST /v1/runs/{run_id}/resume`` (a suspended run) and ``/approvals`` (a run
        awaiting approval, with a decision for each pending call)."""
        run_id = checked_id(run_id)
        info = await run_info(run_id)
        wanted = "awaiting_approval" if decisions is not None else "suspended"
        if info.status != wanted:
            raise Problem(409, "RunNotResumable", f"run {run_id!r} is {info.status}, not {wanted}")
        state = await run_state(run_id)
        if state is None:
            raise Problem(409, "RunNotResumable", f"run {run_id!r} has no readable checkpoint")
        pending = tuple(state.pending)
        if decisions is not None and set(decisions) != {p.call_id for p in pending}:
            raise Problem(
                409,
                "ApprovalDecisionsMismatch",
                "decisions must name exactly the pending calls",
                pending=[p.model_dump(mode="json") for p in pending],
            )
        agent = self._agent_for(state.start_agent or info.agent_name, info.agent_name)
        options: dict[str, Any] = {"agent": agent}
        if decisions is not None:
            options["approvals"] = decisions
            options["_pending"] = pending
        try:
            await asyncio.to_thread(rg.resume, run_id, **options)
        except RaygentsError as exc:
            problem = problem_of(exc)
            if problem.type == "ApprovalDecisionsMismatch":
                problem.fields["pending"] = [p.model_dump(mode="json") for p in pending]
            raise problem from None
        await self.keeper.watch.remote(run_id, None)
        return await self._document(run_id)

    async def resolve(self, run_id: str, request: ResolutionsRequest) -> dict[str, Any]:
        """``POST /v1/runs/{run_id}/resolutions``: a run in doubt goes on with each call in
        doubt run again or given its result."""
        run_id = checked_id(run_id)
        info = await run_info(run_id)
        if info.status != "in_doubt":
            raise Problem(409, "RunNotResumable", f"run {run_id!r} is {info.status}, not in_doubt")
        state = await run_state(run_id)
        if state is None:
            raise Problem(409, "RunNotResumable", f"run {run_id!r} has no readable checkpoint")
        doubts = [d.model_dump(mode="json") for d in state.in_doubt]
        resolutions: dict[str, Any] = {
            call_id: r if r == "rerun" else rg.ToolResult(r.content, is_error=r.is_error)
            for call_id, r in request.resolutions.items()
        }
        agent = self._agent_for(state.start_agent or info.agent_name, info.agent_name)
        try:
            await asyncio.to_thread(rg.resume, run_id, agent=agent, resolutions=resolutions)
        except RaygentsError as exc:
            problem = problem_of(exc)
            if problem.type == "ResolutionsMismatch":
                problem.fields["in_doubt"] = doubts
            raise problem from None
        await self.keeper.watch.remote(run_id, None)
        return await self._document(run_id)

    async def approve(self, run_id: str, request: ApprovalsRequest) -> dict[str, Any]:
        """``POST /v1/runs/{run_id}/approvals``."""
        decisions: dict[str, Any] = {
            call_id: d if isinstance(d, bool) else ApprovalDecision(d.approved, d.message)
            for call_id, d in request.decisions.items()
        }
        return await self.resume(run_id, decisions)

    def _agent_for(self, *names: str) -> rg.Agent:
        """A served agent whose graph holds the agents a run names."""
        from raygents.agents.agent import agent_graph

        for name in names:
            if name in self.agents:
                return self.agents[name]
        for agent in self.agents.values():
            if all(n in agent_graph(agent) for n in names if n):
                return agent
        raise Problem(409, "AgentNotFound", f"no served agent has the agents {list(names)!r}")

    # --- threads --------------------------------------------------------------------------
    async def thread(self, thread_id: str) -> dict[str, Any]:
        """``GET /v1/threads/{thread_id}``: its messages (as its session keeps them) and its
        runs."""
        thread_id = checked_id(thread_id, "thread id")
        found = await self.keeper.thread.remote(thread_id)
        if found is None:
            raise Problem(404, "ThreadNotFound", f"thread {thread_id!r} is not known")
        agent = self.agents[found["agent"]]
        from raygents.sessions import load_session

        assert agent.session is not None
        history = await load_session(agent.session, thread_id)
        runs = []
        for run_id in found["runs"]:
            try:
                runs.append(info_document(await run_info(run_id)))
            except RunNotFound:
                runs.append({"run_id": run_id, "status": "queued"})
        return {
            "thread_id": thread_id,
            "agent": found["agent"],
            "messages": messages_document(history),
            "runs": runs,
        }


async def _even_if_hung_up(work: Coroutine[Any, Any, T]) -> T:
    """Do ``work`` to its end even if the request is cancelled meanwhile (Serve cancels a
    request whose client hangs up): a message taken, a run started or a webhook watched is
    done whole, and the client that hung up finds it by its run id."""
    task = untied().run(asyncio.ensure_future, work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_unheard)
        raise


def _unheard(task: asyncio.Task[Any]) -> None:
    """Log what went wrong in work whose request was cancelled (nobody hears it otherwise)."""
    if not task.cancelled() and (error := task.exception()) is not None:
        log.info("a request whose client hung up failed after: %s", error)


async def _wait_claimed(run_id: str, timeout_s: float = 10.0) -> None:
    """Return once the coordinator knows a just-started run (a generated id's claim travels
    with the run, a moment later), so that the answer's info is the table's."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    delay = 0.005
    while await ask(rg_client().get_run(run_id)) is None:
        if asyncio.get_running_loop().time() > deadline:
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)


def rg_client() -> Any:
    """This process's coordinator client."""
    return rg_runtime().directory.client


def rg_runtime() -> Any:
    """This process's raygents runtime."""
    from raygents.runtime.driver.client import current

    return current()
