"""Kept results and retention without Ray: what a completed run's marker keeps (fitted into
one frame), a coordinator that reads it back after a restart, the background expiry of ended
runs past retention, ``raygents gc`` on a store, and the durations both take."""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from runtime.coordinator.test_coordinator import _until

from raygents.cli.main import main
from raygents.core.messages import Message, ToolCall, Usage
from raygents.errors import UserError
from raygents.records import checkpoint, codec, keptresult, retention
from raygents.records.keptresult import done_marker
from raygents.records.runinfo import RunInfo, RunSummary
from raygents.runtime.coordinator.coordinator import Coordinator
from raygents.runtime.link.settings import Settings
from raygents.stores.file import FileStore


def _summary(output: str = "the answer", messages: int = 3) -> RunSummary:
    history = [Message("user", "go")]
    for i in range(messages - 2):
        call = ToolCall(id=f"c{i}", name="note", arguments='{"text": "a"}')
        history.append(Message("assistant", None, tool_calls=(call,)))
    history.append(Message("assistant", output))
    return RunSummary(
        final_output=output,
        messages=tuple(history),
        usage=Usage(12, 5, requests=2),
        turns=2,
        agent_name="finisher",
        input_count=1,
    )


def _record(run_id: str, seq: int, status: str, at: float) -> bytes:
    state = {"agent_name": "agent", "turns": 1, "epoch": 1}
    record = {
        "format": 1,
        "run_id": run_id,
        "seq": seq,
        "kind": "full",
        "status": status,
        "keep": 0,
        "append": [],
        "state": state,
        "at": at,
    }
    return codec.encode(record)


def _marker(run_id: str, at: float, output: str = "out") -> bytes:
    done = done_marker(RunInfo(run_id, "completed", "agent", 1, seq=1), 1, _summary(output))
    return codec.encode({**done, "at": at})


# --- durations ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 604800.0), ("12h", 43200.0), ("30m", 1800.0), ("45s", 45.0), ("90", 90.0),
     ("2w", 1209600.0), ("1.5h", 5400.0), ("0s", 0.0), (" 3D ", 259200.0)],
)  # fmt: skip
def test_durations_parse(text: str, seconds: float) -> None:
    assert retention.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7 days", "-1d", "d", "1y", "1e3", "nan"])
def test_bad_durations_say_what_a_duration_is(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration such as 7d"):
        retention.parse_duration(text)


def test_durations_are_described_in_their_largest_whole_unit() -> None:
    assert [retention.describe(s) for s in (604800, 86400 * 3, 5400, 120, 45, 1.5)] == [
        "1w", "3d", "90m", "2m", "45s", "1.5s"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, None), (datetime.timedelta(days=7), 604800.0), (60, 60.0), (0.5, 0.5)],
)
def test_init_retention_takes_a_timedelta_or_seconds(value: Any, seconds: float | None) -> None:
    assert retention.retention_seconds(value) == seconds


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), True, "7d", []])
def test_a_bad_retention_is_refused(value: Any) -> None:
    with pytest.raises(UserError, match="retention must be"):
        retention.retention_seconds(value)


# --- the kept result ------------------------------------------------------------------------
def test_a_marker_keeps_the_whole_output_usage_and_history() -> None:
    result = _summary("x" * 100_000, messages=5)
    done = done_marker(RunInfo("r1", "completed", "finisher", 2, seq=3), 1, result)
    assert done["format"] == keptresult.FORMAT == 2
    decoded = keptresult.read_marker(codec.encode(done), key=None, run_id="r1", source="k")
    kept = keptresult.summary(decoded)
    assert kept is not None
    assert kept["final_output"] == "x" * 100_000
    assert kept["messages"] == result["messages"]
    assert kept["usage"] == Usage(12, 5, requests=2)
    assert (kept["turns"], kept["agent_name"], kept.get("input_count")) == (2, "finisher", 1)
    with pytest.raises(ValueError, match="not this run's marker"):
        keptresult.read_marker(codec.encode(done), key=None, run_id="r2", source="k")


def test_a_history_too_large_for_one_frame_keeps_its_newest_messages() -> None:
    big = "y" * (1024 * 1024)
    history = tuple(Message("user" if i % 2 else "assistant", f"{i}:{big}") for i in range(14))
    result = RunSummary(final_output="done", messages=history, usage=None, turns=7, agent_name="a")
    done = done_marker(RunInfo("r1", "completed", "a", 7), 1, result)
    codec.encode(done)  # (fits the cap)
    kept = done["messages"]
    assert 0 < len(kept) < len(history) and done["messages_dropped"] == len(history) - len(kept)
    assert kept[-1]["content"].startswith("13:"), "the newest messages are kept"
    assert done["output"] == "done"


