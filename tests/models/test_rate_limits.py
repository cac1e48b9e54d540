"""Cluster-wide model rate limits on a real local Ray, against a local OpenAI-compatible server
that answers 429 with ``Retry-After`` above its rate."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import ray
from openai_server import FakeOpenAIServer, Reply
from rate_server import ServerProcess

import raygents as rg
from raygents.runtime.actor.gates import LIMITER_NAME

pytestmark = pytest.mark.timeout(180)

PER_MINUTE = 3000
PER_SECOND = PER_MINUTE / 60


@pytest.fixture
def limited(own_raygents: None, rt: None) -> Iterator[None]:
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
    # The limiter spaces calls evenly; a busy machine delays some more than others on their
    # way to the server, which bunches a few together there (once, 56 in one second). Over
    # two seconds that bunching is a small part of what arrives.
    assert server.peak(window_s=2.0) <= 2 * PER_SECOND * 1.1


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


@pytest.mark.parametrize(
    ("stop", "error", "status"),
    [("cancel", rg.RunCancelled, "cancelled"), ("suspend", rg.SuspendedError, "suspended")],
)
def test_a_run_waiting_for_its_turn_stops_before_its_call(
    limited: None, stop: str, error: type[Exception], status: str
) -> None:
    with FakeOpenAIServer(lambda body: Reply(text="slow")) as server:
        agent = rg.Agent("slow", model=rg.OpenAIChatModel("slow", base_url=server.url))
        assert rg.run(agent, "first").final_output == "slow"
        waiting = rg.start(agent, "second")  # its turn is a minute after the first's
        with pytest.raises(TimeoutError):
            waiting.result(timeout_s=1.0)
        getattr(waiting, stop)()
        with pytest.raises(error):
            waiting.result(timeout_s=30)  # (not a minute: the wait is given up)
        assert len(server.requests) == 1
        assert rg.attach(waiting.run_id).status() == status
