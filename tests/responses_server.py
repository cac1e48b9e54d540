"""A small OpenAI Responses API server for tests: scripted replies over real HTTP, JSON and SSE.

Usage::

    with FakeResponsesServer(["Hello!", [ToolCall("c1", "add", '{"a": 1}')], "Done."]) as server:
        model = OpenAIResponsesModel("fake", base_url=server.url)
        ...
        assert server.requests[0]["input"][-1]["content"] == "hi"

A reply is a text, a list of tool calls, or an :class:`RReply` for reasoning items, usage
details, incomplete answers, HTTP errors, raw output items or a raw body. Requests with
``"stream": true`` are answered with the Responses API's server-sent events (text deltas split
across events, then ``response.completed`` with the whole response). Like
:class:`~openai_server.FakeOpenAIServer`, whose queue and lifecycle it shares, it binds
127.0.0.1 on a free port and serves from a daemon thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from openai_server import FakeOpenAIServer, _Handler, _pieces, _Server

from raygents.core.messages import ToolCall

__all__ = ["FakeResponsesServer", "RReply", "reasoning_item"]


def reasoning_item(secret: str, summary: str = "") -> dict[str, Any]:
    """A reasoning output item whose encrypted content is ``secret``."""
    return {
        "type": "reasoning",
        "id": f"rs_{secret}",
        "summary": [{"type": "summary_text", "text": summary}] if summary else [],
        "encrypted_content": secret,
        "status": None,
    }


@dataclass(frozen=True)
class RReply:
    """One scripted Responses answer, or an HTTP error when ``status`` is not 200."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: tuple[dict[str, Any], ...] = ()
    """Reasoning output items, placed before the message and calls (see :func:`reasoning_item`)."""
    usage: tuple[int, int] = (10, 5)
    """Input and output tokens."""
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    response_status: str = "completed"
    incomplete_reason: str | None = None
    output: list[Any] | None = None
    """Raw output items, sent instead of those built from the fields above."""
    raw: bytes | None = None
    """A raw body (JSON) or raw SSE data lines (stream), sent as is."""
    status: int = 200
    error: str = "scripted error"
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def failure(cls, status: int, error: str = "scripted error", **headers: str) -> RReply:
        """An HTTP error reply; header names use ``_`` for ``-`` (``retry_after_ms="1"``)."""
        return cls(
            status=status,
            error=error,
            headers={k.replace("_", "-"): v for k, v in headers.items()},
        )


RReplyLike = str | RReply | Sequence[ToolCall]


def to_rreply(value: RReplyLike) -> RReply:
    if isinstance(value, RReply):
        return value
    if isinstance(value, str):
        return RReply(text=value)
    return RReply(tool_calls=tuple(value))


class FakeResponsesServer(FakeOpenAIServer):
    """A Responses API server on 127.0.0.1 answering ``POST /v1/responses``."""

    def __init__(
        self,
        replies: Sequence[RReplyLike] | Callable[[dict[str, Any]], RReplyLike] = (),
        *,
        chunk_size: int = 3,
    ) -> None:
        super().__init__(replies, chunk_size=chunk_size)  # type: ignore[arg-type]

    def start(self) -> FakeResponsesServer:
        handler = type("_RHandler", (_ResponsesHandler,), {"fake": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="FakeResponsesServer",
            daemon=True,
        )
        self._thread.start()
        return self

    def __enter__(self) -> FakeResponsesServer:
        return self.start()

    def next_rreply(self, body: dict[str, Any], headers: dict[str, str]) -> RReply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if self._script is not None:
                return to_rreply(self._script(body))  # type: ignore[arg-type]
            if not self._queue:
                return RReply.failure(500, "FakeResponsesServer has no scripted reply left")
            return to_rreply(self._queue.popleft())  # type: ignore[arg-type]


class _ResponsesHandler(_Handler):
    fake: FakeResponsesServer

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.split("?")[0].rstrip("/") != "/v1/responses":
            self._send_json(404, {"error": {"message": f"no route {self.path!r}"}})
            return
        body = json.loads(raw)
        reply = self.fake.next_rreply(body, {k.lower(): v for k, v in self.headers.items()})
        if reply.status != 200:
            error = {"message": reply.error, "type": "scripted", "code": None}
            self._send_json(reply.status, {"error": error}, reply.headers)
        elif body.get("stream"):
            self._send_raw_events(_events(reply, body.get("model", ""), self.fake.chunk_size))
        elif reply.raw is not None:
            self._send_bytes(reply.raw)
        else:
            self._send_json(200, _response(reply, body.get("model", "")), reply.headers)

    def _send_bytes(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_raw_events(self, events: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            self._write_chunk(event)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _output(reply: RReply) -> list[Any]:
    if reply.output is not None:
        return reply.output
    items: list[Any] = list(reply.reasoning)
    if reply.text is not None:
        items.append(
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    items.extend(
        {
            "type": "function_call",
            "id": f"fc_{c.id}",
            "call_id": c.id,
            "name": c.name,
            "arguments": c.arguments,
            "status": "completed",
        }
        for c in reply.tool_calls
    )
    return items


def _response(reply: RReply, model: str) -> dict[str, Any]:
    inputs, outputs = reply.usage
    incomplete = {"reason": reply.incomplete_reason} if reply.incomplete_reason else None
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": 0,
        "model": model,
        "status": reply.response_status,
        "incomplete_details": incomplete,
        "error": None,
        "output": _output(reply),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": inputs,
            "input_tokens_details": {"cached_tokens": reply.cached_tokens},
            "output_tokens": outputs,
            "output_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
            "total_tokens": inputs + outputs,
        },
    }


def _sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _events(reply: RReply, model: str, size: int) -> Iterator[bytes]:
    if reply.raw is not None:
        yield reply.raw
        return
    response = _response(reply, model)
    yield _sse({"type": "response.created", "sequence_number": 0, "response": response})
    seq = 1
    for piece in _pieces(reply.text, size) if reply.text else ():
        yield _sse(
            {
                "type": "response.output_text.delta",
                "sequence_number": seq,
                "item_id": "msg_1",
                "output_index": len(reply.reasoning),
                "content_index": 0,
                "delta": piece,
                "logprobs": [],
            }
        )
        seq += 1
    final = "response.incomplete" if reply.response_status == "incomplete" else "response.completed"
    yield _sse({"type": final, "sequence_number": seq, "response": response})
