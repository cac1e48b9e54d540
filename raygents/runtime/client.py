"""The driver side: ``init``, ``start``, ``run`` and friends, on one background event loop."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Literal, TypeVar

import ray
from ray import cloudpickle

from raygents.agent import Agent, agent_graph
from raygents.envelope import Envelope, Outcome, RunState, new_run_id
from raygents.errors import (
    SUSPEND_FOR_CHECKPOINT,
    OutputValidationError,
    RaygentsError,
    RunNotFound,
    SuspendedError,
    UserError,
)
from raygents.events import RunEvent
from raygents.messages import Message, to_messages
from raygents.result import RunResult, TypedResult
from raygents.runtime.coordinator import Coordinator, RunInfo
from raygents.runtime.directory import COORDINATOR_NAME, Directory
from raygents.runtime.drive import SuspendToken, drive
from raygents.runtime.handle import RunHandle
from raygents.schema import type_is_wrapped, type_name, type_schema

__all__ = ["attach", "init", "run", "run_streamed", "run_typed", "runs", "shutdown", "start"]

T = TypeVar("T")
Durability = Literal["sync", "async", "exit"]
RunInput = str | Sequence[Message | Mapping[str, Any]]


class Runtime:
    """One per driver process: the Ray connection, the coordinator, and a background loop."""

    def __init__(self, namespace: str, started_ray: bool, durability: Durability) -> None:
        self.namespace = namespace
        self.started_ray = started_ray
        self.durability = durability
        self.coordinator: Any = (
            ray.remote(Coordinator)
            .options(
                name=COORDINATOR_NAME,
                namespace=namespace,
                get_if_exists=True,
                num_cpus=0,
                max_restarts=-1,
            )
            .remote(namespace)
        )
        self.directory = Directory(namespace, self.coordinator)
        self.handles: dict[str, RunHandle] = {}
        self._graphs: set[str] = set()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="raygents", daemon=True)
        self._thread.start()

    def call_soon(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the runtime's loop."""
        self.loop.call_soon_threadsafe(fn, *args)

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Schedule a coroutine on the runtime's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        """Stop the background loop."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    async def ensure_graph(self, fp: str, blob: bytes, replicas: dict[str, int]) -> None:
        """Tell the coordinator about a graph snapshot once per process."""
        if fp not in self._graphs:
            await self.coordinator.register_graph.remote(fp, blob, replicas)
            self._graphs.add(fp)


_runtime: Runtime | None = None
_lock = threading.Lock()


def init(
    address: str | None = None,
    *,
    namespace: str = "raygents",
    store: str | None = None,
    durability: Durability = "sync",
    **ray_init_kwargs: Any,
) -> None:
    """Connect to Ray (or start a local instance) and set raygents up.

    Args:
        address: a Ray address; default ``$RAY_ADDRESS``, else a new local instance. If Ray
            is already initialised in this process, that connection is used.
        namespace: raygents' Ray namespace (its coordinator and agent actors live there).
        store: where checkpoints go: ``file://<dir>`` (default ``./.raygents``),
            ``s3://bucket/prefix`` or ``memory://``.
        durability: ``"sync"``, ``"async"`` or ``"exit"``.
        **ray_init_kwargs: passed to ``ray.init``.
    """
    global _runtime
    if durability not in ("sync", "async", "exit"):
        raise UserError(f"durability must be 'sync', 'async' or 'exit', got {durability!r}")
    with _lock:
        if _runtime is not None:
            if _runtime.namespace != namespace:
                raise UserError(
                    f"raygents is already initialised with namespace {_runtime.namespace!r}; "
                    "call raygents.shutdown() first"
                )
            return
        started = False
        if not ray.is_initialized():
            target = address or os.environ.get("RAY_ADDRESS") or "local"
            ray.init(address=target, **ray_init_kwargs)
            started = True
        _runtime = Runtime(namespace, started, durability)


