"""AgentActor: serves one agent to every run that reaches it, driving the pure loop."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
import traceback
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from typing_extensions import assert_never

from raygents import loop
from raygents.agent import Agent, HandoffInputData
from raygents.envelope import Envelope, Outcome, RunState
from raygents.errors import ModelError, RaygentsError, UserError
from raygents.events import RunEvent
from raygents.messages import Message, ModelRequest, ModelResponse, ToolSpec
from raygents.models.base import Model, resolve_model
from raygents.runtime.directory import Directory
from raygents.runtime.drive import SuspendToken, drive
from raygents.runtime.tasks import TaskReport, remote_tool, tool_error
from raygents.schema import type_name, type_schema
from raygents.tools import AgentTool, RunContext, Tool, ToolContext, ToolResult, to_tool_result

__all__ = ["AgentActor"]

log = logging.getLogger("raygents")
_exit_actor: Any = ray.actor.exit_actor

Emit = Callable[[RunEvent], None]
_DONE = object()


@dataclass
class _Active:
    """What the actor knows about a run it is executing."""

    token: SuspendToken
    children: dict[str, SuspendToken] = field(default_factory=dict)


class AgentActor:
    """Runs one agent of one graph snapshot. Wrapped with ``ray.remote`` where it is created.

    Args:
        graph: the agent graph by name (as sent by the coordinator).
        agent_name: the agent this actor serves.
        graph_fp: the fingerprint of the graph snapshot.
        namespace: the raygents namespace (to find the coordinator).
    """

    def __init__(
        self, graph: dict[str, Agent] | bytes, agent_name: str, graph_fp: str, namespace: str
    ) -> None:
        if isinstance(graph, bytes):
            from ray import cloudpickle

            graph = cloudpickle.loads(graph)
        assert isinstance(graph, dict)
        self.graph = graph
        self.agent = graph[agent_name]
        self.graph_fp = graph_fp
        self.directory = Directory(namespace)
        self._model: Model | None = None
        self._tools: dict[str, Tool] | None = None
        self._static_view: loop.AgentView | None = None
        self._tasks: dict[str, Any] = {}
        self._active: dict[str, _Active] = {}
        self._early: dict[str, str] = {}
        self._retired = False

    # --- public actor methods -----------------------------------------------------------
    async def run(self, envelope: Envelope) -> AsyncIterator[list[RunEvent] | Outcome]:
        """Drive the run until it completes, fails, suspends or hands off.

        Yields batches of events as they happen, then the :class:`Outcome`.
        """
        queue: asyncio.Queue[Any] = asyncio.Queue()
        run_id = envelope.state.run_id
        token = SuspendToken(run_id)
        cause = envelope.suspend_cause or self._early.pop(run_id, None)
        if cause:
            token.request(cause)
        self._active[run_id] = _Active(token)  # before any await: suspend() may come next
        task = asyncio.ensure_future(self._run(envelope, token, queue.put_nowait))
        task.add_done_callback(lambda t: queue.put_nowait(_DONE))
        while True:
            item = await queue.get()
            batch: list[RunEvent] = []
            while item is not _DONE:
                batch.append(item)
                if queue.empty():
                    break
                item = queue.get_nowait()
            if batch:
                yield batch
            if item is _DONE:
                yield task.result()
                break
        if self._retired and not self._active:
            _exit_actor()

    def suspend(self, run_id: str, cause: str) -> bool:
        """Ask a run to suspend at its next safe point; False if it is not running here."""
        active = self._active.get(run_id)
        if active is None:
            self._early[run_id] = cause  # the run may be on its way here
            return False
        active.token.request(cause)
        for child in list(active.children.values()):
            child.request(cause)
        return True

    def retire(self) -> None:
        """Exit once no run is active here (a newer definition of the agent took over)."""
        self._retired = True
        if not self._active:
            _exit_actor()

    def ping(self) -> int:
        """Liveness check; returns the actor's process id."""
        import os

        return os.getpid()

    # --- driving one activation ---------------------------------------------------------
    async def _run(self, envelope: Envelope, token: SuspendToken, emit: Emit) -> Outcome:
        state = envelope.state
        try:
            return await self._drive(envelope, token, emit)
        except RaygentsError as exc:
            return Outcome("failed", state, error=exc.with_run_id(state.run_id))
        except Exception as exc:
            log.exception("run %s failed inside agent %r", state.run_id, self.agent.name)
            error = RaygentsError(
                f"internal error in agent {self.agent.name!r}: {type(exc).__name__}: {exc}\n"
                + traceback.format_exc(limit=5),
                run_id=state.run_id,
            )
            return Outcome("failed", state, error=error)
        finally:
            self._active.pop(state.run_id, None)

    async def _drive(self, envelope: Envelope, token: SuspendToken, emit: Emit) -> Outcome:
        state = envelope.state
        view = await self._view(state, envelope.context)
        if envelope.activate:
            state = loop.activate(state, view)
        self._emit(emit, state, "agent_start")
        action: loop.Action
        state, action = loop.next_turn(state, view)
        while True:
            match action:
                case loop.CallModel(request=request):
                    if token.cause is not None:
                        return Outcome("suspended", state, cause=token.cause)
                    response = await self._call_model(request, state, envelope.stream, emit)
                    state, action = loop.on_response(state, view, response)
                case loop.RunTools() as batch:
                    results = await self._run_batch(state, envelope, batch, emit)
                    for step, result in zip(batch.steps, results, strict=True):
                        if isinstance(step, loop.Execute) and result.usage is not None:
                            state = state.evolve(usage=state.usage + result.usage)
                    state, action = loop.on_results(state, view, batch, [r.result for r in results])
                case loop.Finish(output=output):
                    self._emit(
                        emit,
                        state,
                        "agent_end",
                        output=output,
                        turns=state.turns,
                        usage=state.usage,
                    )
                    return Outcome("completed", state, output=output)
                case loop.Fail(error=error):
                    raise error
                case loop.HandoffTo(target=target, call=call):
                    state = await self._handoff(state, target, call, envelope.context)
                    self._emit(emit, state, "handoff", to_agent=target)
                    return Outcome("handoff", state)
                case _:
                    assert_never(action)

    # --- the agent, as the loop sees it -------------------------------------------------
    def tools(self) -> dict[str, Tool]:
        """The agent's tools by name (handoff tools are not included)."""
        if self._tools is None:
            found: dict[str, Tool] = {}
            names = [t.name for t in self.agent.tools] + [
                h.tool_name for h in self.agent.handoff_configs()
            ]
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise UserError(f"agent {self.agent.name!r} has duplicate tool names: {dupes!r}")
            for t in self.agent.tools:
                found[t.name] = t
            self._tools = found
        return self._tools

    def _base_view(self) -> loop.AgentView:
        if self._static_view is None:
            agent = self.agent
            specs = [t.spec() for t in self.tools().values()]
            handoffs = agent.handoff_configs()
            specs += [
                ToolSpec(
                    name=h.tool_name,
                    description=h.tool_description,
                    parameters={
                        "type": "object",
                        "properties": {},
                        "required": [],
                        "additionalProperties": False,
                    },
                )
                for h in handoffs
            ]
            output_schema = None
            if agent.output_type is not None:
                output_schema = {
                    "name": type_name(agent.output_type),
                    "schema": type_schema(agent.output_type),
                }
            behavior = agent.tool_use_behavior
            self._static_view = loop.AgentView(
                name=agent.name,
                tools=tuple(specs),
                handoffs={h.tool_name: h.agent.name for h in handoffs},
                output_schema=output_schema,
                settings=agent.model_settings.to_data(),
                tool_use_behavior=behavior if isinstance(behavior, str) else behavior.tool_names,
                reset_tool_choice=agent.reset_tool_choice,
                max_turns=agent.max_turns,
                max_empty_output_retries=agent.max_empty_output_retries,
            )
        return self._static_view

    async def _view(self, state: RunState, context: Any) -> loop.AgentView:
        import dataclasses

        base = self._base_view()
        ctx = RunContext(state.run_id, self.agent.name, context, state.turns, state.usage)
        system = await self.agent.system_prompt(ctx)
        changes: dict[str, Any] = {"system": system}
        if state.response_format is not None:
            changes["output_schema"] = state.response_format
        return dataclasses.replace(base, **changes)

    # --- model calls --------------------------------------------------------------------
    def model(self) -> Model:
        """The agent's model, resolved in this process on first use."""
        if self._model is None:
            self._model = resolve_model(self.agent.model)
        return self._model

    async def _call_model(
        self, request: ModelRequest, state: RunState, stream: bool, emit: Emit
    ) -> ModelResponse:
        model = self.model()
        streamer = getattr(model, "stream", None)
        try:
            if stream and streamer is not None:
                return await self._stream_model(streamer(request), state, emit)
            response = await model.respond(request)
        except RaygentsError:
            raise
        except Exception as exc:  # provider errors must not escape as foreign exceptions
            raise ModelError(
                f"cannot call model for agent {self.agent.name!r}: {type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(response, ModelResponse):
            raise ModelError(
                f"model of agent {self.agent.name!r} returned "
                f"{type(response).__name__!r}, not ModelResponse"
            )
        return response

    async def _stream_model(
        self, chunks: AsyncIterator[Any], state: RunState, emit: Emit
    ) -> ModelResponse:
        final = None
        async for chunk in chunks:
            if isinstance(chunk, str):
                if chunk:
                    self._emit(emit, state, "llm_delta", delta=chunk)
            elif isinstance(chunk, ModelResponse):
                final = chunk
        if final is None:
            raise ModelError(
                f"the streaming model of agent {self.agent.name!r} ended without a response"
            )
        return final

    # --- tool calls ---------------------------------------------------------------------
    async def _run_batch(
        self, state: RunState, envelope: Envelope, batch: loop.RunTools, emit: Emit
    ) -> list[_StepResult]:
        if batch.sequential:
            return [await self._run_step(state, envelope, step, emit) for step in batch.steps]
        return list(
            await asyncio.gather(*(self._run_step(state, envelope, s, emit) for s in batch.steps))
        )

    async def _run_step(
        self, state: RunState, envelope: Envelope, step: loop.ToolStep, emit: Emit
    ) -> _StepResult:
        fixed = loop.step_result(step)
        if isinstance(step, loop.Transfer):
            await self._on_handoff(state, step.target, envelope.context)
        if fixed is not None:
            return _StepResult(fixed)
        call = step.call
        t = self.tools()[call.name]
        self._emit(
            emit,
            state,
            "tool_start",
            tool_name=call.name,
            call_id=call.id,
            arguments=call.arguments,
        )
        started = time.perf_counter()
        if isinstance(t, AgentTool):
            out = await self._run_child(state, envelope, call, t, emit)
        else:
            ctx = ToolContext(
                state.run_id, call.id, call.name, self.agent.name, state.depth, envelope.context
            )
            out = await self._execute(t, ctx, call.arguments)
        self._emit(
            emit,
            state,
            "tool_end",
            tool_name=call.name,
            call_id=call.id,
            result=out.result.content,
            is_error=out.result.is_error,
            duration_s=time.perf_counter() - started,
            data=out.data,
        )
        return out

    async def _execute(self, t: Tool, ctx: ToolContext, arguments: str) -> _StepResult:
        if not t.remote:
            try:
                result = await t.execute(ctx, arguments)
            except Exception as exc:
                return _StepResult(tool_error(t.name, f"{type(exc).__name__}: {exc}"))
            return _StepResult(result if isinstance(result, ToolResult) else to_tool_result(result))
        task = self._tasks.get(t.name)
        if task is None:
            task = self._tasks[t.name] = remote_tool(t)
        ref = task.remote(ctx, arguments)
        try:
            report: TaskReport = await asyncio.wait_for(_await_ref(ref), t.timeout_s)
        except asyncio.TimeoutError:
            ray.cancel(ref)
            return _StepResult(tool_error(t.name, f"timed out after {t.timeout_s} s"))
        except ray.exceptions.WorkerCrashedError:
            return _StepResult(
                tool_error(t.name, "the worker process running it crashed (no retries left)")
            )
        except ray.exceptions.RayError as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            return _StepResult(tool_error(t.name, f"{type(exc).__name__}: {first_line}"))
        return _StepResult(report.result, data={"worker_pid": report.pid, "run_s": report.seconds})

    async def _run_child(
        self, state: RunState, envelope: Envelope, call: Any, t: AgentTool, emit: Emit
    ) -> _StepResult:
        callee = t.agent
        cap = (
            callee.max_tool_depth
            if state.max_tool_depth is None
            else min(callee.max_tool_depth, state.max_tool_depth)
        )
        if state.depth >= cap:
            return _StepResult(
                tool_error(t.name, f"agent-tool delegation exceeded maximum depth ({cap})")
            )
        request = json.loads(call.arguments)["input"]
        child = RunState(
            run_id=f"{state.run_id}.{_safe(call.id)}",
            agent_name=callee.name,
            messages=(Message("user", request),),
            input_len=1,
            max_turns=state.max_turns,
            depth=state.depth + 1,
            max_tool_depth=cap,
            parent_run_id=state.run_id,
            path=(*state.path, f"{callee.name}/{call.id}"),
        )
        token = SuspendToken(child.run_id)
        active = self._active.get(state.run_id)
        if active is not None:
            active.children[child.run_id] = token
            if active.token.cause:
                token.request(active.token.cause)
        try:
            outcome = await drive(
                Envelope(child, envelope.graph_fp, envelope.context, envelope.stream),
                self.directory,
                token,
                emit,
            )
        finally:
            if active is not None:
                active.children.pop(child.run_id, None)
        usage = outcome.state.usage
        if outcome.kind == "completed":
            return _StepResult(ToolResult(outcome.output or ""), usage)
        return _StepResult(
            tool_error(t.name, outcome.error or f"sub-agent run {outcome.kind}"), usage
        )

    # --- handoffs -----------------------------------------------------------------------
    async def _on_handoff(self, state: RunState, target: str, context: Any) -> None:
        config = next(h for h in self.agent.handoff_configs() if h.agent.name == target)
        if config.on_handoff is None:
            return
        ctx = RunContext(state.run_id, self.agent.name, context, state.turns, state.usage)
        try:
            result = config.on_handoff(ctx)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            raise RaygentsError(
                f"cannot execute handoff callback for {target!r}: {exc}", run_id=state.run_id
            ) from None

    async def _handoff(self, state: RunState, target: str, call: Any, context: Any) -> RunState:
        config = next(h for h in self.agent.handoff_configs() if h.agent.name == target)
        state = state.evolve(tool_used_in_run=False)
        if config.input_filter is None:
            return state.evolve(agent_name=target)
        data = HandoffInputData(
            state.messages[: state.input_len], state.messages[state.input_len :]
        )
        try:
            messages = list(config.input_filter(data))
        except Exception as exc:
            raise RaygentsError(
                f"handoff input_filter for {target!r} failed: {exc}", run_id=state.run_id
            ) from None
        if not all(isinstance(m, Message) for m in messages):
            raise UserError(f"handoff input_filter for {target!r} must return Message objects")
        return state.evolve(
            agent_name=target,
            messages=tuple(messages),
            input_len=min(state.input_len, len(messages)),
        )

    # --- events -------------------------------------------------------------------------
    def _emit(self, emit: Emit, state: RunState, kind: Any, **fields: Any) -> None:
        emit(
            RunEvent(
                type=kind,
                run_id=state.run_id,
                agent_name=self.agent.name,
                path=state.path,
                **fields,
            )
        )


@dataclass
class _StepResult:
    result: ToolResult
    usage: Any = None
    data: dict[str, Any] | None = None


async def _await_ref(ref: Any) -> Any:
    return await ref


def _safe(call_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in call_id)[:64] or "call"
