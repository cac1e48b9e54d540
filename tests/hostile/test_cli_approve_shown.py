"""The ``raygents`` command on a running namespace (in this process: joining and leaving the
cluster is left out), against runs whose tool results, model output and tool arguments are
hostile: ``show``, ``events``, ``runs`` and ``approve`` make them visible, ``approve`` shows
each call it decides, whole, and refuses (deciding nothing) when the pending calls changed
between when they were read and shown and when the run is resumed."""

from __future__ import annotations

import io
import json
import unicodedata
from typing import Any

import pytest

import raygents as rg
from raygents.cli import runs as cli_runs
from raygents.cli.main import main
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.timeout(300)

ESCAPES = "\x1b[2K\r\x1b]0;pwned\x07\x1b[31m\x9b2J"
BIDI_ZW = "\u202e\u2066\u200f\u061c\u200b\u2060\ufeff"
HOSTILE = f"page {ESCAPES} {BIDI_ZW} end\nsecond line"
FORGED = '{"to": "mallory", "amount": 1000000, "memo":\n  "c_fake  banker: pay(alice, 10)"}'
"""Tool arguments (JSON: a newline between tokens) that would draw a second pending call."""
MODULE = __name__.rpartition(".")[2]


def _raw(text: str) -> list[str]:
    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


@rg.tool(num_cpus=0)
def fetch() -> str:
    """Fetch a page."""
    return HOSTILE


@rg.tool(num_cpus=0, needs_approval=True)
def pay(to: str, amount: int, memo: str) -> str:
    """Pay someone."""
    return f"paid {amount} to {to}"


def _hostile_reply(req: rg.ModelRequest) -> rg.ModelResponse:
    """Fetches a hostile page, then asks to pay with arguments that draw a line of their own."""
    results = [m for m in req.messages if m.role == "tool"]
    if not results:
        return calls(call("fetch", {}, id=f"c_fetch{ESCAPES}"))
    if len(results) == 1:  # (says the page's words as it asks)
        asks = rg.Message("assistant", HOSTILE, tool_calls=(call("pay", FORGED, id="c_pay"),))
        return rg.ModelResponse(asks, "tool_calls")
    return text(f"done {ESCAPES}")


ALICE = '{"to": "alice", "amount": 10, "memo": "lunch"}'
MALLORY = '{"to": "mallory", "amount": 1000000, "memo": "lunch"}'


def _twice_reply(req: rg.ModelRequest) -> rg.ModelResponse:
    """Pays alice 10, then mallory 1,000,000 (under the same call id: raygents renames it)."""
    results = [m for m in req.messages if m.role == "tool"]
    if not results:
        return calls(call("pay", ALICE, id="c_pay"))
    if len(results) == 1:
        return calls(call("pay", MALLORY, id="c_pay"))
    return text("paid both")


HOSTILE_BANKER = rg.Agent(
    "banker", tools=[fetch, pay], model=FunctionModel(_hostile_reply), max_turns=10
)
TWICE_BANKER = rg.Agent("teller", tools=[pay], model=FunctionModel(_twice_reply), max_turns=10)