def test_an_output_too_large_for_one_frame_keeps_its_first_part() -> None:
    output = "z" * (codec.DEFAULT_MAX_BYTES + 10)
    result = RunSummary(
        final_output=output, messages=(Message("assistant", output),), usage=None, turns=1,
        agent_name="a",
    )  # fmt: skip
    done = done_marker(RunInfo("r1", "completed", "a", 1), 1, result)
    codec.encode(done)
    assert done["output_chars"] == len(output) and output.startswith(done["output"])
    assert len(done["output"]) > codec.DEFAULT_MAX_BYTES - 10_000
    assert (done["messages"], done["messages_dropped"]) == ([], 1)


def test_a_marker_of_the_first_format_still_reads() -> None:
    old = {"format": 1, "kind": "done", "run_id": "r1", "epoch": 1, "seq": 2, "output": "42"}
    kept = keptresult.summary(old)
    assert kept is not None and (kept["final_output"], kept["messages"]) == ("42", ())
    assert keptresult.summary({"format": 1, "run_id": "r1"}) is None, "no output kept"


# --- the coordinator ------------------------------------------------------------------------
async def test_a_run_without_records_keeps_its_result_and_a_restart_reads_it(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path}"
    coord = Coordinator("test", Settings(store=url))
    _, epoch = await coord.claim("quick", "driver", "finisher")
    info = RunInfo("quick", "completed", "finisher", 2, seq=0)
    await coord.finish(info, _summary())  # (its agent actor could not store the marker)
    await _until(lambda: coord.store.list("runs/quick/") == [f"runs/quick/done.{epoch}"])

    restarted = Coordinator("test", Settings(store=url))
    assert await restarted.records.rebuilt(timeout_s=10.0)
    [listed] = await restarted.list_runs()
    assert (listed.run_id, listed.status, listed.agent_name) == ("quick", "completed", "finisher")
    found, result = await restarted.wait("quick")
    assert found is not None and result is not None
    assert result["final_output"] == "the answer"
    assert result["messages"] == _summary()["messages"]


async def test_a_run_without_records_in_a_memory_store_gets_no_marker() -> None:
    coord = Coordinator("test", Settings(store="memory://kept-none"))
    await coord.claim("quick", "driver", "finisher")
    await coord.finish(RunInfo("quick", "completed", "finisher", 2), _summary())
    await asyncio.sleep(0.1)
    assert coord.store.list("runs/") == []


