"""The ``raygents`` command shows what runs and stores hold without letting it drive the
operator's terminal: control characters, ANSI and OSC sequences, bidi controls and zero-width
characters are made visible in every command, no table row or pending call can be forged
by a newline or a carriage return, and ``--json`` stays exact."""

from __future__ import annotations

import io
import json
import time
import unicodedata
from pathlib import Path

import pytest

from raygents.cli.main import main
from raygents.cli.terminal import json_text, visible
from raygents.core.approvals import PendingApproval
from raygents.core.envelope import RunState
from raygents.core.messages import Message, ToolCall
from raygents.records import checkpoint, codec
from raygents.records.keptresult import done_marker
from raygents.records.runinfo import RunInfo, RunSummary
from raygents.stores.open import open_store

ESCAPES = "\x1b[2K\r\x1b]0;pwned\x07\x1b[31m\x9b2J\x7f\x00"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff\u00ad\U000e0041"
HOSTILE = f"page {ESCAPES} {BIDI} {ZERO_WIDTH} end\nsecond line"
FORGED = (
    '{"to": "mallory", "amount": 1000000}\n  c_fake  banker: pay({"to": "alice", "amount": 10})'
)
"""Arguments whose newline would draw a second, harmless-looking pending call."""


def _raw(text: str) -> list[str]:
    """The characters of ``text`` that a terminal would act on or hide (a newline aside)."""
    return [
        c for c in text if c != "\n" and (unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp"))
    ]


def _awaiting(url: str, run_id: str) -> None:
    """An awaiting-approval run whose conversation, agent name and pending call are hostile."""
    store = open_store(url)
    call = ToolCall(id="c_pay", name="pay", arguments=FORGED)
    messages = (
        Message("user", "pay alice"),
        Message("assistant", f"sure {ESCAPES}", tool_calls=(call,)),
        Message("tool", HOSTILE, tool_call_id=f"c_x{BIDI}"),
    )
    pending = PendingApproval(
        call_id="c_pay", agent_name="banker", tool_name="pay", arguments=FORGED
    )
    state = RunState(
        run_id=run_id, agent_name=f"banker{ESCAPES}", messages=messages, pending=(pending,)
    )
    for step in ("running", "awaiting_approval"):
        state, record = checkpoint.make_record(state, step)  # type: ignore[arg-type]
        store.put(checkpoint.key_for(run_id, record["seq"]), checkpoint.encode(record))


def _failed(url: str, run_id: str, at: float) -> None:
    store = open_store(url)
    state = RunState(run_id=run_id, agent_name=f"agent{BIDI}", messages=(Message("user", "hi"),))
    state, record = checkpoint.make_record(state, "failed", error=HOSTILE)
    record["at"] = at
    store.put(checkpoint.key_for(run_id, record["seq"]), checkpoint.encode(record))


def _completed(url: str, run_id: str, at: float) -> None:
    result = RunSummary(
        final_output=HOSTILE,
        messages=(Message("user", "go"), Message("assistant", HOSTILE)),
        usage=None,
        turns=1,
        agent_name=f"finisher{ESCAPES}",
    )
    done = done_marker(RunInfo(run_id, "completed", f"finisher{ESCAPES}", 1, seq=1), 1, result)
    open_store(url).put(f"runs/{run_id}/done.1", codec.encode({**done, "at": at}))


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


# --- the one function ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, ünïcode, 日本語 and emoji 🙂", "plain text, ünïcode, 日本語 and emoji 🙂"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
        ("a\rb\tc\x00d\x7fe", "a\\rb\\tc\\x00d\\x7fe"),
        ("\x9b2J\x9d8;;x\x9c", "\\x9b2J\\x9d8;;x\\x9c"),
        ("\u202etxt.exe\u202c", "\\u202etxt.exe\\u202c"),
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),
        ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),
        ("a\u200bb\u200cc\u200dd\u2060e\ufefff", "a\\u200bb\\u200cc\\u200dd\\u2060e\\ufefff"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("lone \ud800 surrogate", "lone \\ud800 surrogate"),
        ("one\ntwo", "one\\ntwo"),
    ],
)  # fmt: skip
def test_visible_escapes_what_a_terminal_would_act_on_or_hide(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_visible_keeps_newlines_only_where_the_text_may_span_lines() -> None:
    assert visible("one\ntwo\r\nthree\rfour", lines=True) == "one\ntwo\nthree\\rfour"
    assert visible(HOSTILE, lines=True).count("\n") == 1
    assert _raw(visible(HOSTILE, lines=True)) == []


def test_json_text_is_exact_and_shows_nothing_raw() -> None:
    value = {"a": HOSTILE, "b": [FORGED, "日本語 🙂"], "c": "lone \ud800"}
    text = json_text(value)
    assert json.loads(text) == value
    assert "\n" not in text and _raw(text) == []
    assert "日本語 🙂" in text, "readable text stays readable"


# --- each command ---------------------------------------------------------------------------
def test_show_from_the_store_shows_no_raw_escapes_and_no_forged_pending_call(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path}"
    _awaiting(url, "r-evil")
    code, text = _cli("show", "r-evil", "--store", url)
    assert code == 0, text
    assert _raw(text) == [], text
    assert "\\x1b[2K" in text and "\\u202e" in text and "\\u200b" in text
    lines = text.splitlines()
    start = lines.index("pending approvals")
    block = lines[start + 1 : lines.index(next(x for x in lines if x.startswith("conversation")))]
    assert len(block) == 1, "one line per pending call, whatever its arguments hold"
    assert "mallory" in block[0] and "1000000" in block[0] and "c_fake" in block[0]
    assert not any(line.lstrip().startswith("c_fake") for line in lines)


def test_show_json_from_the_store_is_exact_and_shows_nothing_raw(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    _awaiting(url, "r-evil")
    code, text = _cli("show", "r-evil", "--store", url, "--json")
    assert code == 0, text
    assert _raw(text.rstrip("\n")) == [] and text.count("\n") == 1
    doc = json.loads(text)
    assert doc["pending"][0]["arguments"] == FORGED
    assert doc["messages"][2] == {"role": "tool", "content": HOSTILE, "tool_call_id": f"c_x{BIDI}"}
    assert doc["agent"] == f"banker{ESCAPES}"


def test_show_of_a_kept_result_shows_no_raw_escapes(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    _completed(url, "r-done", time.time())
    code, text = _cli("show", "r-done", "--store", url)
    assert code == 0, text
    assert _raw(text) == [], text
    assert "\\x1b]0;pwned\\x07" in text


def test_runs_from_the_store_shows_no_raw_escapes(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    _awaiting(url, "r-evil")
    _failed(url, "r-failed", time.time())
    _completed(url, "r-done", time.time())
    for args in ((), ("--all",)):
        code, text = _cli("runs", "--store", url, *args)
        assert code == 0, text
        assert _raw(text) == [], text
        assert len(text.splitlines()) == 4, "a header and one line per run"
    code, text = _cli("runs", "--store", url, "--json")
    assert code == 0 and _raw(text.rstrip("\n")) == []
    assert {row["agent"] for row in json.loads(text)} == {
        f"banker{ESCAPES}",
        f"agent{BIDI}",
        f"finisher{ESCAPES}",
    }


def test_gc_from_the_store_shows_no_raw_escapes(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    _failed(url, "r-failed", time.time() - 3600)
    _completed(url, "r-done", time.time() - 3600)
    code, text = _cli("gc", "--store", url, "--older-than", "1m", "--dry-run")
    assert code == 0, text
    assert _raw(text) == [], text
    assert "finisher\\x1b[2K" in text


def test_an_error_on_stderr_shows_no_raw_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = _cli("runs", "--store", f"file://{tmp_path}/x\x1b[2J\x1b]0;t\x07\u202ey")
    assert code == 1
    err = capsys.readouterr().err
    assert "no store" in err and _raw(err.rstrip("\n")) == [], err
