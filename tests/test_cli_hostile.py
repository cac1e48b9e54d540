"""The ``raygents`` command on hostile input, with no cluster: store URLs and directories that
name no store, Ray addresses it cannot join, waits and ages too long to wait for, ``--agent``
values that name no importable agent, and a reader of its output that goes away. Each ends in
one line on stderr and its exit status (1: failed, 2: bad usage), never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from raygents.cli import parser

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
