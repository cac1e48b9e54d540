"""ServeModel against a CPU fake of Ray Serve LLM's ``LLMServer`` with two replicas, on the
session's local Ray with Serve in this process (HTTP bound to 127.0.0.1): a run with tool
calls and streaming, run affinity for 40 concurrent runs, and a replica killed mid-run."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from typing import Any

import fake_llm_server
import pytest
import ray
from fake_llm_server import DEPLOYMENT, MODEL, Gate, Ledger

import raygents as rg
from raygents.core.messages import Message, ModelRequest
from raygents.errors import ModelError, UserError
from raygents.models.served import ServeModel

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

APP = "fake-llm-app"


# (the tools run in the agent actor: a Ray task per call would start a worker process for each
# run waiting at the gate or in flight at once, and what is tested is where the model calls go)
@rg.tool(remote=False)
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny at 21C in {city}"


@rg.tool(remote=False)
async def nap(city: str) -> str:
    """The weather in a city, once the gate opens."""
    gate = ray.get_actor(fake_llm_server.GATE, namespace=fake_llm_server.GATE_NAMESPACE)
    await gate.wait.remote()
    return f"rain in {city}"


@pytest.fixture(scope="module")
def ledger(ray_session: None, request: pytest.FixtureRequest) -> Iterator[Any]:
    from ray import cloudpickle, serve

    cloudpickle.register_pickle_by_value(request.module)
    cloudpickle.register_pickle_by_value(fake_llm_server)
    book = Ledger.remote()
    gate = Gate.options(name=fake_llm_server.GATE, namespace=fake_llm_server.GATE_NAMESPACE)
    gate = gate.remote()
    ray.get(gate.open.remote())  # (open but while a test holds it: see gate())
    serve.start(proxy_location="Disabled")  # (reached through handles: no HTTP port)
    serve.run(fake_llm_server.deployment(book), name=APP, route_prefix=None)
    try:
        yield book
    finally:
        serve.shutdown()
        ray.kill(book)
        ray.kill(gate)


@pytest.fixture
def gate(ledger: Any) -> Iterator[Any]:
    """The module's gate, closed: slow answers and the ``nap`` tool wait at it."""
    actor = ray.get_actor(fake_llm_server.GATE, namespace=fake_llm_server.GATE_NAMESPACE)
    ray.get(actor.close.remote())
    yield actor
    ray.get(actor.open.remote())


@pytest.fixture
def book(ledger: Any, rt: None) -> Any:
    ray.get(ledger.clear.remote())
    return ledger


def _model() -> ServeModel:
    return ServeModel(DEPLOYMENT, app_name=APP, model=MODEL)


def _by_run(calls: list[tuple[str, str, bool, str]]) -> dict[str, list[str]]:
    replicas: dict[str, list[str]] = collections.defaultdict(list)
    for replica, run_id, _, _ in calls:
        replicas[run_id].append(replica)
    return replicas


def test_a_run_with_tool_calls_streams_through_the_deployment_handle(book: Any) -> None:
    agent = rg.Agent("serve_weather", instructions="Weather.", tools=[weather], model=_model())
    handle = rg.run_streamed(agent, "weather Lisbon")
    deltas = "".join(e.delta or "" for e in handle.events() if e.type == "llm_delta")
    result = handle.result(timeout_s=60)
    assert result.final_output == "In Lisbon: sunny at 21C in Lisbon"
    assert deltas == result.final_output
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    calls = ray.get(book.all.remote())
    assert [(run, stream) for _, run, stream, _ in calls] == [(handle.run_id, True)] * 2
    assert len({call[0] for call in calls}) == 1


def test_a_run_that_does_not_stream_gets_whole_answers(book: Any) -> None:
    agent = rg.Agent("serve_weather_whole", tools=[weather], model=_model())
    result = rg.run(agent, "weather Porto")
    assert result.final_output == "In Porto: sunny at 21C in Porto"
    calls = ray.get(book.all.remote())
    assert [stream for _, _, stream, _ in calls] == [False, False]


AFFINE_RUNS = 40
"""Runs at once in the affinity test: a run that moved replica between its two turns would
show (a router that ignored affinity keeps each of them whole with a chance of 1 in 2, all of
them with a chance of 1 in 2**40), and both replicas get runs."""


def test_affinity_holds_for_many_concurrent_runs(book: Any) -> None:
    agent = rg.Agent("serve_affine", tools=[weather], model=_model())
    handles = [rg.start(agent, f"weather city-{i}") for i in range(AFFINE_RUNS)]
    results = [h.result(timeout_s=180) for h in handles]
    assert [r.final_output for r in results] == [
        f"In city-{i}: sunny at 21C in city-{i}" for i in range(AFFINE_RUNS)
    ]
    replicas = _by_run(ray.get(book.all.remote()))
    assert set(replicas) == {h.run_id for h in handles}
    split = {run: turns for run, turns in replicas.items() if len(set(turns)) != 1}
    assert all(len(turns) == 2 for turns in replicas.values())
    assert not split, split
    homes = collections.Counter(turns[0] for turns in replicas.values())
    assert len(homes) == 2, homes  # both replicas serve runs


