"""The ``raygents`` command end to end, in subprocesses, against a private Ray head with a
detached namespace (``cli_head.py``): list, show, events, suspend, cancel, resume and approve, and
``runs`` / ``show`` from the store alone.

The commands run one after the other in one process of the module (``cli_runner.py``, which
calls what ``python -m raygents`` calls), each joining the head and leaving it as a process of
its own would; ``python -m raygents`` itself runs where a test follows a run's events and
where a namespace is missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from driver_process import driver_process, ready_json

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).parent
NAMESPACE = "cli-tests"


@dataclass
class Head:
    """The private head: its address, store, the environment that joins it and the process
    that runs the commands (``cli_runner.py``)."""

    address: str
    store: str
    env: dict[str, str]
    runner: subprocess.Popen[str]


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    store = f"file://{tmp_path_factory.mktemp('cli') / 'store'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "OPENAI_"))}
    env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(32).hex()}
    with (
        driver_process([str(HERE / "cli_head.py"), NAMESPACE, store], cwd=HERE, env=env) as proc,
        driver_process([str(HERE / "cli_runner.py")], cwd=HERE, env=env) as runner,
    ):
        yield Head(ready_json(proc, "the head")["address"], store, env, runner)


def cli(head: Head, *args: str, cluster: bool = True) -> subprocess.CompletedProcess[str]:
    """``raygents ARGS`` in the tests' directory (``cli_agents`` imports from it), joined to
    the head through ``$RAY_ADDRESS`` unless ``cluster`` is False: its exit status, stdout and
    stderr."""
    if cluster:
        args = (*args, "--namespace", NAMESPACE)
    runner = head.runner
    assert runner.stdin is not None and runner.stdout is not None
    request = {"args": list(args), "ray_address": head.address if cluster else None}
    runner.stdin.write(json.dumps(request) + "\n")
    runner.stdin.flush()
    for line in runner.stdout:
        if line.startswith("CLI_RESULT "):
            done = json.loads(line.removeprefix("CLI_RESULT "))
            return subprocess.CompletedProcess(
                ["raygents", *args], done["returncode"], done["stdout"], done["stderr"]
            )
    raise AssertionError(f"the command runner exited during raygents {' '.join(args)}")


def ok_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(done.stdout)


def statuses(head: Head, *args: str, cluster: bool = True) -> dict[str, str]:
    rows = ok_json(cli(head, "runs", "--json", *args, cluster=cluster))
    return {row["run_id"]: row["status"] for row in rows}


def test_runs_lists_every_run_as_a_table_or_json(head: Head) -> None:
    found = statuses(head)
    assert found["cli-done"] == "completed"
    assert found["cli-pending"] == "awaiting_approval"
    assert found["cli-paused"] == "suspended"
    assert statuses(head, "--status", "awaiting_approval") == {"cli-pending": "awaiting_approval"}
    assert len(statuses(head, "--limit", "2")) == 2
    assert statuses(head, "--agent", "nobody") == {}
    table = cli(head, "runs")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["RUN", "ID", "STATUS"]
    assert any(r.split()[:3] == ["cli-done", "completed", "banker"] for r in rows)


def test_runs_hides_agent_as_tool_children_unless_all(head: Head) -> None:
    top = ok_json(cli(head, "runs", "--json"))
    assert all("." not in row["run_id"] and "parent" not in row for row in top)
    every = ok_json(cli(head, "runs", "--all", "--json"))
    children = {row["run_id"]: row["parent"] for row in every if row["parent"] is not None}
    assert len(children) == 2 and set(children.values()) == {"cli-fan"}
    assert all(run_id.startswith("cli-fan.") for run_id in children)
    assert {row["run_id"] for row in every} - set(children) == {row["run_id"] for row in top}
    table = cli(head, "runs", "--all", "--agent", "banker")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:4] == ["RUN", "ID", "PARENT", "STATUS"]
    assert sorted(r.split()[1] for r in rows if r.startswith("cli-fan.")) == ["cli-fan"] * 2
    stored = ok_json(cli(head, "runs", "--all", "--json", "--store", head.store, cluster=False))
    parents = {row["run_id"]: row["parent"] for row in stored}
    assert {k: v for k, v in parents.items() if k.startswith("cli-fan.")} == children
    assert not any(
        k.startswith("cli-fan.") for k in statuses(head, "--store", head.store, cluster=False)
    )


def test_show_gives_a_runs_result_pending_calls_and_conversation(head: Head) -> None:
    done = ok_json(cli(head, "show", "cli-done", "--json"))
    assert (done["status"], done["output"], done["usage"]["requests"]) == (
        "completed",
        "hi there",
        1,
    )
    assert [m["role"] for m in done["messages"]] == ["user", "assistant"]
    text = cli(head, "show", "cli-pending")
    assert text.returncode == 0, text.stderr
    assert "status      awaiting_approval" in text.stdout
    assert "c_wire  banker: wire_money" in text.stdout
    missing = cli(head, "show", "no-such-run")
    assert missing.returncode == 1 and "not known" in missing.stderr


def test_show_tree_draws_handoffs_and_agent_as_tool_children(head: Head) -> None:
    tree = ok_json(cli(head, "show", "cli-fan", "--tree", "--json"))
    assert (tree["status"], tree["agent"], tree["handoffs"]) == ("completed", "clerk", ["clerk"])
    children = {c["call_id"]: c for c in tree["children"]}
    assert set(children) == {"c_a", "c_b"}
    assert {c["tool"] for c in children.values()} == {"ask_banker"}
    assert all(c["agent"] == "banker" and c["status"] == "completed" for c in children.values())
    assert (children["c_a"]["turns"], children["c_b"]["turns"]) == (1, 2)
    assert tree["tokens"] > 0  # (a completed child's usage is known while its records are)
    walls = [tree["wall_s"], *(c["wall_s"] for c in children.values())]
    assert all(isinstance(w, float) and w >= 0 for w in walls), walls
    assert all(c["wall_s"] <= tree["wall_s"] for c in children.values())
    text = cli(head, "show", "cli-fan", "--tree")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("cli-fan  completed  clerk  handoffs: -> clerk")
    assert lines[1].startswith("├─ ask_banker[c_a]  cli-fan.") and lines[2].startswith("└─ ")
    assert all(re.search(r"  wall \d+(\.\d+s|m\d\ds)$", line) for line in lines), lines


def test_events_of_an_ended_run_end_with_its_terminal_event(head: Head) -> None:
    done = cli(head, "events", "cli-done", "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events[0]["type"] == "agent_start" and events[-1]["type"] == "complete"
    assert events[-1]["output"] == "hi there"


def test_suspend_stops_a_running_run_with_a_checkpoint(head: Head) -> None:
    assert statuses(head)["cli-live"] == "running"
    env = dict(head.env, RAY_ADDRESS=head.address)
    argv = ["events", "cli-live", "--follow", "--json", "--namespace", NAMESPACE]
    follow = subprocess.Popen(
        [sys.executable, "-m", "raygents", *argv],
        cwd=HERE,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stdout is not None
        first = json.loads(follow.stdout.readline())  # (following before the suspend)
        assert first["run_id"] == "cli-live"
        suspended = ok_json(cli(head, "suspend", "cli-live", "--json"))
        # (read from the same buffer as the first line: communicate() reads the pipe itself,
        # and would miss the lines that readline() took into the buffer with the first)
        rest = follow.stdout.read()
        follow.wait(timeout=120)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(timeout=30)
    assert follow.returncode == 0
    events = [first, *(json.loads(line) for line in rest.splitlines())]
    seqs = [e["seq"] for e in events]  # (live, through the relay: numbered, none missed)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    last = events[-1]
    assert last["type"] == "suspended" and last["run_id"] == "cli-live"
    assert suspended["status"] == "suspended" and suspended["turns"] >= 1
    assert statuses(head)["cli-live"] == "suspended"
    again = cli(head, "suspend", "cli-live")
    assert again.returncode == 1 and "not running" in again.stderr


def test_cancel_stops_a_running_run_and_keeps_it_listed(head: Head) -> None:
    assert statuses(head)["cli-doomed"] == "running"
    cancelled = ok_json(cli(head, "cancel", "cli-doomed", "--json"))
    assert cancelled["status"] == "cancelled"
    assert statuses(head, "--status", "cancelled") == {"cli-doomed": "cancelled"}
    again = cli(head, "cancel", "cli-doomed")
    assert again.returncode == 1 and "not running" in again.stderr


def test_resume_runs_a_suspended_run_to_its_end(head: Head) -> None:
    resumed = ok_json(cli(head, "resume", "cli-paused", "--agent", "cli_agents:BANKER", "--json"))
    assert (resumed["status"], resumed["output"]) == ("completed", "counted to 6")
    done = cli(head, "resume", "cli-paused", "--agent", "cli_agents:BANKER")
    assert done.returncode == 1 and "already completed" in done.stderr


def test_approve_decides_the_pending_calls_and_resumes(head: Head) -> None:
    agent = ("--agent", "cli_agents:BANKER")
    wrong = cli(head, "approve", "cli-pending", *agent, "--approve", "c_other")
    assert wrong.returncode == 1 and "c_wire" in wrong.stderr
    assert statuses(head)["cli-pending"] == "awaiting_approval"
    approved = ok_json(cli(head, "approve", "cli-pending", *agent, "--all", "--wait", "--json"))
    assert (approved["status"], approved["output"]) == ("completed", "wired to alice")
    again = cli(head, "approve", "cli-pending", *agent, "--all")
    assert again.returncode == 1 and "not awaiting approval" in again.stderr


def test_runs_and_show_read_the_store_with_no_cluster(head: Head) -> None:
    found = statuses(head, "--store", head.store, cluster=False)
    assert found["cli-pending"] in ("awaiting_approval", "completed")
    shown = ok_json(cli(head, "show", "cli-live", "--store", head.store, "--json", cluster=False))
    assert shown["status"] == "suspended" and shown["source"] == "store"
    assert shown["messages"][0] == {"role": "user", "content": "count forever"}
    missing = cli(head, "show", "no-such-run", "--store", head.store, cluster=False)
    assert missing.returncode == 1 and "no records" in missing.stderr


def test_bad_usage_and_a_missing_namespace(head: Head) -> None:
    no_agent = cli(head, "resume", "cli-live")
    assert no_agent.returncode == 2 and "--agent" in no_agent.stderr
    bad_agent = cli(head, "resume", "cli-live", "--agent", "cli_agents:tick")
    assert bad_agent.returncode == 2 and "not a raygents Agent" in bad_agent.stderr
    env = dict(head.env, RAY_ADDRESS=head.address)
    other = subprocess.run(
        [sys.executable, "-m", "raygents", "runs", "--namespace", "nobody-here"],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert other.returncode == 1 and "no raygents coordinator" in other.stderr
