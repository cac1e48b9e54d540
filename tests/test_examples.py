"""The examples run (offline) as a user would run them: the scripts join one local Ray
instance the module starts (``RAY_ADDRESS``, as a script joins a cluster; the head of
:mod:`test_docs_snippets`), each once nothing of the one before is left on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs_snippets import RayHead, head

ROOT = Path(__file__).resolve().parent.parent
__all__ = ["head"]  # (the head fixture, one of this module's own)


def environment(tmp_path: Path, head: RayHead | None = None, **env: str) -> dict[str, str]:
    """An example's environment: a store of the test's own; the module's Ray instance with
    ``head``, else none (the example starts a local instance itself)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAY_ADDRESS"))}
    if head is not None:
        clean = dict(head.env)
    return clean | {"RAYGENTS_STORE": f"file://{tmp_path / 'store'}"} | env


def run(
    args: list[str], tmp_path: Path, head: RayHead | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from the repository's root in :func:`environment`."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=environment(tmp_path, head, **env),
        capture_output=True,
        text=True,
        timeout=200,
    )


@pytest.mark.timeout(420)
def test_suspend_in_one_process_and_resume_in_another(tmp_path: Path, head: RayHead) -> None:
    head.reset()
    started = run(["examples/suspend_resume.py", "start"], tmp_path, head)
    assert started.returncode == 0, started.stderr[-3000:]
    assert "suspended after" in started.stdout
    run_id = started.stdout.split("resume ")[-1].strip()
    head.reset()  # (the resuming process finds nothing of the first but its store)
    resumed = run(["examples/suspend_resume.py", "resume", run_id], tmp_path, head)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.strip() == (
        "summary: page 1: 7 new customers; page 2: 14 new customers; "
        "page 3: 21 new customers; page 4: 28 new customers"
    )


def test_the_openai_example_explains_itself_without_an_endpoint(tmp_path: Path) -> None:
    done = run(["examples/openai_compatible.py"], tmp_path)
    assert done.returncode == 0 and "set OPENAI_API_KEY" in done.stdout


@pytest.mark.timeout(300)
def test_the_openai_example_against_a_local_compatible_server(
    tmp_path: Path, head: RayHead
) -> None:
    from openai_server import FakeOpenAIServer

    replies = [
        [
            {"name": "count_primes", "arguments": '{"limit": 2000000}', "id": "c1"},
            {"name": "count_primes", "arguments": '{"limit": 3000000}', "id": "c2"},
        ],
        "There are 148933 primes below 2,000,000 and 216816 below 3,000,000.",
    ]
    with FakeOpenAIServer(replies) as server:
        head.reset()
        done = run(["examples/openai_compatible.py"], tmp_path, head, OPENAI_BASE_URL=server.url)
        bodies = server.requests
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[count_primes -> 148933]" in done.stdout and "[count_primes -> 216816]" in done.stdout
    assert "There are 148933 primes" in done.stdout
    assert bodies[0]["stream"] is True and bodies[0]["tools"][0]["function"]["strict"] is True
    assert [m["role"] for m in bodies[1]["messages"]][-2:] == ["tool", "tool"]


@pytest.mark.timeout(300)
def test_raygents_serve_serves_the_example_agents_until_interrupted(
    tmp_path: Path, head: RayHead
) -> None:
    import signal
    import socket
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # (it joins the module's instance, as on a cluster)
    env = environment(tmp_path, head, RAYGENTS_API_TOKEN="example-token-0123456789")
    command = [sys.executable, "-m", "raygents", "serve", "examples.serve_app:AGENTS"]
    head.reset()
    server = subprocess.Popen(
        [*command, "--port", str(port), "--namespace", "serve-example"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # (as a parent that ignores Ctrl-C leaves it: the server must still stop on it)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": "Bearer example-token-0123456789"}
        deadline = time.monotonic() + 200
        while True:
            assert server.poll() is None, server.communicate()[1][-3000:]
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "raygents serve did not come up"
            time.sleep(1)
        body = {"agent": "ops", "input": "restart web", "wait": True}
        run = httpx.post(f"{url}/v1/runs", json=body, headers=headers, timeout=120).json()
        assert run["status"] == "awaiting_approval"
        decided = {"decisions": {"restart-web": True}}
        approve = f"{url}/v1/runs/{run['run_id']}/approvals"
        assert httpx.post(approve, json=decided, headers=headers, timeout=60).status_code == 200
        assert httpx.get(f"{url}/v1/runs", timeout=10).status_code == 401
    finally:
        server.send_signal(signal.SIGINT)
        try:
            out, err = server.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()  # (never left running)
            server.communicate()
            raise
    assert server.returncode == 0, err[-3000:]
    assert f"serving on http://127.0.0.1:{port}" in out