def test_a_replica_killed_mid_run_moves_its_runs_to_the_other(book: Any, gate: Any) -> None:
    # runs between turns (their tool waits at the gate) and runs mid-answer (their stream
    # waits at the gate) when the replica that streams most of them is killed
    napper = rg.Agent("serve_napper", tools=[nap], model=_model())
    streamer = rg.Agent("serve_streamer", model=_model())
    handles = [rg.start(napper, f"nap town-{i}") for i in range(8)]
    handles += [rg.run_streamed(streamer, f"slow answer {i}") for i in range(8)]
    _until(lambda: len(_by_run(ray.get(book.all.remote()))) == len(handles), timeout_s=150)
    before = _by_run(ray.get(book.all.remote()))
    firsts = {run: turns[0] for run, turns in before.items()}
    streaming = collections.Counter(firsts[h.run_id] for h in handles[8:])
    victim = streaming.most_common(1)[0][0]  # (it is streaming answers right now)
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    ray.get(gate.open.remote())
    outputs = [h.result(timeout_s=120).final_output for h in handles]
    assert outputs[:8] == [f"In town-{i}: rain in town-{i}" for i in range(8)]
    assert outputs[8:] == [f"echo: slow answer {i} (turn 1)" for i in range(8)]
    after = _by_run(ray.get(book.all.remote()))
    since = {run: turns[len(before[run]) :] for run, turns in after.items()}
    assert all(victim not in calls for calls in since.values())
    moved = {run for run, calls in since.items() if firsts[run] == victim and calls}
    # both kinds moved: runs between turns, and answers cut off mid-stream (sent again)
    assert moved & {h.run_id for h in handles[:8]}, (victim, before, after)
    assert moved & {h.run_id for h in handles[8:]}, (victim, before, after)
    # a run whose replica lived stayed on it
    stayed = [run for run, first in firsts.items() if first != victim]
    assert all(set(after[run]) == {firsts[run]} for run in stayed)


def _until(check: Any, timeout_s: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


# -- the model on its own, in this process (no run: no affinity) ----------------------------


def _request(text: str, *, stream: bool = False) -> ModelRequest:
    return ModelRequest(agent_name="a", messages=(Message("user", text),), stream=stream)


def test_an_error_response_is_a_model_error_with_its_status(book: Any) -> None:
    with pytest.raises(ModelError, match="error 429 Fake: the fake refuses") as info:
        asyncio.run(_model().respond(_request("fail 429")))
    assert info.value.status_code == 429 and info.value.retryable
    with pytest.raises(ModelError, match="error 400") as info:
        asyncio.run(_collect(_model(), _request("fail 400", stream=True)))
    assert not info.value.retryable


def test_an_exception_in_the_deployment_is_a_model_error_naming_it(book: Any) -> None:
    with pytest.raises(ModelError, match="RuntimeError: the fake crashed") as info:
        asyncio.run(_model().respond(_request("crash")))
    assert "Serve deployment 'FakeLLMServer' of application 'fake-llm-app'" in str(info.value)
    assert not info.value.retryable


def test_a_call_left_early_is_cancelled_at_the_replica(book: Any, gate: Any) -> None:
    async def leave_early() -> None:
        stream = _model().stream(_request("slow goodbye", stream=True))
        assert await stream.__anext__() == "echo:"  # (then the replica waits at the gate)
        rest = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.2)
        rest.cancel()
        with pytest.raises(asyncio.CancelledError):
            await rest

    asyncio.run(leave_early())
    # (the ledger may also hold cancellations of calls of earlier tests' runs)
    _until(lambda: "slow goodbye" in ray.get(book.cancels.remote()), timeout_s=30)


def test_a_missing_deployment_is_a_user_error_naming_it(book: Any) -> None:
    model = ServeModel("NoSuchDeployment", app_name=APP)
    with pytest.raises(UserError, match="'NoSuchDeployment' of application 'fake-llm-app'"):
        asyncio.run(model.respond(_request("hi")))


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("",), {}, "deployment must be a non-empty string"),
        ((3,), {}, "deployment must be a non-empty string"),
        (("d",), {"app_name": ""}, "app_name must be a non-empty string"),
        (("d",), {"model": 5}, "model must be a non-empty string"),
        (("d",), {"max_retries": -1}, "max_retries must be an int >= 0"),
    ],
)
def test_bad_arguments_are_user_errors(args: Any, kwargs: Any, match: str) -> None:
    with pytest.raises(UserError, match=match):
        ServeModel(*args, **kwargs)


def test_the_model_pickles_without_its_handle(book: Any) -> None:
    import pickle

    model = _model()
    asyncio.run(model.respond(_request("hi")))
    copy = pickle.loads(pickle.dumps(model))
    assert copy._handle is None and repr(copy) == repr(model)
    assert "unused" not in repr(model)


async def _collect(model: ServeModel, request: ModelRequest) -> list[Any]:
    return [item async for item in model.stream(request)]
