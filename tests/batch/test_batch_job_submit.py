"""The batch example as a Ray job: submitted to a private Ray head with a job server, stopped
midway (``stop_job``), submitted again with the same job id: every item completes once, and
every tool effect happens once per idempotency key.

The head runs in a subprocess this test starts and ends itself (by closing its stdin, then by
its pid); nothing here runs ``ray start`` or ``ray stop``.

The head has a Ray temp directory of its own: Ray's job server starts each driver at the
address it reads from its temp directory's current-cluster file, which in the shared default
directory names whichever cluster on the machine started last.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from driver_process import driver_process

ROOT = Path(__file__).resolve().parents[2]
ITEMS = 48

_HEAD = """
import sys
import ray
from ray.cluster_utils import Cluster
port, agent_port, temp_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
head = Cluster(initialize_head=True, head_node_args={
    "num_cpus": 2, "include_dashboard": True, "dashboard_host": "127.0.0.1",
    "dashboard_port": port, "dashboard_agent_listen_port": agent_port, "temp_dir": temp_dir})
ray._private.utils.write_ray_address(head.gcs_address, temp_dir)  # (what the job server reads)
print("READY", flush=True)
sys.stdin.read()
head.shutdown()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def job_server(tmp_path: Path) -> Iterator[Any]:
    """A JobSubmissionClient for a private Ray head (a subprocess of this test)."""
    pytest.importorskip("aiohttp")  # (the job server comes with ray[default])
    from ray.job_submission import JobSubmissionClient

    port = free_port()
    token = os.urandom(32).hex()  # (the head's own: its job server asks every request for it)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "OPENAI_"))}
    env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    env["RAY_JOB_STOP_WAIT_TIME_S"] = "60"  # (a stopped driver suspends its runs first)
    temp_dir = tempfile.mkdtemp(prefix="rg-head-")  # (short: Ray's socket paths live in it)
    args = ["-c", _HEAD, str(port), str(free_port()), temp_dir]  # (ports of its own)
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, temp_dir, ignore_errors=True)
        head = stack.enter_context(driver_process(args, cwd=tmp_path, env=env))
        assert head.stdout is not None and head.stdout.readline().strip() == "READY"
        client = None
        for _ in range(120):  # (the job server answers a little after ray.init returns)
            try:
                client = JobSubmissionClient(
                    f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}
                )
                break
            except Exception:
                time.sleep(0.5)
        assert client is not None, "the job server did not answer"
        yield client


def submit(client: Any, **options: Any) -> str:
    """Submit a job, waiting for the head's dashboard agent that takes jobs to come up."""
    for _ in range(240):
        try:
            return str(client.submit_job(**options))
        except RuntimeError as exc:
            if "No available agent" not in str(exc):
                raise
            time.sleep(0.5)
    raise AssertionError("the job server never took the job")


def wait_for(client: Any, job: str, statuses: set[str]) -> str:
    while (status := str(client.get_job_status(job).value)) not in statuses:
        time.sleep(0.5)
    return status


def lines(folder: Path) -> list[dict[str, Any]]:
    if not folder.exists():
        return []
    return [
        json.loads(text)
        for path in sorted(folder.iterdir())
        for text in path.read_text().splitlines()
        if text.endswith("}")
    ]


@pytest.mark.timeout(600)
def test_a_stopped_job_submitted_again_completes_each_item_once(
    job_server: Any, tmp_path: Path
) -> None:
    tickets = tmp_path / "tickets.jsonl"
    words = ("refund", "crash", "password", "hello")
    tickets.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "text": f"{words[i % 4]} {i}"}) + "\n" for i in range(ITEMS)
        )
    )
    out, effects = tmp_path / "out", tmp_path / "effects.jsonl"
    entrypoint = (
        f"{sys.executable} {ROOT / 'examples/batch_job.py'} --input {tickets} "
        f"--job-id submitted --output {out} --concurrency 4"
    )
    env = {"RAYGENTS_STORE": f"file://{tmp_path / 'store'}", "BATCH_JOB_EFFECTS": str(effects)}

    first = submit(
        job_server,
        entrypoint=entrypoint,
        runtime_env={"env_vars": {**env, "BATCH_JOB_TOOL_S": "0.4"}},
    )
    while sum(1 for x in lines(out) if x["status"] == "completed") < 8:
        status = str(job_server.get_job_status(first).value)
        assert status in ("PENDING", "RUNNING"), job_server.get_job_logs(first)[-3000:]
        time.sleep(0.2)
    job_server.stop_job(first)
    assert wait_for(job_server, first, {"STOPPED", "FAILED", "SUCCEEDED"}) == "STOPPED"
    done_first = {x["index"] for x in lines(out) if x["status"] == "completed"}
    assert len(done_first) < ITEMS, "the job ended before it was stopped"

    second = submit(job_server, entrypoint=entrypoint, runtime_env={"env_vars": env})
    status = wait_for(job_server, second, {"STOPPED", "FAILED", "SUCCEEDED"})
    logs = job_server.get_job_logs(second)
    assert status == "SUCCEEDED", logs[-3000:]
    summary = logs[logs.index(f"job submitted: {ITEMS} completed (") :].split()
    skipped = int(summary[4].strip("("))  # ("job submitted: 48 completed (11 skipped), ...")
    assert skipped >= len(done_first), "an item the stopped job completed ran again"

    completed = Counter(x["index"] for x in lines(out) if x["status"] == "completed")
    assert sorted(completed) == list(range(ITEMS))
    assert set(completed.values()) == {1}, "an item completed twice"
    keys = Counter(json.loads(text)["key"] for text in effects.read_text().splitlines())
    assert sorted(keys) == sorted(f"submitted.{i}:tag" for i in range(ITEMS))
    assert set(keys.values()) == {1}, "a tool effect happened twice"
