"""A CPU stand-in for Ray Serve LLM's ``LLMServer``, for ServeModel's tests and benchmark.

``FakeLLMServer.chat(request, raw_request_info=None)`` answers as ``LLMServer.chat`` does: an
async generator of one ``ChatCompletionResponse`` (as a dict), or, when the request streams,
of lists of ``data: {...}\\n\\n`` strings ending with ``data: [DONE]``. Answers are
deterministic: a user message ``weather <city> [<n>]`` (or ``nap ...``) is answered with a
call to that tool (``n`` turns in a row, one by default) and, once the tool's results are in,
with ``In <city>: <result>``; any other text with ``echo: <text> (turn <n>)``; a message
holding ``slow`` streams its first chunks, then waits for the :class:`Gate` to open (for a
replica to be killed mid-answer); ``fail <code>`` answers with an ``ErrorResponse``; ``crash``
raises. Each replica tells the :class:`Ledger` actor which run (the request's Serve
``session_id``) it served.

``FakeIngress`` is the OpenAI HTTP route in front of it (``POST /v1/chat/completions``), as
Serve LLM's ``OpenAiIngress`` is: it calls the same deployment through its handle.
"""

# (no ``from __future__ import annotations``: FastAPI reads the ingress's annotations in the
# replica, where a function pickled by value has only the globals its code names)
import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import ray
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve

from raygents.models.affinity import affinity_router_config

DEPLOYMENT = "FakeLLMServer"
MODEL = "fake-llm"
TOOLS = ("weather", "nap")
"""A user message ``<tool> <city>`` is answered with a call to that tool."""


@ray.remote(num_cpus=0)
class Ledger:
    """Which replica served which run's calls: ``(replica actor name, run id, stream, first
    user message)`` (the run id is the Serve ``session_id``: empty over HTTP)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, bool, str]] = []
        self.cancelled: list[str] = []

    def record(self, replica: str, run_id: str, stream: bool, first: str) -> None:
        self.calls.append((replica, run_id, stream, first))

    def all(self) -> list[tuple[str, str, bool, str]]:
        return list(self.calls)

    def clear(self) -> None:
        self.calls.clear()
        self.cancelled.clear()

    def cancel(self, first: str) -> None:
        self.cancelled.append(first)

    def cancels(self) -> list[str]:
        """The first user messages of the calls cancelled at the replica."""
        return list(self.cancelled)


GATE = "fake-llm-gate"
GATE_NAMESPACE = "fake-llm"


@ray.remote(num_cpus=0)
class Gate:
    """Holds slow answers (and tools that wait on it) until it is opened. Create it with
    ``Gate.options(name=GATE, namespace=GATE_NAMESPACE).remote()``."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()

    async def wait(self) -> None:
        await self.opened.wait()

    def open(self) -> None:
        self.opened.set()

    def close(self) -> None:
        self.opened.clear()


async def wait_at_gate() -> None:
    """Wait until the :class:`Gate` opens (at once where there is none)."""
    try:
        gate = ray.get_actor(GATE, namespace=GATE_NAMESPACE)
    except ValueError:
        return
    await gate.wait.remote()


class FakeLLMServer:
    """The deployment class (wrap it with :func:`deployment`)."""

    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger
        self.name = ray.get_runtime_context().get_actor_name() or "?"

    async def chat(self, request: Any, raw_request_info: Any = None) -> AsyncIterator[Any]:
        body = request if isinstance(request, dict) else request.model_dump()
        from ray.serve.context import _get_serve_request_context

        run_id = _get_serve_request_context().session_id
        if _text(body["messages"][-1].get("content")) == "crash":
            raise RuntimeError("the fake crashed")
        stream = bool(body.get("stream"))
        users = [m for m in body["messages"] if m["role"] == "user"]
        first = _text(users[0]["content"]) if users else ""
        await self.ledger.record.remote(self.name, run_id, stream, first)
        return self._watched(_answer(body, stream), first)

    async def _watched(self, answer: AsyncIterator[Any], first: str) -> AsyncIterator[Any]:
        """``answer``, its cancellation told to the ledger."""
        try:
            async for item in answer:
                yield item
        except asyncio.CancelledError:
            self.ledger.cancel.remote(first)
            raise

    def replica_name(self) -> str:
        return self.name


