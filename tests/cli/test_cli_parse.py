"""The ``raygents`` command without Ray: its arguments and exit status on bad usage, how it
prints tables, details and events, ``--agent MODULE:ATTR``, and ``--store`` reading records
written to an in-process store."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from raygents.cli.main import main, parser
from raygents.cli.output import (
    RUN_COLUMNS,
    detail,
    render_detail,
    render_event,
    render_table,
    render_tree,
    run_row,
    tree_node,
    usage_text,
    wall_seconds,
    wall_text,
)
from raygents.cli.runs import UsageError, load_agent
from raygents.core.approvals import PendingApproval
from raygents.core.envelope import RunState
from raygents.core.events import RunEvent
from raygents.core.messages import Message, ToolCall, Usage
from raygents.records import checkpoint
from raygents.stores.open import open_store


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nope"],
        ["runs", "--status", "sleeping"],
        ["runs", "--limit", "0"],
        ["runs", "--limit", "many"],
        ["show"],
        ["show", "bad/id"],
        ["resume", "r1"],
        ["approve", "r1"],
        ["suspend", "r1", "--timeout", "-1"],
    ],
)
def test_bad_usage_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parser().parse_args(argv)
    assert info.value.code == 2
    assert "usage: raygents" in capsys.readouterr().err


def test_every_subcommand_takes_the_common_options() -> None:
    for argv in (
        ["runs"],
        ["show", "r1"],
        ["suspend", "r1"],
        ["resume", "r1", "--agent", "m:a", "--wait"],
        ["approve", "r1", "--agent", "m:a", "--approve", "c1", "--deny", "c2", "--all"],
        ["events", "r1", "--follow"],
    ):
        args = parser().parse_args([*argv, "--address", "h:1", "--namespace", "ns", "--json"])
        assert (args.address, args.namespace, args.json) == ("h:1", "ns", True)
    args = parser().parse_args(
        ["approve", "r1", "--agent", "m:a", "--approve", "a", "--approve", "b"]
    )
    assert args.approve == ["a", "b"] and args.deny == [] and not args.all


def test_store_and_address_together_is_bad_usage(tmp_path: Path) -> None:
    store = f"file://{tmp_path}"
    assert main(["runs", "--store", store, "--address", "h:1"], out=io.StringIO()) == 2


def _write_run(url: str, run_id: str, status: str, **fields: object) -> None:
    """Records of a run as an agent actor writes them: a running one, then one with status."""
    store = open_store(url)
    state = RunState(run_id=run_id, agent_name="banker", messages=(Message("user", "hi"),))
    for step in ("running", status):
        if step != "running":
            state = state.evolve(**fields)
        state, record = checkpoint.make_record(state, step)  # type: ignore[arg-type]
        store.put(checkpoint.key_for(run_id, record["seq"]), checkpoint.encode(record))


def test_runs_and_show_read_a_store_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAYGENTS_CHECKPOINT_KEY", raising=False)
    url = f"memory://cli-{os.urandom(4).hex()}"
    pending = PendingApproval(call_id="c1", agent_name="banker", tool_name="pay", arguments="{}")
    call = Message("assistant", tool_calls=[ToolCall(id="c1", name="pay", arguments="{}")])
    _write_run(
        url,
        "r-wait",
        "awaiting_approval",
        messages=(Message("user", "hi"), call),
        pending=(pending,),
        turns=1,
        usage=Usage(7, 3, requests=1),
    )
    _write_run(url, "r-stop", "suspended", turns=2)
    out = io.StringIO()
    assert main(["runs", "--store", url, "--json"], out=out) == 0
    rows = {row["run_id"]: row for row in json.loads(out.getvalue())}
    assert {k: (r["status"], r["turns"]) for k, r in rows.items()} == {
        "r-wait": ("awaiting_approval", 1),
        "r-stop": ("suspended", 2),
    }
    out = io.StringIO()
    assert main(["runs", "--store", url, "--status", "suspended", "--json"], out=out) == 0
    assert [row["run_id"] for row in json.loads(out.getvalue())] == ["r-stop"]
    out = io.StringIO()
    assert main(["show", "r-wait", "--store", url, "--json"], out=out) == 0
    doc = json.loads(out.getvalue())
    assert doc["pending"][0]["call_id"] == "c1" and doc["usage"]["input_tokens"] == 7
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant"]
    out = io.StringIO()
    assert main(["show", "r-gone", "--store", url], out=out) == 1


def test_the_run_table_is_aligned_and_cuts_long_cells() -> None:
    rows = [
        run_row("r1", "completed", "triage", 3, 0.0, None),
        run_row("run-2", "failed", "writer", 12, 1_700_000_000.0, "boom " * 40),
    ]
    lines = render_table(rows, RUN_COLUMNS).splitlines()
    assert lines[0].split() == ["RUN", "ID", "STATUS", "AGENT", "TURNS", "UPDATED", "LAST", "ERROR"]
    assert lines[1].split() == ["r1", "completed", "triage", "3", "-", "-"]
    assert "2023-11-14T22:13:20Z" in lines[2] and lines[2].endswith("...")
    assert lines[1].index("completed") == lines[2].index("failed")


def test_show_text_lists_pending_calls_and_the_conversations_last_messages() -> None:
    pending = [PendingApproval(call_id="c1", agent_name="a", tool_name="pay", arguments='{"n":1}')]
    messages = [Message("user", f"m{i}") for i in range(30)]
    doc = detail(
        "r1", status="awaiting_approval", agent="a", turns=1, pending=pending, messages=messages
    )
    text = render_detail(doc)
    assert '  c1  a: pay({"n":1})' in text
    assert "conversation  (30 messages)" in text and "10 earlier messages" in text
    assert "m29" in text and "m9\n" not in text
    few = render_detail({**doc, "messages": doc["messages"][:4]}, last=6)
    assert "earlier messages" not in few and all(f"user       m{i}" in few for i in range(4))
    assert "conversation  (not kept)" in render_detail(
        detail("r1", status="completed", agent="a", turns=1)
    )


def test_usage_and_events_in_one_line() -> None:
    assert usage_text(Usage(10, 5, requests=2).model_dump()) == (
        "2 requests, 10 input + 5 output = 15 tokens"
    )
    assert usage_text(None) == "-"
    start = RunEvent(
        type="tool_start", run_id="r", agent_name="a", tool_name="t", call_id="c", arguments="{}"
    )
    assert render_event(start) == "tool_start   a              t({}) [c]"
    checkpointed = RunEvent(type="checkpoint", run_id="r", agent_name="a", data={"seq": 4})
    assert render_event(checkpointed).endswith("seq 4")
    data = {"policy": "Compaction", "tokens_before": 9000, "tokens_after": 1200}
    compacted = RunEvent(type="compacted", run_id="r", agent_name="a", data=data)
    assert render_event(compacted).endswith("Compaction: 9000 -> 1200 tokens")


def test_live_events_in_one_line_with_their_seq_and_path() -> None:
    delta = RunEvent(
        type="llm_delta", run_id="r", agent_name="a", delta="two\nwords\x1b[2J", seq=12
    )
    assert render_event(delta) == "    12 llm_delta    a              two words\\x1b[2J"
    lagged = RunEvent(type="lagged", run_id="r", agent_name="a", data={"missed": [3, 9]})
    assert render_event(lagged) == "lagged       a              missed [3, 9]"
    child = RunEvent(
        type="handoff", run_id="r.c", agent_name="b", to_agent="c", path=("ask/c_1",), seq=7
    )
    assert render_event(child) == "     7 handoff      b              -> c  (in ask/c_1)"


def test_load_agent_imports_module_attr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cli_parse_agents.py").write_text(
        "import raygents as rg\nTRIAGE = rg.Agent('triage')\nNOT_AN_AGENT = 3\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    assert load_agent("cli_parse_agents:TRIAGE").name == "triage"
    for spec, why in [
        ("cli_parse_agents", "MODULE:ATTR"),
        ("cli_parse_agents:MISSING", "cannot import"),
        ("no_such_module_here:X", "cannot import"),
        ("cli_parse_agents:NOT_AN_AGENT", "not a raygents Agent"),
    ]:
        with pytest.raises(UsageError, match=why):
            load_agent(spec)


def test_the_tree_draws_children_below_their_parent() -> None:
    def node(
        run_id: str, *children: dict[str, object], wall_s: float | None = None, **via: str
    ) -> dict[str, object]:
        doc = detail(run_id, status="completed", agent="a", turns=1, usage=Usage(2, 1))
        return {**via, **tree_node(doc, wall_s), "children": list(children)}

    leaf = node("r.3", tool="t", call_id="c3", wall_s=0.25)
    first = node("r.1", leaf, tool="t", call_id="c1", wall_s=75.0)
    tree = node("r", first, node("r.2", tool="t", call_id="c2"), wall_s=12.34)
    tree["handoffs"] = ["b"]
    assert render_tree(tree).splitlines() == [
        "r  completed  a  handoffs: -> b  turns 1  tokens 3  wall 12.3s",
        "├─ t[c1]  r.1  completed  a  handoffs: -  turns 1  tokens 3  wall 1m15s",
        "│  └─ t[c3]  r.3  completed  a  handoffs: -  turns 1  tokens 3  wall 0.25s",
        "└─ t[c2]  r.2  completed  a  handoffs: -  turns 1  tokens 3  wall -",
    ]
    assert tree_node(detail("r", status="completed", agent="a", turns=1))["tokens"] is None
    assert json.loads(json.dumps(tree))["wall_s"] == 12.34


@pytest.mark.parametrize(
    ("status", "started_at", "updated_at", "wall_s"),
    [
        ("completed", 100.0, 103.5, 3.5),  # ended: from its start to its end
        ("suspended", 100.0, 104.0, 4.0),  # stopped: to when it stopped
        ("running", 100.0, 101.0, 10.0),  # running: to now
        ("pending", 100.0, 100.0, 10.0),
        ("completed", None, 103.5, None),  # when it started is not known
        ("failed", 100.0, 99.0, 0.0),  # (clocks of two machines: never below zero)
    ],
)
def test_a_runs_wall_time(
    status: str, started_at: float | None, updated_at: float, wall_s: float | None
) -> None:
    assert wall_seconds(status, started_at, updated_at, now=110.0) == wall_s


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "-"),
        (0.0, "0.00s"),
        (9.994, "9.99s"),
        (42.25, "42.2s"),
        (61, "1m01s"),
        (7300, "2h01m"),
    ],
)
def test_wall_times_read_in_their_unit(seconds: float | None, shown: str) -> None:
    assert wall_text(seconds) == shown
