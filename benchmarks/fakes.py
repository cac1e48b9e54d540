"""The fakes every workload shares: the model logic (one function of the conversation, with an
adapter for raygents and one for the OpenAI Agents SDK) and the tools.

These modules travel to Ray workers by value (see :func:`machine.register_by_value`), so the
model logic and the tools that raygents sends to its actors and tasks are these very functions,
the same ones the SDK side calls in-process.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Calls = list[tuple[str, dict[str, Any]]]


Decision = Calls | str
"""Tool calls to make (name, arguments), or the final answer."""


@dataclass(frozen=True)
class Conv:
    """What the fake model looks at: the system prompt, the first user message, and how many
    tool results the conversation holds so far."""

    system: str
    user: str
    tool_results: int


def _param(text: str, name: str, default: int) -> int:
    import re

    found = re.search(rf"\b{name}=(\d+)", text)
    return int(found.group(1)) if found else default


class ToolTurns:
    """``turns`` turns of ``k`` parallel calls of ``tool``, then the answer.

    ``k`` and ``turns`` may come from the user message (``"k=4 turns=2"``), which wins.
    ``extra`` is merged into every call's arguments (e.g. the size of a payload to return).
    """

    def __init__(
        self, k: int = 1, turns: int = 1, tool: str = "noop", answer: str = "done", **extra: Any
    ) -> None:
        self.k, self.turns, self.tool, self.answer, self.extra = k, turns, tool, answer, extra

    def __call__(self, conv: Conv) -> Decision:
        k = _param(conv.user, "k", self.k)
        turns = _param(conv.user, "turns", self.turns)
        if k <= 0:
            return self.answer
        turn = conv.tool_results // k
        if turn >= turns:
            return self.answer
        return [(self.tool, {"i": turn * k + j, **self.extra}) for j in range(k)]


class FanOut:
    """The orchestrator of workload 3: one turn of ``m`` calls of the sub-agent tool (``m`` from
    the user message, ``"m=64"``), then the answer."""

    def __init__(self, m: int = 1, tool: str = "worker", answer: str = "merged") -> None:
        self.m, self.tool, self.answer = m, tool, answer

    def __call__(self, conv: Conv) -> Decision:
        if conv.tool_results:
            return self.answer
        m = _param(conv.user, "m", self.m)
        return [(self.tool, {"input": f"task {i}"}) for i in range(m)]


class UntilFinish:
    """One tool call per turn until the system prompt says ``phase: finish`` (workload 5): the
    runs keep going until they are suspended, and answer at once when resumed with the
    ``finish`` context."""

    def __init__(self, tool: str = "noop", answer: str = "done", max_calls: int = 10_000) -> None:
        self.tool, self.answer, self.max_calls = tool, answer, max_calls

    def __call__(self, conv: Conv) -> Decision:
        if "phase: finish" in conv.system or conv.tool_results >= self.max_calls:
            return self.answer
        return [(self.tool, {"i": conv.tool_results})]


class Stamped:
    """``k`` calls of the ``stamp`` tool carrying the time of the model call that asked for
    them, then an answer that is the time of the last model call: a run's phases can be read
    back from its messages (all processes share the machine's clock)."""

    def __init__(self, k: int = 4) -> None:
        self.k = k

    def __call__(self, conv: Conv) -> Decision:
        now = time.time()
        if conv.tool_results:
            return repr(now)
        return [("stamp", {"i": j, "t": now}) for j in range(self.k)]


CPU_BURN_S = 0.2


def noop(i: int) -> str:
    """A trivial tool.

    Args:
        i: the call's index.
    """
    return f"ok {i}"


def nap(i: int) -> str:
    """Sleep 200 ms: a one-CPU tool that leaves the CPU to everything else.

    Args:
        i: the call's index.
    """
    time.sleep(CPU_BURN_S)
    return f"slept {i}"


def burn(i: int) -> str:
    """Burn 200 ms of pure-Python CPU (thread CPU time, so contention does not shorten it).

    Args:
        i: the call's index.
    """
    end = time.thread_time() + CPU_BURN_S
    x = 0
    while time.thread_time() < end:
        for _ in range(2_000):
            x += 1
    return f"burnt {i}"


def stamp(i: int, t: float) -> str:
    """Return the model's time ``t`` and the time this call ran.

    Args:
        i: the call's index.
        t: the time of the model call that asked for this call.
    """
    return f"{t!r},{time.time()!r}"


def payload(i: int, n: int) -> str:
    """Return ``n`` bytes of text (workload 4's tool results).

    Args:
        i: the call's index.
        n: how many bytes to return.
    """
    unit = f"result {i}: "
    return (unit * (n // len(unit) + 1))[:n]


class RgFn:
    """The raygents adapter: ``ModelRequest`` -> :class:`Conv` -> logic -> ``ModelResponse``."""

    def __init__(self, logic: Callable[[Conv], Decision]) -> None:
        self.logic = logic

    def __call__(self, request: Any) -> Any:
        from raygents.testing import calls, text

        user = next((m.text for m in request.messages if m.role == "user"), "")
        n = sum(1 for m in request.messages if m.role == "tool")
        decision = self.logic(Conv(request.system or "", user, n))
        if isinstance(decision, str):
            return text(decision)
        return calls(*decision)


def rg_model(logic: Callable[[Conv], Decision], latency_s: float) -> Any:
    """A raygents ``FunctionModel`` running ``logic`` after ``latency_s``."""
    from raygents.testing import FunctionModel

    return FunctionModel(RgFn(logic), latency_s=latency_s)


def rg_tools(kind: str) -> list[Any]:
    """raygents tools: ``task`` (trivial, a Ray task with num_cpus=0), ``local`` (trivial, in the
    agent actor), ``cpu`` (200 ms of CPU, a Ray task with the default num_cpus=1), ``sleep``
    (200 ms of sleep, likewise), ``payload`` (a Ray task with num_cpus=0)."""
    import raygents as rg

    if kind == "task":
        return [rg.tool(num_cpus=0, name="noop")(noop)]
    if kind == "local":
        return [rg.tool(remote=False, name="noop")(noop)]
    if kind == "cpu":
        return [rg.tool(name="burn")(burn)]
    if kind == "sleep":
        return [rg.tool(name="nap")(nap)]
    if kind == "stamp":
        return [rg.tool(num_cpus=0, name="stamp")(stamp)]
    if kind == "stamp_local":
        return [rg.tool(remote=False, name="stamp")(stamp)]
    if kind == "payload":
        return [rg.tool(num_cpus=0, name="payload")(payload)]
    if kind == "payload_local":
        return [rg.tool(remote=False, name="payload")(payload)]
    raise ValueError(kind)


_FANOUT_TOOL = {"cpu": "burn", "sleep": "nap"}


def rg_fanout_agent(kind: str, name: str, latency_s: float = 0.1) -> Any:
    """The orchestrator of workload 3: its one tool is the agent ``<name>_worker``, which makes
    one call of a ``kind`` tool (:func:`rg_tools`) and answers."""
    import raygents as rg

    worker = rg.Agent(
        f"{name}_worker",
        tools=rg_tools(kind),
        model=rg_model(ToolTurns(k=1, tool=_FANOUT_TOOL.get(kind, "noop")), latency_s),
    )
    return rg.Agent(
        name,
        tools=[worker.as_tool("worker", "a worker")],
        model=rg_model(FanOut(), latency_s),
    )


def sdk_setup() -> None:
    """No tracing (it would try to export over the network), no API key needed."""
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    from agents import set_tracing_disabled

    set_tracing_disabled(True)


def _sdk_model_class() -> Any:
    from agents import Model, ModelResponse, Usage
    from agents.testing import assistant_message, function_call

    class SdkFakeModel(Model):
        """The SDK adapter: Responses input items -> :class:`Conv` -> logic -> output items."""

        def __init__(self, logic: Callable[[Conv], Decision], latency_s: float) -> None:
            self.logic, self.latency_s = logic, latency_s

        def _decide(self, system: str | None, items: Any) -> ModelResponse:
            if isinstance(items, str):
                user, n = items, 0
            else:
                user, n = "", 0
                for item in items:
                    get = (
                        item.get
                        if isinstance(item, dict)
                        else lambda k, i=item: getattr(i, k, None)
                    )
                    kind = get("type")
                    if kind == "function_call_output":
                        n += 1
                    elif not user and get("role") == "user":
                        content = get("content")
                        user = content if isinstance(content, str) else str(content)
            decision = self.logic(Conv(system or "", user, n))
            if isinstance(decision, str):
                output = [assistant_message(decision, item_id=f"msg_{uuid.uuid4().hex[:12]}")]
            else:
                output = [
                    function_call(name, args, call_id=f"call_{uuid.uuid4().hex[:12]}")
                    for name, args in decision
                ]
            usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
            return ModelResponse(output=output, usage=usage, response_id=None)

        async def get_response(
            self,
            system_instructions: Any,
            input: Any,
            model_settings: Any,
            tools: Any,
            output_schema: Any,
            handoffs: Any,
            tracing: Any,
            *,
            previous_response_id: Any = None,
            conversation_id: Any = None,
            prompt: Any = None,
            **_: Any,
        ) -> ModelResponse:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            return self._decide(system_instructions, input)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmarks do not stream")

    return SdkFakeModel


_SDK_MODEL: Any = None


def sdk_model(logic: Callable[[Conv], Decision], latency_s: float) -> Any:
    """An SDK ``Model`` running ``logic`` after ``latency_s``."""
    global _SDK_MODEL
    if _SDK_MODEL is None:
        _SDK_MODEL = _sdk_model_class()
    return _SDK_MODEL(logic, latency_s)


def sdk_tools(kind: str) -> list[Any]:
    """SDK function tools (``task`` and ``local`` are the same trivial tool there)."""
    from agents import function_tool

    if kind in ("task", "local"):
        return [function_tool(noop, name_override="noop")]
    if kind == "cpu":
        return [function_tool(burn, name_override="burn")]
    if kind in ("payload", "payload_local"):
        return [function_tool(payload, name_override="payload")]
    if kind in ("stamp", "stamp_local"):
        return [function_tool(stamp, name_override="stamp")]
    raise ValueError(kind)


class SdkLoop:
    """A private asyncio loop for the SDK side, driven from the (synchronous) benchmark code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()
