"""Load fixtures: raygents on a fresh namespace over an S3 bucket (moto, behind the session's
fault proxy) under ``async`` durability, with the load workload sent to workers by value."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import loadkit
import pytest
from faults import faultkit
from s3_server import create_bucket

import raygents as rg


@pytest.fixture
def load_store(own_raygents: None, rt: None, session_s3: Any, s3_key_audit: Any) -> Iterator[str]:
    """The store URL (its bucket's keys are checked at the end of the session: s3_key_audit)."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(loadkit)
    cloudpickle.register_pickle_by_value(faultkit)
    bucket = s3_key_audit.watch(create_bucket(session_s3.endpoint_url))
    url = f"s3://{bucket}/load"
    rg.shutdown()
    rg.init(namespace=f"load-{os.urandom(3).hex()}", store=url, durability="async")
    yield url
    rg.shutdown()
