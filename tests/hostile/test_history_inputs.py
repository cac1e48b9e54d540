"""Bad input to history, fork and replay: an unknown run, a seq that does not exist, a fork of a
running run (allowed, from a durable checkpoint), input after calls still owed results, a
graph missing the run's agents, and records planted under another run's id: each a clear,
typed error, with nothing started and the source left as it was."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from spaces import Namespaces

import raygents as rg
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.testing import FunctionModel, call, calls, text

pytestmark = [pytest.mark.usefixtures("rt"), pytest.mark.timeout(120)]


@pytest.fixture
def store(module_raygents: Namespaces) -> str:
    """raygents on the module's namespace over a file store (its tests share both)."""
    return module_raygents.file_store()


@rg.tool(num_cpus=0)
def wait_for(ctx: rg.ToolContext, flag: str) -> str:
    """Wait until a file exists (at most a minute)."""
    path = Path(ctx.context["dir"], flag)
    for _ in range(600):
        if path.exists():
            return f"{flag} seen"
        time.sleep(0.1)
    return "gave up"


def _wait_then_answer(req: ModelRequest) -> ModelResponse:
    if any(m.role == "tool" for m in req.messages):
        return text("done")
    return calls(call("wait_for", {"flag": "go"}, id="c_wait"))


AGENT = rg.Agent("hb_agent", tools=[wait_for], model=FunctionModel(_wait_then_answer))


def test_an_unknown_run_is_run_not_found(store: str) -> None:
    with pytest.raises(rg.RunNotFound, match="no checkpoint of run 'no-such-run'"):
        rg.history("no-such-run")
    with pytest.raises(rg.RunNotFound):
        rg.history("no-such-run", store=store)
    with pytest.raises(rg.RunNotFound):
        rg.fork("no-such-run", agent=AGENT, input="hi")
    with pytest.raises(rg.RunNotFound):
        rg.replay("no-such-run", agent=AGENT)
    with pytest.raises(rg.UserError, match="run id"):
        rg.history("../etc")


def test_a_seq_that_does_not_exist_and_bad_arguments(store: str, tmp_path: Path) -> None:
    source = rg.run(rg.Agent("hb_plain", model=FunctionModel(lambda r: text("hi"))), "hello")
    with pytest.raises(rg.CheckpointNotFound, match=r"has no checkpoint 7 \(it has \[1\]") as err:
        rg.fork(source.run_id, agent=AGENT, at=7)
    assert (err.value.seq, err.value.run_id) == (7, source.run_id)
    for at in (0, -1, True, "1", 1.0):
        with pytest.raises(rg.UserError, match="at must be a checkpoint's seq"):
            rg.fork(source.run_id, agent=AGENT, at=at)  # type: ignore[arg-type]
    with pytest.raises(rg.UserError, match="a run id of its own"):
        rg.fork(source.run_id, agent=AGENT, run_id=source.run_id)
    with pytest.raises(
        rg.UserError, match="at agent 'hb_plain' at checkpoint 1, which is not in the graph"
    ):
        rg.fork(source.run_id, agent=AGENT, input="again")
    with pytest.raises(rg.UserError, match="not in the graph"):
        rg.replay(source.run_id, agent=AGENT)
    with pytest.raises(rg.UserError, match="must be an Agent"):
        rg.replay(source.run_id, agent="hb_plain")  # type: ignore[arg-type]
    plain = rg.Agent("hb_plain", model=FunctionModel(lambda r: text("again")))
    taken = rg.fork(source.run_id, agent=plain, input="again", run_id="hb-taken")
    taken.result(timeout_s=60)
    with pytest.raises(rg.UserError, match="already in use"):
        rg.fork(source.run_id, agent=plain, input="again", run_id="hb-taken")
    assert [c.reason for c in rg.history(source.run_id)] == ["final"]


def test_a_running_run_is_forked_from_its_durable_checkpoint(store: str, tmp_path: Path) -> None:
    context = {"dir": str(tmp_path)}
    running = rg.start(AGENT, "wait", context=context)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            found = rg.history(running.run_id)
        except rg.RunNotFound:  # (its first record is on its way)
            found = []
        if found:
            break
        time.sleep(0.1)
    assert [c.reason for c in found] == ["intent"]
    with pytest.raises(rg.UserError, match="waits for the results of tool calls"):
        rg.fork(running.run_id, agent=AGENT, input="more")
    fork = rg.fork(running.run_id, agent=AGENT, at=found[0].seq)
    assert running.status() == "running"
    Path(tmp_path, "go").touch()
    assert fork.result(timeout_s=60).final_output == "done"
    assert running.result(timeout_s=60).final_output == "done"


def test_records_planted_under_another_run_are_refused(store: str, tmp_path: Path) -> None:
    plain = rg.Agent("hb_plain", model=FunctionModel(lambda r: text("hi")))
    handle = rg.start(
        rg.Agent("hb_wait", tools=[wait_for], model=AGENT.model),
        "x",
        context={"dir": str(tmp_path)},
    )
    deadline = time.monotonic() + 30
    root = Path(store.removeprefix("file://"), "runs")
    while not list((root / handle.run_id).glob("*.ckpt")) and time.monotonic() < deadline:
        time.sleep(0.1)
    planted = root / "planted-run"
    planted.mkdir()
    for record in (root / handle.run_id).glob("*.ckpt"):
        shutil.copy(record, planted / record.name)
    with pytest.raises(rg.CheckpointCorrupt, match="belongs to run"):
        rg.history("planted-run", store=store)
    with pytest.raises(rg.CheckpointCorrupt):
        rg.fork("planted-run", agent=plain)
    Path(tmp_path, "go").touch()
    handle.result(timeout_s=60)


def test_the_history_command_shows_what_a_run_holds_as_escapes(store: str) -> None:
    import io

    from raygents.cli.main import main

    sneaky = "hi\x1b[2J\x1b]0;owned\x07\u202egnp.exe"
    echo = rg.Agent("hb_echo", model=FunctionModel(lambda r: text(r.messages[-1].text)))
    run_id = rg.run(echo, sneaky).run_id
    table, as_json = io.StringIO(), io.StringIO()
    assert main(["history", run_id, "--store", store], out=table) == 0
    assert main(["history", run_id, "--store", store, "--json"], out=as_json) == 0
    for shown in (table.getvalue(), as_json.getvalue()):
        assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "\\x1b[2J" in table.getvalue() and "\\u202e" in table.getvalue()
    assert "\\u001b" in as_json.getvalue()


@rg.tool(num_cpus=0, needs_approval=True)
def close_account(who: str) -> str:
    """Close an account."""
    return f"closed {who}"


def _close(req: ModelRequest) -> ModelResponse:
    return calls(call("close_account", {"who": "bob"}, id="c_close"))


def _to_closer(req: ModelRequest) -> ModelResponse:
    return calls(call("transfer_to_hb_closer", {}, id="c_to"))


def test_a_run_whose_history_an_input_filter_rewrote_is_not_replayed(store: str) -> None:
    closer = rg.Agent("hb_closer", tools=[close_account], model=FunctionModel(_close))
    only_input = rg.handoff(closer, input_filter=lambda data: list(data.input_history))
    triage = rg.Agent("hb_triage", handoffs=[only_input], model=FunctionModel(_to_closer))
    handle = rg.start(triage, "close bob")
    with pytest.raises(rg.RunInterrupted):
        handle.result(timeout_s=60)
    with pytest.raises(rg.UserError, match="input filter rewrote its history"):
        rg.replay(handle.run_id, agent=triage)
