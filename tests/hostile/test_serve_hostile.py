"""Hostile requests to the HTTP API: each gets a clear 4xx with the one error shape, never a
traceback or a 500, and the app keeps answering."""

from __future__ import annotations

import json

import httpx
import pytest
from servekit import Served

import raygents as rg
from raygents.testing import FunctionModel, text

pytestmark = pytest.mark.ray

AGENTS = [rg.Agent("echo", model=FunctionModel(lambda req: text("ok")))]


def refused(answer: httpx.Response, *statuses: int) -> dict[str, str]:
    assert answer.status_code in statuses, (answer.status_code, answer.text[:300])
    doc = answer.json()
    assert set(doc) == {"error"} and doc["error"]["message"], doc
    assert "Traceback" not in answer.text
    return doc["error"]  # type: ignore[no-any-return]


def raw(served: Served, body: bytes | str) -> httpx.Response:
    content = body.encode() if isinstance(body, str) else body
    return served.client.post(
        "/v1/runs", content=content, headers={"Content-Type": "application/json"}
    )


@pytest.mark.parametrize("depth", [65, 1000, 100_000])
def test_deep_nesting(served: Served, depth: int) -> None:
    body = '{"agent": "echo", "input": "x", "context": ' + "[" * depth + "]" * depth + "}"
    assert "nests deeper" in refused(raw(served, body), 400)["message"]


def test_nesting_within_the_limit_is_fine(served: Served) -> None:
    body = '{"agent": "echo", "input": "x", "wait": true, "context": ' + "[" * 60 + "]" * 60 + "}"
    assert raw(served, body).status_code == 201


@pytest.mark.parametrize(
    "number", ["1" * 5000, "1e400", "-1e400", "NaN", "Infinity", "-Infinity", "9" * 100]
)
def test_huge_and_non_finite_numbers(served: Served, number: str) -> None:
    body = '{"agent": "echo", "input": "x", "context": {"n": ' + number + "}}"
    refused(raw(served, body), 400)


def test_huge_numbers_in_limits(served: Served) -> None:
    body = '{"agent": "echo", "input": "x", "max_turns": 1' + "0" * 30 + "}"
    refused(raw(served, body), 400, 422)


@pytest.mark.parametrize("where", ["input", "context", "key", "agent"])
def test_lone_surrogates(served: Served, where: str) -> None:
    doc = {
        "input": '{"agent": "echo", "input": "a\\ud800b"}',
        "context": '{"agent": "echo", "input": "x", "context": {"k": "\\udfff"}}',
        "key": '{"agent": "echo", "input": "x", "context": {"\\ud83d": 1}}',
        "agent": '{"agent": "\\ud800", "input": "x"}',
    }[where]
    assert "surrogate" in refused(raw(served, doc), 400)["message"]


def test_not_utf8(served: Served) -> None:
    refused(raw(served, b'{"agent": "echo", "input": "\xff\xfe"}'), 400)


def test_a_100_mb_body_is_refused_by_its_length(served: Served) -> None:
    body = b'{"agent": "echo", "input": "' + b"x" * (100 * 1024 * 1024) + b'"}'
    try:
        answer = raw(served, body)
    except httpx.HTTPError:  # (the server may close before taking it all: also a refusal)
        pass
    else:
        refused(answer, 413)
    assert served.get("/healthz").status_code == 200


def test_a_100_mb_body_without_a_length_is_cut_off(served: Served) -> None:
    def chunks():  # type: ignore[no-untyped-def]
        yield b'{"agent": "echo", "input": "'
        for _ in range(100):
            yield b"x" * (1024 * 1024)
        yield b'"}'

    try:
        answer = served.client.post("/v1/runs", content=chunks())
    except httpx.HTTPError:
        pass
    else:
        refused(answer, 413)
    assert served.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"agent": "echo", "input": "x", "unknown": 1},
        {"agent": "echo", "input": "x", "wait": "yes"},
        {"agent": "echo", "input": "x", "timeout_s": -1},
        {"agent": "echo", "input": "x", "if_busy": "sometimes"},
        {"agent": ["echo"], "input": "x"},
        {"agent": "echo", "input": {"role": "user"}},
        {"agent": "echo", "input": []},
        {"agent": "echo", "input": [{"role": "wizard", "content": "x"}]},
        {"agent": "echo", "input": "x", "run_id": "../../etc/passwd"},
        {"agent": "echo", "input": "x", "run_id": "a" * 500},
        {"agent": "echo", "input": "x", "run_id": "run\x00id"},
        {"agent": "echo", "input": "x", "thread_id": "../t"},
        "just a string",
        None,
    ],
)
def test_invalid_bodies(served: Served, body: object) -> None:
    answer = served.client.post("/v1/runs", content=json.dumps(body))
    error = refused(answer, 400, 404, 422)
    assert error["type"]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/runs/..",
        "/v1/runs/%2e%2e",
        "/v1/runs/..%2f..%2fetc%2fpasswd",
        "/v1/runs/a%00b",
        "/v1/runs/%E2%80%AEevil",
        "/v1/runs/" + "a" * 300,
        "/v1/runs/..%5c..%5cwin/messages",
        "/v1/threads/..%2F..",
    ],
)
def test_path_traversal_in_ids(served: Served, path: str) -> None:
    refused(served.get(path), 404, 422)


def test_approvals_bodies(served: Served) -> None:
    done = served.post("/v1/runs", {"agent": "echo", "input": "x", "wait": True}).json()
    path = f"/v1/runs/{done['run_id']}/approvals"
    for body in ({}, {"decisions": []}, {"decisions": {"c": 1}}, {"decisions": {"c": {"ok": 1}}}):
        refused(served.post(path, body), 422)
    refused(served.post(path, {"decisions": {"c": True}}), 409)


def test_header_injection_in_the_token_header(served: Served) -> None:
    bare = httpx.Client(base_url=served.url, timeout=30)
    for value in (b"Bearer", b"Bearer \xe9\xe9", b"bearer x y z", b"x" * 10_000):
        refused(bare.get("/v1/runs", headers={"Authorization": value}), 401, 400, 431)