def deployment(ledger: Any, *, num_replicas: int = 2, http: bool = False) -> Any:
    """The fake as a bound Serve application with run affinity and ``num_replicas`` CPU-free
    replicas; with ``http``, behind :func:`ingress` (the application's route ``/v1``)."""
    server = (
        serve.deployment(FakeLLMServer)
        .options(
            name=DEPLOYMENT,
            num_replicas=num_replicas,
            # (the tests hold answers at a gate: held streams never fill a replica, whose
            # queue would then keep other runs' first calls from it)
            max_ongoing_requests=1000,
            ray_actor_options={"num_cpus": 0},
            request_router_config=affinity_router_config(),
            health_check_period_s=1,
            graceful_shutdown_timeout_s=1,
        )
        .bind(ledger)
    )
    return ingress().bind(server) if http else server


def ingress() -> Any:
    """The OpenAI HTTP route in front of the fake (``POST /v1/chat/completions``), calling it
    through its handle as Serve LLM's ``OpenAiIngress`` does."""
    api = FastAPI()

    @serve.deployment(name="FakeIngress", ray_actor_options={"num_cpus": 0})
    @serve.ingress(api)
    class FakeIngress:
        def __init__(self, server: Any) -> None:
            self.server = server.options(stream=True)

        @api.post("/v1/chat/completions")
        async def chat(self, request: Request) -> Any:
            body = await request.json()
            items = self.server.chat.remote(body)
            if not body.get("stream"):
                answers = [item async for item in items]
                answer = answers[0]
                status = answer["error"]["code"] if "error" in answer else 200
                return JSONResponse(answer, status_code=status)

            async def events() -> AsyncIterator[str]:
                async for item in items:
                    for part in item:
                        yield part

            return StreamingResponse(events(), media_type="text/event-stream")

    return FakeIngress


def _reply(body: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]], str]:
    """(text, tool calls, finish reason) of the answer to ``body``."""
    messages = body["messages"]
    users = [m for m in messages if m["role"] == "user"]
    text = _text(users[-1]["content"]) if users else ""
    turn = sum(1 for m in messages if m["role"] == "assistant") + 1
    tool, city, times = _tool_ask(text)
    if tool:
        results = [m for m in messages if m["role"] == "tool"]
        if len(results) < times:
            args = json.dumps({"city": city})
            call = {
                "id": f"call-{turn}",
                "type": "function",
                "function": {"name": tool, "arguments": args},
            }
            return None, [call], "tool_calls"
        return f"In {city}: {_text(results[-1]['content'])}", [], "stop"
    return f"echo: {text} (turn {turn})", [], "stop"


def _tool_ask(text: str) -> tuple[str, str, int]:
    """``(tool, city, times)`` of a message ``<tool> <city> [<times>]``, or ``("", "", 0)``."""
    words = text.split()
    if len(words) < 2 or words[0] not in TOOLS:
        return "", "", 0
    times = int(words[2]) if len(words) > 2 and words[2].isdigit() else 1
    return words[0], words[1], times


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def _usage(body: dict[str, Any], text: str | None) -> dict[str, int]:
    prompt = sum(len(_text(m.get("content"))) for m in body["messages"]) // 4 + 1
    completion = len(text or "") // 4 + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


async def _answer(body: dict[str, Any], stream: bool) -> AsyncIterator[Any]:
    last = _text(body["messages"][-1].get("content"))
    if last.startswith("fail "):
        code = int(last.split()[1])
        yield {
            "object": "error",
            "error": {"message": "the fake refuses", "type": "Fake", "code": code},
        }
        return
    text, calls, reason = _reply(body)
    slow = any("slow" in _text(m.get("content")) for m in body["messages"])
    if not stream:
        message = {"role": "assistant", "content": text, "tool_calls": calls or None}
        yield {
            "id": "cmpl-1",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": reason}],
            "usage": _usage(body, text),
        }
        return
    for index, batch in enumerate(_chunk_batches(body, text, calls, reason)):
        if slow and index == 1:
            await wait_at_gate()
        yield batch


def _chunk_batches(
    body: dict[str, Any], text: str | None, calls: list[dict[str, Any]], reason: str
) -> list[list[str]]:
    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        chunk = {
            "id": "chunk-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(chunk)}\n\n"

    events = [event({"role": "assistant", "content": ""})]
    for word in (text or "").split(" "):
        events.append(event({"content": word if len(events) == 1 else " " + word}))
    for index, call in enumerate(calls):
        args = call["function"]["arguments"]
        events.append(
            event(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": args[:5]},
                        }
                    ]
                }
            )
        )
        events.append(
            event({"tool_calls": [{"index": index, "function": {"arguments": args[5:]}}]})
        )
    events.append(event({}, reason))
    usage = {
        "id": "chunk-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body["model"],
        "choices": [],
        "usage": _usage(body, text),
    }
    events.append(f"data: {json.dumps(usage)}\n\n")
    events.append("data: [DONE]\n\n")
    return [events[i : i + 2] for i in range(0, len(events), 2)]