def shutdown() -> None:
    """Stop raygents in this process, and Ray too if raygents started it."""
    global _runtime
    from raygents import testing

    with _lock:
        rt, _runtime = _runtime, None
    testing._reset_store_handle()
    if rt is None:
        return
    rt.close()
    if rt.started_ray:
        ray.shutdown()


def _current() -> Runtime:
    if _runtime is None:
        init()
    assert _runtime is not None
    return _runtime


def _check_run_args(agent: Agent, timeout_s: float | None, max_turns: int | None) -> None:
    if not isinstance(agent, Agent):
        raise UserError(f"expected an Agent, got {type(agent).__name__!r}")
    if timeout_s is not None and not timeout_s > 0:
        raise UserError(f"timeout_s must be positive, got {timeout_s!r}")
    if max_turns is not None and (not isinstance(max_turns, int) or max_turns < 1):
        raise UserError(f"max_turns must be an int >= 1, got {max_turns!r}")


def _input_messages(input: RunInput) -> tuple[Message, ...]:
    try:
        messages = to_messages(input)
    except (TypeError, KeyError, ValueError) as exc:
        raise UserError(f"invalid run input: {exc}") from None
    if not messages:
        raise UserError("run input is empty: pass a string or at least one message")
    return messages


def start(
    agent: Agent,
    input: RunInput,
    *,
    context: Any = None,
    run_id: str | None = None,
    session_id: str | None = None,
    timeout_s: float | None = None,
    max_turns: int | None = None,
    _stream: bool = False,
    _response_format: dict[str, Any] | None = None,
) -> RunHandle:
    """Start a run and return its handle at once.

    Args:
        agent: the start agent.
        input: a string (one user message) or messages / OpenAI-style dicts.
        context: any picklable value, given to tools and dynamic instructions.
        run_id: the run's id; a fresh one by default.
        session_id: the conversation to load from and save to the agent's session.
        timeout_s: a wall-clock budget after which the run suspends.
        max_turns: caps ``max_turns`` of every agent in this run.
    """
    _check_run_args(agent, timeout_s, max_turns)
    messages = _input_messages(input)
    if session_id is not None and agent.session is None:
        raise UserError(f"session_id was given but agent {agent.name!r} has no session")
    graph = agent_graph(agent)
    rt = _current()
    blob: bytes = cloudpickle.dumps(graph)  # type: ignore[no-untyped-call]
    fp = hashlib.sha256(blob).hexdigest()[:16]
    state = RunState(
        run_id=run_id or new_run_id(),
        agent_name=agent.name,
        messages=messages,
        input_len=len(messages),
        max_turns=max_turns,
        response_format=_response_format,
    )
    if state.run_id in rt.handles and not rt.handles[state.run_id].done():
        raise UserError(f"run {state.run_id!r} is already running in this driver")
    token = SuspendToken(state.run_id)
    handle = RunHandle(state.run_id, rt, token)
    rt.handles[state.run_id] = handle
    envelope = Envelope(state, fp, context, stream=_stream)
    replicas = {name: a.replicas for name, a in graph.items()}
    rt.submit(_drive_root(rt, handle, envelope, blob, replicas, graph, timeout_s))
    return handle


async def _drive_root(
    rt: Runtime,
    handle: RunHandle,
    envelope: Envelope,
    blob: bytes,
    replicas: dict[str, int],
    graph: dict[str, Agent],
    timeout_s: float | None,
) -> None:
    state = envelope.state
    timer = None
    try:
        await rt.ensure_graph(envelope.graph_fp, blob, replicas)
        if timeout_s is not None:
            timer = rt.loop.call_later(timeout_s, handle._token.request, SUSPEND_FOR_CHECKPOINT)
        handle._set_status("running")
        _record(rt, state.run_id, "running", state.agent_name)
        outcome = await drive(envelope, rt.directory, handle._token, handle._emit)
    except Exception as exc:
        error = (
            exc if isinstance(exc, RaygentsError) else RaygentsError(f"{type(exc).__name__}: {exc}")
        )
        outcome = Outcome("failed", state, error=error.with_run_id(state.run_id))
    finally:
        if timer is not None:
            timer.cancel()
    _finish(rt, handle, outcome, graph)


