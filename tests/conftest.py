"""Shared fixtures: one private local Ray instance per test session, started on demand."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Tests never reach a real provider.
for _name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAY_ADDRESS"):
    os.environ.pop(_name, None)


@pytest.fixture(scope="session")
def session_s3() -> Iterator[object]:
    """moto's S3 server on 127.0.0.1 with the AWS environment pointing at it for the whole
    session, set before Ray starts so that Ray's workers (the coordinator) inherit it."""
    from s3_server import FaultProxy, MotoServer, aws_env

    with MotoServer() as server, FaultProxy(server.endpoint_url) as proxy:
        server.proxy = proxy  # type: ignore[attr-defined]
        with aws_env(proxy.endpoint_url):  # boto3 (and Ray's workers) go through the proxy
            yield server


@pytest.fixture(scope="session")
def ray_session(session_s3: object) -> Iterator[None]:
    """A private local Ray instance with raygents initialised on it, for the whole session."""
    import ray

    import raygents

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    raygents.init(store="memory://")
    yield
    raygents.shutdown()
    ray.shutdown()


@pytest.fixture
def rt(ray_session: None, request: pytest.FixtureRequest) -> None:
    """Ray is up; the test module's functions travel to workers by value (not by import)."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)
