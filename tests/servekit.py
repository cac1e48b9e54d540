"""Helpers of the HTTP API's tests: serving a test module's agents on the session's Ray
instance (loopback only), a client with the token, and an SSE reader."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

TOKEN = "test-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(agents: Any, **options: Any) -> str:
    """``raygents.serve.start`` on the port Serve listens on, or, when Serve is down, on a free
    port of 127.0.0.1, with another port when that one was taken before Serve's proxy
    listened (the session's Ray processes open connections from ports of the same range all
    the time)."""
    import raygents.serve as rgs
    from raygents.errors import UserError
    from raygents.serve.deployment import _serve_address

    listening = _serve_address()
    if listening is not None:
        return rgs.start(agents, port=listening[1], **options)
    for _ in range(2):
        try:
            return rgs.start(agents, port=free_port(), **options)
        except UserError as exc:
            if "cannot serve on" not in str(exc):
                raise
    return rgs.start(agents, port=free_port(), **options)


@dataclass
class Served:
    """An app being served: its URL, and a client that sends the token."""

    url: str
    token: str | None
    client: httpx.Client

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        return self.client.post(path, json=body, **kw)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.client.get(path, **kw)

    def until(self, run_id: str, *statuses: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """The run's document once its status is one of ``statuses``."""
        deadline = time.monotonic() + timeout_s
        while True:
            doc: dict[str, Any] = self.get(f"/v1/runs/{run_id}").json()
            if doc.get("status") in statuses:
                return doc
            assert time.monotonic() < deadline, f"run {run_id} is {doc}, not {statuses}"
            time.sleep(0.1)


def client(url: str, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url, headers=headers, timeout=60.0)


@dataclass
class Frame:
    """One SSE event."""

    id: int | None
    """Its sequence in the run (None: an event the runtime does not number, such as the
    replayed history of a run that ended before anyone followed it)."""
    event: str
    data: dict[str, Any]


def read_sse(
    http: httpx.Client, path: str, last_id: int | None = None, limit: int | None = None
) -> tuple[list[Frame], list[str]]:
    """The events of a stream until it ends (or ``limit`` of them), and its comments."""
    headers = {"Last-Event-ID": str(last_id)} if last_id is not None else {}
    frames: list[Frame] = []
    comments: list[str] = []
    with http.stream("GET", path, headers=headers) as answer:
        assert answer.status_code == 200, answer.read()
        assert answer.headers["content-type"].startswith("text/event-stream")
        for block in _blocks(answer.iter_lines()):
            fields: dict[str, str] = {}
            for line in block:
                if line.startswith(":"):
                    comments.append(line[1:].strip())
                    continue
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
            if "data" in fields:
                seq = int(fields["id"]) if "id" in fields else None
                frames.append(Frame(seq, fields["event"], json.loads(fields["data"])))
                if limit is not None and len(frames) >= limit:
                    break
    return frames, comments


def _blocks(lines: Iterator[str]) -> Iterator[list[str]]:
    block: list[str] = []
    for line in lines:
        if line == "":
            if block:
                yield block
            block = []
        else:
            block.append(line)
    if block:
        yield block