def _finish(rt: Runtime, handle: RunHandle, outcome: Outcome, graph: dict[str, Agent]) -> None:
    state = outcome.state
    base = {
        "run_id": state.run_id,
        "agent_name": state.agent_name,
        "turns": state.turns,
        "usage": state.usage,
    }
    if outcome.kind == "completed":
        result = RunResult(
            run_id=state.run_id,
            final_output=outcome.output or "",
            messages=state.messages,
            usage=state.usage,
            turns=state.turns,
            last_agent=graph[state.agent_name],
        )
        handle._emit(RunEvent(type="complete", output=result.final_output, **base))
        _record(rt, state.run_id, "completed", state.agent_name, state.turns)
        handle._resolve(result, None, "completed")
        return
    if outcome.kind == "suspended":
        error: RaygentsError = SuspendedError(
            "agent run suspended", run_id=state.run_id, cause=outcome.cause, checkpoint=state
        )
        handle._emit(RunEvent(type="suspended", error=outcome.cause, **base))
        _record(rt, state.run_id, "suspended", state.agent_name, state.turns)
        handle._resolve(None, error, "suspended")
        return
    error = outcome.error or RaygentsError("run failed", run_id=state.run_id)
    handle._emit(RunEvent(type="error", error=str(error), **base))
    _record(rt, state.run_id, "failed", state.agent_name, state.turns, str(error))
    handle._resolve(None, error, "failed")


def _record(
    rt: Runtime, run_id: str, status: str, agent: str, turns: int = 0, error: str | None = None
) -> None:
    rt.coordinator.record.remote([RunInfo(run_id, status, agent, turns, last_error=error)])


def run(agent: Agent, input: RunInput, **options: Any) -> RunResult:
    """Run an agent to completion and return the result (blocks; for driver scripts).

    Takes the same options as :func:`start`.
    """
    return start(agent, input, **options).result()


def run_streamed(agent: Agent, input: RunInput, **options: Any) -> RunHandle:
    """Like :func:`start`, with every model call streamed; read ``handle.events()``."""
    return start(agent, input, _stream=True, **options)


def run_typed(
    agent: Agent, input: RunInput, output_type: type[T], **options: Any
) -> TypedResult[T]:
    """Run with a strict JSON schema for ``output_type`` and return the parsed output.

    Raises:
        OutputValidationError: the final output does not match, with the failing paths.
    """
    from pydantic import TypeAdapter, ValidationError

    try:
        schema = type_schema(output_type)
    except Exception as exc:
        raise UserError(f"cannot build a JSON schema for {output_type!r}: {exc}") from None
    response_format = {"name": type_name(output_type), "schema": schema}
    result = start(agent, input, _response_format=response_format, **options).result()
    import json

    value = json.loads(result.final_output)
    raw = TypeAdapter(output_type).json_schema()
    if type_is_wrapped(raw):
        value = value["value"]
    try:
        output = TypeAdapter(output_type).validate_python(value)
    except ValidationError as exc:
        errors = [("/" + "/".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
        raise OutputValidationError(
            f"output does not match {output_type!r}: {errors}", run_id=result.run_id, errors=errors
        ) from None
    fields = {
        k: getattr(result, k)
        for k in ("run_id", "final_output", "messages", "usage", "turns", "last_agent")
    }
    return TypedResult(output=output, **fields)


def attach(run_id: str) -> RunHandle:
    """A handle to a run started by this driver.

    Raises:
        RunNotFound: no such run is known here.
    """
    rt = _current()
    handle = rt.handles.get(run_id)
    if handle is None:
        raise RunNotFound(f"run {run_id!r} is not known to this driver", run_id=run_id)
    return handle


def runs(status: str | None = None) -> list[RunInfo]:
    """What the coordinator knows about runs, optionally only those with ``status``."""
    rt = _current()
    return list(ray.get(rt.coordinator.list_runs.remote(status)))
