"""What a restarted coordinator says of ended runs: a completed run is never run again (its
completion marker outlives its records), and a failed run stays failed with its error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray.exceptions

import raygents as rg
from raygents.runtime.driver import client
from raygents.testing import ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@pytest.fixture
def store(own_raygents: None, tmp_path: Path) -> Iterator[str]:
    """raygents on a fresh namespace over a file store."""
    url = f"file://{tmp_path / 'ckpt'}"
    rg.shutdown()
    rg.init(namespace=f"ended-{os.urandom(3).hex()}", store=url)
    yield url
    rg.shutdown()


def _restart(store: str) -> None:
    """A new coordinator over the same store (the old one goes with this driver's runtime)."""
    namespace = client.current().namespace
    rg.shutdown()
    rg.init(namespace=namespace, store=store)


@rg.tool(remote=False)
def note(text: str) -> str:
    """Note ``text``."""
    return f"noted {text}"


def test_a_completed_run_is_never_run_again_even_after_a_restart(store: str) -> None:
    model = ScriptedModel([calls(call("note", {"text": "a"})), text("the answer")])
    agent = rg.Agent("finisher", model=model, tools=[note])
    result = rg.run(agent, "go", run_id="once")  # (its tool batch wrote records)
    assert result.final_output == "the answer"
    with pytest.raises(rg.UserError, match="'once' already completed") as refused:
        rg.resume("once", agent=agent)
    assert not isinstance(refused.value, ray.exceptions.RayError), "not wrapped by Ray"
    assert "Traceback" not in str(refused.value)
    with pytest.raises(rg.UserError, match=r"'once' is already in use \(completed\)"):
        rg.start(agent, "again", run_id="once")
    root = Path(store[len("file://") :]) / "runs" / "once"
    _restart(store)
    assert sorted(p.name for p in root.iterdir()) == ["done.1"], "records gone, marker kept"
    [info] = [r for r in rg.runs() if r.run_id == "once"]
    assert (info.status, info.agent_name) == ("completed", "finisher")
    with pytest.raises(rg.UserError, match="'once' already completed"):
        rg.resume("once", agent=agent)
    kept = rg.attach("once").result(timeout_s=60)  # the marker kept its (small) output
    assert kept.final_output == "the answer"
    model.assert_complete()


def test_a_run_that_failed_after_a_checkpoint_stays_failed_after_a_restart(store: str) -> None:
    model = ScriptedModel([calls(call("note", {"text": "a"})), rg.ModelError("provider down")])
    agent = rg.Agent("breaker", model=model, tools=[note])
    handle = rg.start(agent, "go", run_id="broke")
    with pytest.raises(rg.ModelError, match="provider down"):
        handle.result(timeout_s=60)
    _restart(store)
    [info] = [r for r in rg.runs() if r.run_id == "broke"]
    assert info.status == "failed", info
    assert info.last_error is not None and "provider down" in info.last_error
