"""A local OpenAI-compatible server, in a child process, that answers 429 with ``Retry-After``
above a request rate and records when each request arrived (rate-limit tests and benchmarks)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

from openai_server import FakeOpenAIServer, Reply


class RateServer:
    """Answers every chat completion, but with 429 (``Retry-After``) once more than
    ``per_second`` requests arrived in the last second, or while a scripted pause lasts;
    records when each request arrived."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self.arrivals: list[float] = []
        self.refused = 0
        self.refuse_until = 0.0
        self._recent: deque[float] = deque()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        now = time.monotonic()
        with self._lock:
            self.arrivals.append(now)
            while self._recent and self._recent[0] <= now - 1.0:
                self._recent.popleft()
            if now < self.refuse_until or len(self._recent) >= self.per_second:
                self.refused += 1
                return Reply.failure(429, "rate limit reached", retry_after="1")
            self._recent.append(now)
        return Reply(text="ok")

    def peak(self, window_s: float = 1.0) -> int:
        """The most requests that arrived in any window of ``window_s`` seconds."""
        times, best, first = sorted(self.arrivals), 0, 0
        for last, at in enumerate(times):
            while times[first] <= at - window_s:
                first += 1
            best = max(best, last - first + 1)
        return best


def _serve(per_second: float, pipe: Connection) -> None:
    """Serve a :class:`RateServer` in this (child) process until told to stop: the driver's
    busy threads then never delay its clock. Sends the URL, then, when asked, its record."""
    # The server's clock is what the test measures by: on a busy machine a starved server
    # would accept a second's connections at once. (Raising priority needs privileges.)
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    script = RateServer(per_second)
    with FakeOpenAIServer(script) as server:
        pipe.send(server.url)
        while True:
            command, value = pipe.recv()
            if command == "stop":
                pipe.send((script.arrivals, script.refused))
                return
            if command == "clear":
                script.arrivals.clear()
            elif command == "refuse_for":
                script.refuse_until = time.monotonic() + value
            pipe.send(time.monotonic())


class ServerProcess:
    """A :class:`RateServer` in a child process."""

    def __init__(self, per_second: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._pipe, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(per_second, child), daemon=True)
        self.per_second = per_second
        self.arrivals: list[float] = []
        self.refused = 0

    def __enter__(self) -> str:
        self._process.start()
        url: str = self._pipe.recv()
        return url

    def ask(self, command: str, value: float = 0.0) -> float:
        """Send ``clear`` or ``refuse_for`` (seconds); returns the server's clock."""
        self._pipe.send((command, value))
        now: float = self._pipe.recv()
        return now

    def __exit__(self, *exc: object) -> None:
        self._pipe.send(("stop", 0.0))
        self.arrivals, self.refused = self._pipe.recv()
        self._process.join(timeout=10)

    def peak(self, window_s: float = 1.0) -> int:
        """The most requests that arrived in any window of ``window_s`` seconds."""
        script = RateServer(self.per_second)
        script.arrivals = self.arrivals
        return script.peak(window_s)