@pytest.fixture
def joined(rt: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command runs on this process's namespace: nothing to join, nothing to leave."""
    monkeypatch.setattr(cli_runs, "connect", lambda address, namespace: None)
    monkeypatch.setattr(cli_runs, "disconnect", lambda: None)


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def _awaiting(agent: rg.Agent, run_id: str) -> None:
    with pytest.raises(rg.RunInterrupted):
        rg.start(agent, "pay", run_id=run_id).result(timeout_s=120)


def test_every_command_shows_a_hostile_run_without_raw_escapes(joined: None) -> None:
    _awaiting(HOSTILE_BANKER, "hcli-evil")
    for argv in (
        ["show", "hcli-evil"],
        ["show", "hcli-evil", "--tree"],
        ["events", "hcli-evil"],
        ["runs", "--all"],
    ):
        code, shown = _cli(*argv)
        assert code == 0, shown
        assert _raw(shown) == [], (argv, shown)
    _, shown = _cli("show", "hcli-evil")
    assert "\\x1b]0;pwned\\x07" in shown and "\\u202e" in shown
    pending = [line for line in shown.splitlines() if "c_fake" in line]
    assert len(pending) == 2, "the pending call and its message: one line each"
    assert all("mallory" in line and "c_pay" in line for line in pending), pending

    code, shown = _cli("events", "hcli-evil", "--json")
    assert code == 0 and _raw(shown) == [], shown
    events = [json.loads(line) for line in shown.splitlines()]
    assert any(e.get("result") == HOSTILE for e in events), "--json stays exact"

    code, shown = _cli(
        "approve", "hcli-evil", "--agent", f"{MODULE}:HOSTILE_BANKER", "--deny", "c_pay"
    )
    assert code == 0, shown
    assert _raw(shown) == [], shown
    lines = shown.splitlines()
    assert lines[0] == "run hcli-evil: approving 0 and denying 1 pending call(s):"
    assert lines[1].startswith("  deny     c_pay  banker: pay(") and "mallory" in lines[1]
    assert "c_fake" in lines[1] and '\\n  "c_fake' in lines[1], "the whole call, on one line"
    assert rg.attach("hcli-evil").status() == "completed"


def test_approve_all_refuses_pending_calls_that_changed_since_they_were_shown(
    joined: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _awaiting(TWICE_BANKER, "hcli-race")
    read = cli_runs._newest_state

    def read_then_changed(run_id: str) -> Any:
        """What the command reads and shows; then, before it decides, the run moves on to
        its next call (alice's 10 approved elsewhere: mallory's 1,000,000 waits)."""
        shown = read(run_id)
        with pytest.raises(rg.RunInterrupted):
            rg.resume(run_id, agent=TWICE_BANKER, approvals={"c_pay": True}).result(timeout_s=120)
        return shown

    monkeypatch.setattr(cli_runs, "_newest_state", read_then_changed)
    code, shown = _approve("hcli-race", "--all")
    err = capsys.readouterr().err
    assert code == 1, (shown, err)
    assert f"approve  c_pay  teller: pay({ALICE})" in shown and "mallory" not in shown, shown
    assert "changed since they were read" in err and "nothing was decided" in err, err
    state = read("hcli-race")
    assert rg.attach("hcli-race").status() == "awaiting_approval", "nothing was approved"
    assert [p.arguments for p in state.pending] == [MALLORY]
    assert [m.content for m in state.messages if m.role == "tool"] == ["paid 10 to alice"]

    def read_other_arguments(run_id: str) -> Any:
        """The pending call as read and shown has alice's arguments, the run's has
        mallory's under the same id (a record rewritten in a store with no key)."""
        state = read(run_id)
        return state.evolve(
            pending=tuple(p.model_copy(update={"arguments": ALICE}) for p in state.pending)
        )

    monkeypatch.setattr(cli_runs, "_newest_state", read_other_arguments)
    code, shown = _approve("hcli-race", "--all")
    err = capsys.readouterr().err
    assert code == 1, (shown, err)
    assert "changed since they were read" in err, err
    assert rg.attach("hcli-race").status() == "awaiting_approval", "mallory was not approved"

    monkeypatch.setattr(cli_runs, "_newest_state", read)
    code, shown = _approve("hcli-race", "--deny", state.pending[0].call_id)
    assert code == 0, shown
    assert f"deny     {state.pending[0].call_id}  teller: pay({MALLORY})" in shown, shown
    assert rg.attach("hcli-race").status() == "completed"


def _approve(run_id: str, *decisions: str) -> tuple[int, str]:
    return _cli("approve", run_id, "--agent", f"{MODULE}:TWICE_BANKER", *decisions)