async def test_ended_runs_past_retention_go_and_the_others_stay(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    old, new = time.time() - 3600, time.time()
    store.put("runs/old-done/done.1", _marker("old-done", old))
    store.put(checkpoint.key_for("old-failed", 1, 1), _record("old-failed", 1, "failed", old))
    store.put(checkpoint.key_for("old-susp", 1, 1), _record("old-susp", 1, "suspended", old))
    store.put(checkpoint.key_for("old-run", 1, 1), _record("old-run", 1, "running", old))
    store.put("runs/new-done/done.1", _marker("new-done", new))
    coord = Coordinator("test", Settings(store=f"file://{tmp_path}", retention_s=600.0))
    assert await coord.records.rebuilt(timeout_s=10.0)
    assert coord.table.aging is not None
    await _until(lambda: "runs/old-done/done.1" not in store.list("runs/"))  # (in the background)
    await _until(lambda: not store.list("runs/old-failed/"))
    assert sorted({k.split("/")[1] for k in store.list("runs/")}) == [
        "new-done", "old-run", "old-susp"
    ]  # fmt: skip
    await _until(lambda: not {"old-done", "old-failed"} & coord.table.runs.keys())  # (forgotten)
    assert coord.table.runs["new-done"].status == "completed"


async def test_forgotten_completed_runs_age_out_too(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for i in range(5):
        store.put(f"runs/r{i}/done.1", _marker(f"r{i}", time.time() - 3600 + i))
    coord = Coordinator("test", Settings(store=f"file://{tmp_path}", retention_s=7200.0))
    coord.table.completed_kept = 1  # the oldest are forgotten as they come
    assert await coord.records.rebuilt(timeout_s=10.0)
    coord.table._prune(coord.table._completed, 1)
    assert coord.table.aging is not None and len(coord.table.aging) == 4
    assert coord.cleaner.expire_due(time.time() - 3600 + 2.5) == 3  # r0, r1, r2 ended before
    await _until(lambda: sorted(store.list("runs/")) == ["runs/r3/done.1", "runs/r4/done.1"])


async def test_gc_on_the_coordinator_skips_runs_it_runs(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put("runs/done-a/done.1", _marker("done-a", time.time() - 100))
    store.put(checkpoint.key_for("busy", 1, 1), _record("busy", 1, "failed", time.time() - 100))
    coord = Coordinator("test", Settings(store=f"file://{tmp_path}"))
    assert await coord.records.rebuilt(timeout_s=10.0)
    taken, _ = await coord.claim("busy", "driver", "agent")  # resumed: running now
    assert taken is None
    used, rows = await coord.gc(10.0, dry_run=True)
    assert used == 10.0 and [r["run_id"] for r in rows] == ["done-a"]
    assert store.list("runs/done-a/"), "a dry run deletes nothing"
    used, rows = await coord.gc(None, dry_run=False)  # (default: 7 days)
    assert used == retention.DEFAULT_GC_S and rows == []
    _, rows = await coord.gc(10.0, dry_run=False)
    assert [(r["run_id"], r["status"], r["keys"]) for r in rows] == [("done-a", "completed", 1)]
    assert not store.list("runs/done-a/") and store.list("runs/busy/")
    assert "done-a" not in coord.table.runs


# --- raygents gc --store ----------------------------------------------------------------------
def _gc(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["gc", *args], out=out), out.getvalue()


def test_gc_on_a_store_deletes_only_ended_runs_older_than_asked(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    day = 86400
    store.put("runs/done-old/done.1", _marker("done-old", time.time() - 9 * day))
    store.put("runs/done-new/done.1", _marker("done-new", time.time() - 60))
    store.put(
        checkpoint.key_for("f-old", 1, 1), _record("f-old", 1, "failed", time.time() - 9 * day)
    )
    store.put(
        checkpoint.key_for("c-old", 1, 1), _record("c-old", 1, "cancelled", time.time() - 2 * day)
    )
    for status in ("suspended", "awaiting_approval", "running"):
        key = checkpoint.key_for(status, 1, 1)
        store.put(key, _record(status, 1, status, time.time() - 9 * day))
    url = f"file://{tmp_path}"
    before = sorted(store.list("runs/"))

    code, text = _gc("--store", url, "--dry-run")  # default: 7 days
    assert code == 0, text
    assert text.startswith("would delete 2 run(s) that ended over 1w ago"), text
    assert "done-old" in text and "f-old" in text and "c-old" not in text
    assert sorted(store.list("runs/")) == before

    code, text = _gc("--store", url, "--older-than", "1d", "--json")
    assert code == 0, text
    doc = json.loads(text)
    assert (doc["older_than_s"], doc["dry_run"]) == (86400.0, False)
    assert sorted(r["run_id"] for r in doc["runs"]) == ["c-old", "done-old", "f-old"]
    left = sorted({k.split("/")[1] for k in store.list("runs/")})
    assert left == ["awaiting_approval", "done-new", "running", "suspended"]


@pytest.mark.parametrize("age", ["7 days", "-1d", "soon"])
def test_gc_refuses_a_bad_duration(age: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["gc", "--store", "memory://x", f"--older-than={age}"])
    assert exited.value.code == 2
    assert "expected a duration such as 7d" in capsys.readouterr().err


async def test_an_agent_actor_marks_a_run_without_records_in_a_durable_store(
    tmp_path: Path,
) -> None:
    from fakes import FakeHandle

    from raygents.core.envelope import Outcome, RunState
    from raygents.runtime.actor.writer import RecordWriter
    from raygents.runtime.link.directory import Directory

    coord = Coordinator("test", Settings(store=f"file://{tmp_path}"))
    directory = Directory("ns", FakeHandle(coord), owner="test")
    await directory.settings()

    async def written(*args: Any) -> None:
        pass

    writer = RecordWriter(directory, written)
    writer.use_store(coord.store)
    history = (Message("user", "go"), Message("assistant", "hi"))
    state = RunState(run_id="bare", agent_name="w", messages=history, input_len=1, turns=1, epoch=1)
    await writer.finish(Outcome("completed", state, output="hi"))  # (no records: seq 0)
    assert coord.store.list("runs/bare/") == ["runs/bare/done.1"]
    kept = coord.records.read_kept("bare")
    assert kept is not None and (kept["final_output"], kept["messages"]) == ("hi", history)


def test_init_refuses_a_bad_retention_before_it_starts_anything() -> None:
    import raygents as rg

    with pytest.raises(UserError, match=r"retention must be a datetime\.timedelta"):
        rg.init(retention="30d")  # type: ignore[arg-type]
