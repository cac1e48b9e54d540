"""The ``raygents`` command on hostile input, with no cluster: store URLs and directories that
name no store, Ray addresses it cannot join, waits and ages too long to wait for, ``--agent``
values that name no importable agent, and a reader of its output that goes away. Each ends in
one line on stderr and its exit status (1: failed, 2: bad usage), never a traceback."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raygents.cli.main import main, parser
from raygents.core.envelope import RunState
from raygents.core.messages import Message
from raygents.records import checkpoint
from raygents.stores.open import open_store

ROOT = Path(__file__).resolve().parents[2]


def _write_run(url: str, run_id: str) -> None:
    """A suspended run's records, as an agent actor writes them."""
    store = open_store(url)
    state = RunState(run_id=run_id, agent_name="banker", messages=(Message("user", "hi"),))
    for step in ("running", "suspended"):
        state, record = checkpoint.make_record(state, step)  # type: ignore[arg-type]
        store.put(checkpoint.key_for(run_id, record["seq"]), checkpoint.encode(record))


def _command(*argv: str, timeout_s: float = 100, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m raygents ARGV`` in a child process, with no Ray address but ``env``'s."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return subprocess.run(
        [sys.executable, "-m", "raygents", *argv],
        cwd=ROOT,
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


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


@pytest.mark.parametrize("address", ["not-an-address", "http://127.0.0.1:1", "local"])
def test_an_address_that_names_no_cluster_to_join_is_bad_usage(
    address: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["runs", "--address", address], ["runs"]):
        monkeypatch.setenv("RAY_ADDRESS", address)
        assert main(argv, out=io.StringIO()) == 2
        err = capsys.readouterr().err
        assert err.startswith("raygents runs: error: ") and repr(address) in err, err


def test_a_cluster_that_does_not_answer_is_a_failure_with_no_traceback() -> None:
    done = _command(
        "runs",
        "--address",
        "ray://127.0.0.1:1",
        RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S="1",
        RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S="1",
    )
    assert done.returncode == 1, done.stderr
    assert "raygents runs: cannot connect to Ray at 'ray://127.0.0.1:1'" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["resume", "r1", "--agent", "nocolon"], "MODULE:ATTR"),
        (["resume", "r1", "--agent", ".relative:AGENT"], "MODULE:ATTR"),
        (["approve", "r1", "--agent", "..:AGENT", "--all"], "MODULE:ATTR"),
        (["approve", "r1", "--agent", "no_such_module_here:AGENT", "--all"], "cannot import"),
        (["approve", "r1", "--agent", "cli_hostile_agents:TRIAGE"], "which calls"),
    ],
)
def test_usage_is_checked_before_joining_a_cluster(
    argv: list[str],
    why: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "cli_hostile_agents.py").write_text(
        "import raygents as rg\nTRIAGE = rg.Agent('triage')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    monkeypatch.setenv("RAY_ADDRESS", "not-an-address")  # (what joining it would say instead)
    assert main(argv, out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"raygents {argv[0]}: error: ") and why in err, err


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    _write_run(url, "r-stop")
    proc = subprocess.Popen(
        [sys.executable, "-m", "raygents", "runs", "--store", url, "--json"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # (as `| head -0` does: no one reads what it prints)
    err = proc.stderr.read()
    assert proc.wait(timeout=100) == 141, err
    assert err == ""


class _Interrupted(io.StringIO):
    """A terminal where Ctrl-C is pressed as the command prints."""

    def write(self, text: str) -> int:
        raise KeyboardInterrupt


def test_ctrl_c_ends_the_command_with_one_line_and_status_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{tmp_path}"
    _write_run(url, "r-stop")
    assert main(["runs", "--store", url], out=_Interrupted()) == 130
    assert capsys.readouterr().err == "raygents runs: interrupted\n"


def test_an_address_where_nothing_listens_fails_at_once() -> None:
    """Ray retries an address for minutes; nothing listening there is said at once."""
    for address in ("127.0.0.1:1", "ray://127.0.0.1:1"):
        done = _command("runs", "--address", address, timeout_s=60)
        assert done.returncode == 1, done.stderr
        assert f"raygents runs: cannot connect to Ray at {address!r}: nothing answers" in (
            done.stderr
        )
        assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("failure", ["timeout", "died"])
def test_a_coordinator_that_does_not_answer_is_a_failure(
    failure: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator is found but its settings never come (busy, or it died meanwhile)."""
    import ray

    from raygents.cli import runs as cli_runs

    class Method:
        def remote(self) -> str:
            return "ref"

    class Coordinator:
        settings = Method()

    def get(ref: str, timeout: float | None = None) -> None:
        if failure == "timeout":
            raise ray.exceptions.GetTimeoutError("Get timed out: some object(s) not ready.")
        raise ray.exceptions.RayActorError()

    monkeypatch.setattr(ray, "get_actor", lambda *a, **kw: Coordinator())
    monkeypatch.setattr(ray, "get", get)
    with pytest.raises(cli_runs.CommandFailed, match="raygents coordinator in namespace 'ns'"):
        cli_runs._join("ns", "10.0.0.1:6379")
