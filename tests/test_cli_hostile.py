"""The ``raygents`` command on hostile input, with no cluster: store URLs and directories that
name no store, Ray addresses it cannot join, waits and ages too long to wait for, ``--agent``
values that name no importable agent, and a reader of its output that goes away. Each ends in
one line on stderr and its exit status (1: failed, 2: bad usage), never a traceback."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from raygents.cli import main, parser

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "argv",
    [
        ["suspend", "r1", "--timeout", "inf"],
        ["cancel", "r1", "--timeout", "1e10"],  # (past the longest wait a thread can make)
        ["resume", "r1", "--agent", "m:a", "--timeout", "nan"],
        ["gc", "--older-than", "1" + "0" * 400 + "s"],  # (no finite number of seconds)
    ],
)
def test_waits_and_ages_past_what_can_be_waited_for_are_bad_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parser().parse_args(argv)
    assert info.value.code == 2
    assert "usage: raygents" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["", "bogus://x", "/srv/raygents/store", "file://", "s3://"])
@pytest.mark.parametrize("command", [["runs"], ["show", "r1"], ["gc", "--dry-run"]])
def test_a_store_url_that_names_no_store_is_bad_usage(
    command: list[str],
    url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "no-ray-here")  # (were the cluster asked instead)
    out = io.StringIO()
    assert main([*command, "--store", url], out=out) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"raygents {command[0]}: error: ") and "--store" in err, err
    assert out.getvalue() == ""


@pytest.mark.parametrize("command", [["runs"], ["show", "r1"], ["gc", "--older-than", "0s"]])
def test_a_store_directory_that_is_not_there_is_an_error(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("not a store\n")
    for missing in (tmp_path / "typo", tmp_path / "a-file"):
        out = io.StringIO()
        assert main([*command, "--store", f"file://{missing}"], out=out) == 1
        err = capsys.readouterr().err
        assert str(missing) in err and "no store" in err, err
        assert out.getvalue() == ""
    assert not (tmp_path / "typo").exists()  # (reading made nothing)


def test_an_empty_store_directory_lists_no_runs(tmp_path: Path) -> None:
    out = io.StringIO()
    assert main(["runs", "--store", f"file://{tmp_path}", "--json"], out=out) == 0
    assert json.loads(out.getvalue()) == []
