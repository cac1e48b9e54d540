"""Cluster-wide model rate limits on a real local Ray, against a local OpenAI-compatible server
that answers 429 with ``Retry-After`` above its rate."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import pytest
import ray
from openai_server import FakeOpenAIServer, Reply

import raygents as rg
from raygents.runtime.gates import LIMITER_NAME

pytestmark = pytest.mark.timeout(180)

PER_MINUTE = 3000
PER_SECOND = PER_MINUTE / 60


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

    def peak(self) -> int:
        """The most requests that arrived in any one-second window."""
        times, best, first = sorted(self.arrivals), 0, 0
        for last, at in enumerate(times):
            while times[first] <= at - 1.0:
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

    def peak(self) -> int:
        """The most requests that arrived in any one-second window."""
        script = RateServer(PER_SECOND)
        script.arrivals = self.arrivals
        return script.peak()


@pytest.fixture
def limited(rt: None) -> Iterator[None]:
    """raygents on its own namespace with a limit on model ``limited``."""
    rg.shutdown()
    namespace = f"rates-{os.urandom(3).hex()}"
    rg.init(
        namespace=namespace,
        store="memory://",
        rate_limits={
            "limited": rg.RateLimit(requests_per_minute=PER_MINUTE),
            "slow": rg.RateLimit(requests_per_minute=1),
        },
    )
    yield
    rg.shutdown()
    with contextlib.suppress(ValueError):  # (the limiter outlives its namespace's coordinator)
        ray.kill(ray.get_actor(LIMITER_NAME, namespace=namespace))
    rg.init(store="memory://")


def _agent(name: str, url: str, *, replicas: int = 1, max_retries: int = 3) -> rg.Agent:
    model = rg.OpenAIChatModel("limited", base_url=url, max_retries=max_retries)
    return rg.Agent(name, model=model, replicas=replicas)


def test_runs_over_a_rate_limit_wait_for_their_turn_and_none_fails(limited: None) -> None:
    server = ServerProcess(PER_SECOND * 1.1)  # (429 above what the test tolerates)
    with server as url:
        # warm up the agent actors (and their gates) so the burst below is the runs only
        agent = _agent("rated", url, replicas=3)
        rg.run(agent, "warm up")
        server.ask("clear")
        handles = [rg.start(agent, f"q{i}") for i in range(300)]
        results = [h.result(timeout_s=120) for h in handles]
    assert all(r.final_output == "ok" for r in results)
    assert server.refused == 0
    assert len(server.arrivals) == 300
    assert server.peak() <= PER_SECOND * 1.1


def test_a_429_with_retry_after_holds_back_every_agent_actor(limited: None) -> None:
    server = ServerProcess(PER_SECOND)
    with server as url:
        first = _agent("first", url, max_retries=0)  # its 429 fails its run at once
        second = _agent("second", url)
        rg.run(first, "warm up")
        rg.run(second, "warm up")
        server.ask("refuse_for", 0.5)
        with pytest.raises(rg.ModelError, match="429"):
            rg.run(first, "refused")  # its 429 says: retry after 1 s
        server.ask("clear")
        assert rg.run(second, "after the pause").final_output == "ok"
    # the other actor's call waited out the pause the provider asked of the first, so the
    # server, still refusing when it would have gone, refused only the first actor's call
    assert server.refused == 1
    assert len(server.arrivals) == 1


def test_a_model_without_a_limit_is_not_held_back(limited: None) -> None:
    with FakeOpenAIServer(lambda body: Reply(text="free")) as server:
        model = rg.OpenAIChatModel("unlimited", base_url=server.url)
        assert rg.run(rg.Agent("free", model=model), "go").final_output == "free"


def test_a_run_waiting_for_its_turn_can_be_cancelled(limited: None) -> None:
    with FakeOpenAIServer(lambda body: Reply(text="slow")) as server:
        agent = rg.Agent("slow", model=rg.OpenAIChatModel("slow", base_url=server.url))
        assert rg.run(agent, "first").final_output == "slow"
        waiting = rg.start(agent, "second")  # its turn is a minute after the first's
        with pytest.raises(TimeoutError):
            waiting.result(timeout_s=1.0)
        waiting.cancel()
        with pytest.raises(rg.RunCancelled):
            waiting.result(timeout_s=30)
        assert len(server.requests) == 1
