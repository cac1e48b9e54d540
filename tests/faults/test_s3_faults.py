"""S3 faults under real runs: errors retried, access denied reported without secrets, slow S3.

The session's boto3 traffic (the coordinator's included) goes through a fault proxy in front
of moto's server (see tests/conftest.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from s3_server import Fault, create_bucket

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text


@pytest.fixture(scope="module")
def s3_namespace(
    ray_session: None, session_s3: Any, s3_key_audit: Any, request: pytest.FixtureRequest
) -> Iterator[None]:
    """raygents on a namespace of this module's, with a store in a bucket of its own (its
    tests do not break the namespace's coordinator: they share it)."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)
    bucket = s3_key_audit.watch(create_bucket(session_s3.endpoint_url))
    rg.shutdown()
    rg.init(namespace=f"s3faults-{os.urandom(3).hex()}", store=f"s3://{bucket}/ckpt")
    yield
    rg.shutdown()  # (a later test that uses `rt` brings the session's raygents back)


@pytest.fixture
def s3_store(s3_namespace: None, session_s3: Any) -> Iterator[Any]:
    """The fault proxy in front of the store (cleared after the test)."""
    proxy = session_s3.proxy
    yield proxy
    proxy.clear()


@rg.tool(num_cpus=0)
def note(n: int) -> str:
    """Note a number."""
    return f"noted {n}"


def two_turns() -> FunctionModel:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(m.role == "tool" for m in req.messages)
        return (
            text(f"done {done}") if done >= 2 else calls(call("note", {"n": done}, id=f"n{done}"))
        )

    return FunctionModel(reply)


def test_transient_s3_errors_are_retried(s3_store: Any) -> None:
    s3_store.inject(Fault.slow_down(), Fault.internal_error(), Fault.unavailable(), method="PUT")
    result = rg.run(rg.Agent("s3_retry", tools=[note], model=two_turns()), "go")
    assert result.final_output == "done 2"
    assert s3_store.count(method="PUT", fault="error") >= 3


def test_access_denied_fails_the_run_clearly_without_secrets(s3_store: Any) -> None:
    s3_store.always(Fault.access_denied(), method="PUT")
    with pytest.raises(rg.RaygentsError) as info:
        rg.run(rg.Agent("s3_denied", tools=[note], model=two_turns()), "go")
    message = str(info.value)
    assert "denied" in message.lower() or "403" in message
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in message


def test_slow_s3_still_suspends_and_resumes(s3_store: Any) -> None:
    s3_store.always(Fault.delay(0.5), method="PUT")
    agent = rg.Agent("s3_slow", tools=[note], model=two_turns())
    handle = rg.start(agent, "go")
    next(e for e in handle.events() if e.type == "tool_start")
    handle.suspend()
    started = time.time()
    with pytest.raises(rg.SuspendedError) as info:
        handle.result(timeout_s=120)
    assert info.value.checkpoint is None, "the checkpoint reached S3"
    assert time.time() - started < 60
    s3_store.clear()
    assert rg.resume(handle.run_id, agent=agent).result(timeout_s=60).final_output == "done 2"
