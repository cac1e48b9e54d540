"""Batch jobs without Ray: ids, items as JSON, shards and ledgers, progress, argument checks."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest

import raygents as rg
from raygents.batch.items import batch_run_id, check_job_id, item_from_json
from raygents.batch.output import is_marked, mark, open_ledger, open_output
from raygents.batch.progress import BatchProgress, Display, open_display
from raygents.stores.memory import MemoryStore

AGENT = rg.Agent("batch-unit")


@pytest.mark.parametrize(
    ("job_id", "index", "run_id"),
    [("tickets", 0, "tickets.0"), ("a.b", 12, "a.b.12"), ("j" * 90, 999_999, "j" * 90 + ".999999")],
)
def test_run_ids_come_from_job_and_index(job_id: str, index: int, run_id: str) -> None:
    assert batch_run_id(check_job_id(job_id), index) == run_id


@pytest.mark.parametrize("job_id", ["", "a/b", "..", "x" * 91, 7, "caf\u00e9"])
def test_bad_job_ids_are_refused(job_id: Any) -> None:
    with pytest.raises(rg.UserError):
        check_job_id(job_id)


def test_an_item_round_trips_through_its_json_line() -> None:
    item = rg.BatchItem(3, "j.3", "completed", output="hi", usage=rg.Usage(2, 1, requests=1))
    assert item_from_json(item.to_json()) == item
    failed = rg.BatchItem(4, "j.4", "failed", error="ModelError: down")
    assert item_from_json(failed.to_json()) == failed


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 1.5}, "concurrency"),
        ({"max_failures": -1}, "max_failures"),
        ({"tenant": "a/b"}, "tenant"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": "5"}, "timeout_s"),
        ({"timeout_s": True}, "timeout_s"),
        ({"max_turns": 0}, "max_turns"),
        ({"job_id": "a/b"}, "job id"),
    ],
)
def test_start_batch_checks_its_arguments_before_starting(
    kwargs: dict[str, Any], fragment: str
) -> None:
    options = {"job_id": "j", **kwargs}
    with pytest.raises(rg.UserError, match=fragment):
        rg.start_batch(AGENT, ["x"], **options)


@pytest.mark.parametrize("inputs", ["one string", {"input": "x"}, 5])
def test_inputs_must_be_an_iterable_of_items(inputs: Any) -> None:
    with pytest.raises(rg.UserError, match="inputs"):
        rg.start_batch(AGENT, inputs, job_id="j")


def test_start_batch_needs_an_agent() -> None:
    with pytest.raises(rg.UserError, match="Agent"):
        rg.start_batch("agent", ["x"], job_id="j")  # type: ignore[arg-type]


def test_directory_shards_are_appended_line_by_line_and_split(tmp_path: Path) -> None:
    out = open_output(tmp_path / "out", "job", shard_items=2)
    for i in range(5):
        out.write({"index": i, "status": "completed" if i != 1 else "failed"})
        assert sum(1 for name in out.written for _ in out.lines(name)) == i + 1
    out.close()
    assert len(out.written) == 3 and out.shards() == out.written
    assert [line["index"] for line in out.completed()] == [0, 2, 3, 4]
    assert [line["index"] for line in out.lines(out.written[0], 1)] == [1]


def test_later_runs_of_a_job_sort_after_earlier_ones_and_other_jobs_are_apart(
    tmp_path: Path,
) -> None:
    first = open_output(tmp_path, "job")
    first.write({"index": 0, "status": "failed"})
    first.close()
    other = open_output(tmp_path, "job2")
    other.write({"index": 0, "status": "completed"})
    other.close()
    second = open_output(tmp_path, "job")
    second.writer = "f" * 16 + "-1"  # (started later)
    second.write({"index": 0, "status": "completed"})
    second.close()
    assert second.shards() == [*first.written, *second.written]
    assert [line["index"] for line in second.completed()] == [0]


def test_a_line_cut_short_is_left_out(tmp_path: Path) -> None:
    out = open_output(tmp_path, "job")
    out.write({"index": 0, "status": "completed"})
    out.close()
    with (tmp_path / out.written[0]).open("a") as f:
        f.write('{"index": 1, "status": "comp')
    assert [line["index"] for line in out.completed()] == [0]


def test_a_ledger_puts_a_shard_at_each_flush_and_when_full() -> None:
    store = MemoryStore(f"ledger-{id(object())}")
    ledger = open_ledger(store, "job")
    ledger.shard_items = 3
    ledger.flush()
    assert store.list("") == []
    for i in range(4):
        ledger.write({"index": i, "status": "completed"})
    assert len(store.list("jobs/job/")) == 1  # (the first shard filled up)
    ledger.flush()
    ledger.flush()
    assert len(store.list("jobs/job/")) == 2
    assert [line["index"] for line in open_ledger(store, "job").completed()] == [0, 1, 2, 3]


def test_output_under_s3(session_s3: Any) -> None:
    from s3_server import create_bucket

    bucket = create_bucket(session_s3.endpoint_url)
    out = open_output(f"s3://{bucket}/results", "job")
    out.write({"index": 0, "status": "completed", "output": "\u00e9"})
    assert out.written == []  # (a shard goes up as one object)
    out.flush()
    out.write({"index": 1, "status": "failed"})
    out.close()
    again = open_output(f"s3://{bucket}/results", "job")
    assert [line["index"] for line in again.completed()] == [0]
    assert [x["output"] for x in again.lines(out.written[0])] == ["\u00e9"]


def test_a_bitmap_marks_indices() -> None:
    bits = bytearray()
    for index in (0, 9, 1_000_000):
        mark(bits, index)
    assert len(bits) == 125_001
    assert [i for i in (0, 1, 8, 9, 999_999, 1_000_000, 2_000_000) if is_marked(bits, i)] == [
        0,
        9,
        1_000_000,
    ]


def progress(**changes: Any) -> BatchProgress:
    base: dict[str, Any] = {
        "done": 5,
        "failed": 1,
        "stopped": 0,
        "running": 2,
        "pending": 10,
        "input_tokens": 30,
        "output_tokens": 12,
        "runs_per_s": 3.0,
        "eta_s": 4.0,
    }
    return BatchProgress(**{**base, **changes})


def test_a_progress_line_says_where_the_job_stands() -> None:
    assert progress().line() == (
        "6/18 ended (5 completed, 1 failed, 0 stopped), 2 running, 42 tokens, 3.0 runs/s, eta 4 s"
    )
    assert progress(pending=None, eta_s=None).line().startswith("6 ended (")


def test_progress_off_shows_nothing_and_elsewhere_logs(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert type(open_display(False, "j", 3)) is Display
    monkeypatch.setattr("sys.stderr", io.StringIO())  # (not a terminal)
    display = open_display(None, "j", 3, every_s=0.0)
    with caplog.at_level(logging.INFO, logger="raygents"):
        display.show(progress())
        display.close(progress(done=18, running=0, pending=0))
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["batch j", "batch j"]
    assert "18 completed" in caplog.records[-1].getMessage()


def test_without_logging_set_up_progress_lines_go_to_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logging.getLogger("raygents"), "isEnabledFor", lambda level: False)
    display = open_display(None, "j", 3, every_s=3600.0)
    display.show(progress())  # (not due yet)
    display.close(progress(done=18, running=0, pending=0))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "batch j: 19/19 ended (18 completed" in lines[0]


def test_on_a_terminal_progress_is_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    display = open_display(True, "tickets", 18)
    display.show(progress())
    display.close(progress(done=17, running=0, pending=0))
    assert "tickets" in screen.getvalue() and "18/18" in screen.getvalue()
