"""``raygents history``, ``fork`` and ``replay`` end to end, in subprocesses, against a private
Ray head (``cli_head.py``), on the cluster and from the store alone."""

from __future__ import annotations

import json

import pytest
from test_cli_commands import Head, cli, head, ok_json

pytestmark = pytest.mark.timeout(300)
__all__ = ["head"]  # (the head fixture, one of this module's own)


def test_history_lists_a_runs_checkpoints_on_the_cluster_and_from_the_store(head: Head) -> None:
    rows = ok_json(cli(head, "history", "cli-pending", "--json"))
    assert [r["reason"] for r in rows] == ["interrupt"]
    assert rows[0]["last"] == "assistant: calls wire_money" and rows[0]["agent"] == "banker"
    stored = ok_json(
        cli(head, "history", "cli-pending", "--store", head.store, "--json", cluster=False)
    )
    assert stored == rows
    table = cli(head, "history", "cli-done", "--store", head.store, cluster=False)
    assert table.returncode == 0, table.stderr
    header, line = table.stdout.splitlines()
    assert header.split() == ["SEQ", "TURN", "AGENT", "AT", "REASON", "MESSAGES", "LAST"]
    assert " final " in line and "assistant: hi there" in line
    missing = cli(head, "history", "no-such-run", "--store", head.store, cluster=False)
    assert missing.returncode == 1 and "no checkpoint of run 'no-such-run'" in missing.stderr


def test_fork_asks_a_completed_run_again(head: Head) -> None:
    done = cli(
        head,
        "fork",
        "cli-done",
        "--agent",
        "cli_agents:BANKER",
        "--input",
        "and again?",
        "--run-id",
        "cli-forked",
        "--json",
    )
    shown = ok_json(done)
    assert (shown["run_id"], shown["status"]) == ("cli-forked", "completed")
    assert [m["content"] for m in shown["messages"] if m["role"] == "user"] == [
        "hello",
        "and again?",
    ]
    bad = cli(head, "fork", "cli-done", "--agent", "cli_agents:BANKER", "--at", "7")
    assert bad.returncode == 1 and "has no checkpoint 7" in bad.stderr


def test_replay_checks_runs_against_new_code(head: Head) -> None:
    same = cli(
        head,
        "replay",
        "cli-done",
        "cli-pending",
        "--agent",
        "cli_agents:BANKER",
        "--store",
        head.store,
        cluster=False,
    )
    assert same.returncode == 0, same.stdout + same.stderr
    assert [line.split(":")[0:2] for line in same.stdout.splitlines()] == [
        ["cli-done", " ok (2 messages replayed)"],
        ["cli-pending", " ok (2 messages replayed)"],
    ]
    changed = cli(
        head, "replay", "cli-done", "cli-pending", "--agent", "cli_agents:BANKER_NO_WIRE", "--json"
    )
    assert changed.returncode == 1, changed.stderr
    done, pending = json.loads(changed.stdout)
    assert done["ok"] and not pending["ok"]
    assert "unknown tool 'wire_money'" in pending["got"] and pending["turn"] == 1
