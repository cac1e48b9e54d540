"""Hostile identifiers (B8 of the reliability plan): ids that would escape or alias a store key
are refused at the API boundary before any key is written, and runs on S3 leave only keys under
raygents' folders (the session's buckets are all listed again at its end: ``s3_key_audit``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from s3_server import create_bucket, s3_client

import raygents as rg
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

HOSTILE = [
    "../escape",
    "..",
    ".",
    "%2e%2e",
    "%2e%2e%2fescape",
    "/absolute",
    "trailing/",
    "nul\x00byte",
    "new\nline",
    "x" * 2000,
    "\uff52\uff55\uff4e",  # fullwidth "run"
    "run\u200b",  # zero-width space
    "p\u0430yment",  # a Cyrillic a
    "café",
    "lone-\udcff",  # a surrogate, as os.listdir gives for non-UTF-8 names
    "",
    " ",
    "-leading-dash",
]


@pytest.fixture(scope="module")
def s3(
    ray_session: None,
    session_s3: Any,
    s3_key_audit: Any,
    request: pytest.FixtureRequest,
) -> Iterator[Any]:
    """raygents on a fresh bucket for the module; yields a function listing the bucket's keys."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(request.module)
    bucket = s3_key_audit.watch(create_bucket(session_s3.endpoint_url))
    rg.shutdown()
    rg.init(namespace=f"keys-{os.urandom(3).hex()}", store=f"s3://{bucket}/tenant")

    def keys() -> list[str]:
        pages = s3_client(session_s3.endpoint_url).get_paginator("list_objects_v2")
        return [
            o["Key"] for page in pages.paginate(Bucket=bucket) for o in page.get("Contents", ())
        ]

    yield keys
    rg.shutdown()
    rg.init(store="memory://")


def short(value: str) -> str:
    return repr(value)[:40]


@pytest.mark.parametrize("bad", [*HOSTILE, "a/b"], ids=[*map(short, HOSTILE), "'a/b'"])
def test_hostile_run_ids_are_refused_before_any_key_is_written(bad: str, s3: Any) -> None:
    model = ScriptedModel([text("never")])
    agent = rg.Agent("keys_run", model=model)
    before = set(s3())
    with pytest.raises(rg.UserError) as info:
        rg.start(agent, "x", run_id=bad)
    message = str(info.value)
    assert "run" in message.lower() or "key" in message.lower(), message
    assert len(message) < 600, "a long id is truncated in the message"
    assert not [k for k in s3() if k not in before]
    assert model.calls == []


@pytest.mark.parametrize("bad", [*HOSTILE, "a/b"], ids=[*map(short, HOSTILE), "'a/b'"])
def test_hostile_session_ids_are_refused_before_any_key_is_written(bad: str, s3: Any) -> None:
    model = ScriptedModel([text("never")])
    agent = rg.Agent("keys_session", model=model, session=rg.MemorySession())
    before = set(s3())
    with pytest.raises(rg.UserError) as info:
        rg.start(agent, "x", session_id=bad)
    assert "session" in str(info.value).lower()
    assert len(str(info.value)) < 600
    assert not [k for k in s3() if k not in before]
    assert model.calls == []


@rg.tool(num_cpus=0)
def work(n: int) -> str:
    """Work on a number."""
    return f"worked {n}"


@rg.tool(num_cpus=0, needs_approval=True)
def erase(n: int) -> str:
    """Erase a number."""
    return f"erased {n}"


def test_runs_of_every_kind_leave_keys_only_under_raygents_folders(
    s3: Any, s3_key_audit: Any
) -> None:
    """Suspended, awaiting approval, failed, nested and session runs each leave records; all
    are under ``<prefix>/runs/<id>/`` or ``<prefix>/sessions/<id>/``."""

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(m.role == "tool" for m in req.messages)
        if "erase" in (req.messages[0].text or "") and done == 0:
            return calls(call("erase", {"n": 1}, id="e1"))
        return text("done") if done >= 1 else calls(call("work", {"n": done}, id=f"w{done}"))

    leaf = rg.Agent("keys_leaf", tools=[work], model=FunctionModel(reply))
    lead = rg.Agent(
        "keys_lead",
        tools=[work, erase, leaf.as_tool()],
        model=FunctionModel(reply, latency_s=0.3),
        session=rg.StoreSession(),
    )
    suspended = rg.start(lead, "work", session_id="tenant-a.s1")
    suspended.suspend()
    with pytest.raises(rg.SuspendedError):
        suspended.result(timeout_s=60)
    with pytest.raises(rg.RunInterrupted):
        rg.run(lead, "erase it", run_id="keys-erase_1")
    nested = rg.Agent(
        "keys_nest",
        tools=[leaf.as_tool()],
        model=ScriptedModel([calls(call("keys_leaf", {"input": "go"}, id="c.1")), text("ok")]),
    )
    assert rg.run(nested, "go").final_output == "ok"
    assert rg.run(lead, "again", session_id="tenant-b_s2").final_output == "done"
    keys = s3()
    assert keys, "the runs wrote records"
    assert s3_key_audit.hostile(keys) == []
    assert all(k.startswith(("tenant/runs/", "tenant/sessions/")) for k in keys), keys
