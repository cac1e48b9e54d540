"""Images and files in runs on a real local Ray, against both local API servers: the requests
they receive carry the image, through a handoff, a tool that returns one, a checkpoint in a
file store (large parts kept once, by hash, outside the records), a resume and a dataset."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAIServer
from responses_server import FakeResponsesServer, RReply

import raygents as rg
from raygents.core.messages import ToolCall
from raygents.records import blobs

pytestmark = pytest.mark.timeout(180)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
BIG_PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(blobs.THRESHOLD + 1000)  # kept in the store
CHART = b"GIF89a" + os.urandom(blobs.THRESHOLD + 10)


def _url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


@rg.tool(num_cpus=0, needs_approval=True)
def draw_chart(ctx: rg.ToolContext, title: str) -> list[Any]:
    """Draw a chart (a person approves each call)."""
    return [f"chart {title}:", rg.ImagePart(data=CHART, media_type="image/gif")]


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _chat_images(body: dict[str, Any]) -> list[str]:
    return [
        part["image_url"]["url"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]


def _responses_images(body: dict[str, Any]) -> list[str]:
    out = []
    for item in body["input"]:
        content = item.get("content", item.get("output"))
        if isinstance(content, list):
            out += [p["image_url"] for p in content if p["type"] == "input_image"]
    return out


def test_an_image_goes_through_a_run_and_a_handoff_over_chat_completions(rt: None) -> None:
    def reply(body: dict[str, Any]) -> Any:
        if len(body["messages"]) == 2:  # (system and the user's message)
            return [ToolCall("h1", "transfer_to_parts_chat_expert", "{}")]
        return "a cat"

    with FakeOpenAIServer(reply) as server:
        model = rg.OpenAIChatModel("fake-vision", base_url=server.url)
        expert = rg.Agent("parts_chat_expert", "Describe.", model=model)
        triage = rg.Agent("parts_chat_triage", "Route.", handoffs=[expert], model=model)
        question = [
            {"type": "input_text", "text": "what is this?"},
            {"type": "input_image", "image_url": _url(PNG), "detail": "low"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        ]
        result = rg.run(triage, [{"role": "user", "content": question}])
    assert result.final_output == "a cat"
    first, after_handoff = server.requests
    for body in (first, after_handoff):
        assert _chat_images(body) == [_url(PNG), "https://example.com/cat.png"]
    user = first["messages"][1]["content"]
    assert user[0] == {"type": "text", "text": "what is this?"}
    assert user[1]["image_url"]["detail"] == "low"
    assert result.messages[0].parts[1] == rg.ImagePart(
        data=PNG, media_type="image/png", detail="low"
    )


def test_chat_completions_refuses_a_tool_image_by_name(rt: None) -> None:
    with FakeOpenAIServer([[ToolCall("c1", "snap", "{}")]]) as server:

        @rg.tool(num_cpus=0)
        def snap() -> rg.ImagePart:
            """Take a picture."""
            return rg.ImagePart(data=PNG, media_type="image/png")

        model = rg.OpenAIChatModel("fake-vision", base_url=server.url)
        agent = rg.Agent("parts_chat_snap", tools=[snap], model=model)
        with pytest.raises(rg.UserError, match=r"result of tool call 'c1'.*OpenAIResponsesModel"):
            rg.run(agent, "snap")
    assert len(server.requests) == 1  # the second request was never sent


@pytest.fixture
def file_store(own_raygents: None, rt: None, tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "store"
    rg.shutdown()
    rg.init(namespace=f"parts-{os.urandom(3).hex()}", store=f"file://{root}")
    yield root
    rg.shutdown()


def test_large_parts_are_kept_once_by_hash_and_come_back_after_a_resume(file_store: Path) -> None:
    def reply(body: dict[str, Any]) -> RReply:
        outputs = [i for i in body["input"] if i.get("type") == "function_call_output"]
        if not outputs:
            return RReply(tool_calls=(ToolCall("c1", "draw_chart", '{"title": "sales"}'),))
        if len(outputs) == 1:
            return RReply(tool_calls=(ToolCall("c2", "transfer_to_parts_expert", "{}"),))
        return RReply(text="sales go up")

    with FakeResponsesServer(reply) as server:
        model = rg.OpenAIResponsesModel("fake-vision", base_url=server.url)
        expert = rg.Agent("parts_expert", model=model)
        triage = rg.Agent("parts_triage", tools=[draw_chart], handoffs=[expert], model=model)
        question = rg.Message(
            "user", ["plot this:", rg.ImagePart(data=BIG_PNG, media_type="image/png")]
        )
        handle = rg.start(triage, [question, question])  # (the same image twice: kept once)
        with pytest.raises(rg.RunInterrupted):
            handle.result(timeout_s=60)
        _check_records(file_store, BIG_PNG)
        resumed = rg.resume(handle.run_id, agent=triage, approvals={"c1": True})
        result = resumed.result(timeout_s=60)
    assert result.final_output == "sales go up"
    first, after_resume, after_handoff = server.requests
    assert _responses_images(first) == [_url(BIG_PNG)] * 2
    chart = _url(CHART, "image/gif")
    assert _responses_images(after_resume) == [_url(BIG_PNG)] * 2 + [chart]
    assert _responses_images(after_handoff) == [_url(BIG_PNG)] * 2 + [chart]
    output = next(i for i in after_resume["input"] if i.get("type") == "function_call_output")
    assert output["output"][0] == {"type": "input_text", "text": "chart sales:"}
    _check_records(file_store, BIG_PNG, CHART)
    kept = result.messages[0].parts[1]
    assert isinstance(kept, rg.ImagePart) and kept.data is None
    assert kept.blob == "sha256:" + hashlib.sha256(BIG_PNG).hexdigest()


def _check_records(root: Path, *images: bytes) -> None:
    """Each image is in the store once, under its hash, and in no record."""
    kept = sorted(p.name for p in (root / "blobs" / "sha256").iterdir())
    assert kept == sorted(hashlib.sha256(i).hexdigest() for i in images)
    for path in (root / "runs").rglob("*"):
        if path.is_file():
            assert path.stat().st_size < blobs.THRESHOLD, path
            assert images[0][8:40] not in path.read_bytes()


def test_a_dataset_with_an_image_column(rt: None) -> None:
    import ray.data

    with FakeOpenAIServer(lambda body: f"seen {len(_chat_images(body))}") as server:
        model = rg.OpenAIChatModel("fake-vision", base_url=server.url)
        agent = rg.Agent("parts_data", model=model)
        rows = [
            {"id": 0, "input": "describe", "image": PNG},
            {"id": 1, "input": "describe", "image": "https://example.com/1.png"},
            {"id": 2, "input": "describe", "image": b"not an image"},
        ]
        data = ray.data.from_items(rows, override_num_blocks=1)  # (one batch, one actor)
        out = rg.data.map_agent(data, agent, image_column="image")
        got = sorted(out.take_all(), key=lambda row: row["id"])
    assert [r["status"] for r in got] == ["completed", "completed", "failed"], got[1]["error"]
    assert [r["output"] for r in got[:2]] == ["seen 1", "seen 1"]
    assert "not a PNG, JPEG, GIF or WebP" in got[2]["error"]
    sent = sorted(u for body in server.requests for u in _chat_images(body))
    assert sent == sorted([_url(PNG), "https://example.com/1.png"])


@rg.tool(num_cpus=0, needs_approval=True)
def look(ctx: rg.ToolContext, what: str) -> str:
    """Look closer (a person approves each call)."""
    return f"closer look at {what}"


@pytest.mark.timeout(400)
def test_a_run_with_a_large_image_resumes_on_another_driver(
    own_raygents: None, rt: None, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    def reply(body: dict[str, Any]) -> RReply:
        if not any(i.get("type") == "function_call_output" for i in body["input"]):
            return RReply(tool_calls=(ToolCall("c1", "look", '{"what": "the edge"}'),))
        return RReply(text="a cat, closer")

    import ray

    store, namespace = f"file://{tmp_path / 'store'}", f"parts-far-{os.urandom(3).hex()}"
    # the driver joins the session's Ray (with its RAY_AUTH_MODE, if ray.init set one)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "OPENAI_"))}
    address = ray.get_runtime_context().gcs_address
    driver = str(Path(__file__).parent / "parts_driver.py")
    with FakeResponsesServer(reply) as server:
        done = subprocess.run(
            [sys.executable, driver, address, store, server.url, namespace],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        started = json.loads(done.stdout.splitlines()[-1])
        image = bytes.fromhex(started["image"])
        assert (
            tmp_path / "store" / "blobs" / "sha256" / hashlib.sha256(image).hexdigest()
        ).exists()
        rg.shutdown()
        rg.init(namespace=namespace, store=store)
        model = rg.OpenAIResponsesModel("fake-vision", base_url=server.url)
        agent = rg.Agent("parts_far", tools=[look], model=model)
        result = rg.resume(started["run_id"], agent=agent, approvals={"c1": True}).result(
            timeout_s=60
        )
    assert result.final_output == "a cat, closer"
    first, after_resume = server.requests
    assert _responses_images(first) == _responses_images(after_resume) == [_url(image)]


def test_a_batch_job_over_items_with_images(rt: None) -> None:
    with FakeOpenAIServer(lambda body: f"seen {len(_chat_images(body))}") as server:
        model = rg.OpenAIChatModel("fake-vision", base_url=server.url)
        agent = rg.Agent("parts_batch", model=model)
        items = [
            [rg.Message("user", [f"item {i}", rg.ImagePart(data=PNG, media_type="image/png")])]
            for i in range(3)
        ]
        done = rg.run_batch(agent, items, job_id=f"parts-{os.urandom(3).hex()}")
    assert [i.output for i in done.items] == ["seen 1"] * 3
    assert all(_chat_images(body) == [_url(PNG)] for body in server.requests)
