"""A small OpenAI-compatible Chat Completions server for tests: scripted replies over real HTTP.

Usage::

    with FakeOpenAIServer(["Hello!", [ToolCall("c1", "add", '{"a": 1}')], "Done."]) as server:
        model = OpenAIChatModel("fake", base_url=server.url)
        ...
        assert server.requests[0]["messages"][-1]["content"] == "hi"

A reply is a text, a list of tool calls (``ToolCall`` or ``{"name", "arguments", "id"?}`` dicts,
where ``arguments`` may be a dict), or a :class:`Reply` for finish reasons, errors and usage.
``replies`` may also be a function from the request body to a reply, for runs whose requests
arrive in no fixed order. Requests with ``"stream": true`` are answered with server-sent events,
text and tool-call arguments split across chunks. The server binds 127.0.0.1 on a free port and
serves from a daemon thread, so any process on the machine (Ray workers included) can reach it.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from raygents.core.messages import ToolCall

__all__ = ["FakeOpenAIServer", "Reply", "ReplyLike"]


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a message, or an HTTP error when ``status`` is not 200."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    """Defaults to ``"tool_calls"`` when there are tool calls, else ``"stop"``."""
    usage: tuple[int, int] = (10, 5)
    """Prompt and completion tokens."""
    status: int = 200
    error: str = "scripted error"
    """The error message sent with a non-200 status."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. ``{"retry-after-ms": "1"}`` for fast client retries."""

    @classmethod
    def failure(cls, status: int, error: str = "scripted error", **headers: str) -> Reply:
        """An HTTP error reply; header names use ``_`` for ``-`` (``retry_after_ms="1"``)."""
        return cls(
            status=status,
            error=error,
            headers={k.replace("_", "-"): v for k, v in headers.items()},
        )


ReplyLike = str | Reply | Sequence[ToolCall | Mapping[str, Any]]
Script = Sequence[ReplyLike] | Callable[[dict[str, Any]], ReplyLike]


def to_reply(value: ReplyLike) -> Reply:
    """Normalise a text, a list of tool calls or a :class:`Reply` to a :class:`Reply`."""
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(text=value)
    return Reply(tool_calls=tuple(_to_call(c, i) for i, c in enumerate(value)))


def _to_call(value: ToolCall | Mapping[str, Any], position: int) -> ToolCall:
    if isinstance(value, ToolCall):
        return value
    args = value.get("arguments", {})
    args = args if isinstance(args, str) else json.dumps(args)
    return ToolCall(str(value.get("id", f"call_{position}")), str(value["name"]), args)


class _Server(ThreadingHTTPServer):
    request_queue_size = 256
    """Connections waiting to be accepted (the default, 5, refuses a burst of clients)."""


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 answering ``POST /v1/chat/completions``.

    Args:
        replies: the scripted replies, consumed one per request in order, or a function from
            the request body to a reply. When the script runs out, requests get HTTP 500.
        chunk_size: how many characters of text or tool arguments go in one stream chunk.
    """

    def __init__(self, replies: Script = (), *, chunk_size: int = 3) -> None:
        self._script: Callable[[dict[str, Any]], ReplyLike] | None = None
        self._queue: deque[ReplyLike] = deque()
        if callable(replies):
            self._script = replies
        else:
            self._queue.extend(replies)
        self.chunk_size = chunk_size
        self.requests: list[dict[str, Any]] = []
        """The JSON bodies received, in order."""
        self.headers: list[dict[str, str]] = []
        """The headers of each request, in order, with lower-case names."""
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL to pass as ``base_url``, e.g. ``http://127.0.0.1:PORT/v1``."""
        if self._httpd is None:
            raise RuntimeError("FakeOpenAIServer is not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def push(self, *replies: ReplyLike) -> None:
        """Append replies to the script."""
        with self._lock:
            self._queue.extend(replies)

    def start(self) -> FakeOpenAIServer:
        """Bind a free port and start serving in a daemon thread."""
        handler = type("_Handler", (_Handler,), {"fake": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},  # so that stop() returns at once
            name="FakeOpenAIServer",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_reply(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if self._script is not None:
                return to_reply(self._script(body))
            if not self._queue:
                return Reply.failure(500, "FakeOpenAIServer has no scripted reply left")
            return to_reply(self._queue.popleft())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeOpenAIServer

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, {"error": {"message": f"no route {self.path!r}"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send_json(400, {"error": {"message": "body is not JSON"}})
            return
        reply = self.fake._next_reply(body, {k.lower(): v for k, v in self.headers.items()})
        if reply.status != 200:
            error = {"message": reply.error, "type": "scripted", "code": None}
            self._send_json(reply.status, {"error": error}, reply.headers)
        elif body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = _chunks(reply, body.get("model", ""), self.fake.chunk_size, include_usage)
            self._send_events(chunks, reply.headers)
        else:
            self._send_json(200, _completion(reply, body.get("model", "")), reply.headers)

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_events(self, events: Iterator[dict[str, Any]], headers: Mapping[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        for event in events:
            self._write_chunk(f"data: {json.dumps(event)}\n\n".encode())
        self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def _finish_reason(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


def _usage(reply: Reply) -> dict[str, int]:
    prompt, completion = reply.usage
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _completion(reply: Reply, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in reply.tool_calls
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(reply)}],
        "usage": _usage(reply),
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _chunks(reply: Reply, model: str, size: int, include_usage: bool) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [choice],
        }

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.text, size) if reply.text else ():
        yield chunk({"content": piece})
    for index, call in enumerate(reply.tool_calls):
        head = {"index": index, "id": call.id, "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
        for piece in _pieces(call.arguments, size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, _finish_reason(reply))
    if include_usage:
        yield {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": _usage(reply),
        }
