"""raygents.telemetry.logs: the run a log record names, the JSON and text formats, setup in a
process."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from raygents.telemetry import logs


@pytest.fixture
def clean() -> Iterator[None]:
    logs.reset()
    yield
    logs.reset()


def _record(msg: str = "run %s moved", *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("raygents", logging.WARNING, __file__, 1, msg, args or ("r1",), None)
    record.__dict__.update(extra)
    return record


def _filtered(record: logging.LogRecord) -> logging.LogRecord:
    assert logs.RunFilter().filter(record) is True
    return record


def test_a_record_outside_a_run_names_none() -> None:
    record = _filtered(_record())
    assert (record.run_id, record.agent) == (None, None)  # type: ignore[attr-defined]


def test_a_bound_run_is_named_in_its_task_and_the_tasks_it_starts_only() -> None:
    async def run(run_id: str, seen: dict[str, object]) -> None:
        logs.bind(run_id, "triage")
        await asyncio.sleep(0)  # (the other run binds meanwhile)
        seen[run_id] = _filtered(_record()).run_id  # type: ignore[attr-defined]
        child = asyncio.ensure_future(asyncio.sleep(0, _filtered(_record())))
        seen[run_id + "/child"] = (await child).run_id

    async def main() -> dict[str, object]:
        seen: dict[str, object] = {}
        await asyncio.gather(run("r1", seen), run("r2", seen))
        seen["outside"] = _filtered(_record()).run_id  # type: ignore[attr-defined]
        return seen

    assert asyncio.run(main()) == {
        "r1": "r1",
        "r1/child": "r1",
        "r2": "r2",
        "r2/child": "r2",
        "outside": None,
    }


def test_a_run_given_in_extra_wins_over_the_bound_one() -> None:
    async def main() -> logging.LogRecord:
        logs.bind("r1", "triage")
        return _filtered(_record(run_id="r9"))

    record = asyncio.run(main())
    assert (record.run_id, record.agent) == ("r9", None)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("run_id", "agent"), [("r1", "triage"), (None, None)], ids=["in a run", "outside"]
)
def test_json_lines_hold_the_fields(run_id: str | None, agent: str | None) -> None:
    record = _record("run %s: bad\nnews", "r1", run_id=run_id, agent=agent)
    line = logs.JsonFormatter().format(record)
    assert "\n" not in line
    doc = json.loads(line)
    assert doc.pop("time").endswith("+00:00")
    assert doc == {
        "level": "WARNING",
        "logger": "raygents",
        "message": "run r1: bad\nnews",
        "run_id": run_id,
        "agent": agent,
    }


def test_a_json_line_carries_the_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "raygents", logging.ERROR, __file__, 1, "failed", None, sys.exc_info()
        )
    doc = json.loads(logs.JsonFormatter().format(_filtered(record)))
    assert doc["level"] == "ERROR"
    assert "Traceback" in doc["exception"]
    assert "ValueError: boom" in doc["exception"]


def test_a_text_line_names_the_run_before_any_traceback() -> None:
    formatter = logs.TextFormatter()
    line = formatter.format(_record(run_id="r1", agent="triage"))
    assert line.endswith("WARNING raygents: run r1 moved [run r1 agent triage]")
    assert formatter.format(_record(run_id=None, agent=None)).endswith("raygents: run r1 moved")
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record(run_id="r1", agent="triage")
        record.exc_info = sys.exc_info()
    first, rest = formatter.format(record).split("\n", 1)
    assert first.endswith("[run r1 agent triage]")
    assert rest.startswith("Traceback")


def test_setup_json_prints_one_object_per_line_for_raygents_and_its_children(
    clean: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.setup({logs.FORMAT_ENV: "json"})
    logs.setup({logs.FORMAT_ENV: "json"})  # (idempotent: one handler)

    async def main() -> None:
        logs.bind("r1", "triage")
        logging.getLogger("raygents").warning("run %s stalled", "r1")
        logging.getLogger("raygents.sessions").error("session lost")

    asyncio.run(main())
    logging.getLogger("raygents").warning("no run here")
    lines = capsys.readouterr().err.splitlines()
    docs = [json.loads(line) for line in lines]
    assert [(d["logger"], d["message"], d["run_id"], d["agent"]) for d in docs] == [
        ("raygents", "run r1 stalled", "r1", "triage"),
        ("raygents.sessions", "session lost", "r1", "triage"),
        ("raygents", "no run here", None, None),
    ]
    assert logging.getLogger("raygents").propagate is False


def test_setup_text_adds_a_handler_only_where_none_would_print(
    clean: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [logging.NullHandler()])
    logs.setup({})
    assert logging.getLogger("raygents").handlers == []  # configured here: left as it is
    logs.reset()
    monkeypatch.setattr(root, "handlers", [])  # a bare Ray worker
    logs.setup({})
    logging.getLogger("raygents").warning("plain")
    err = capsys.readouterr().err
    assert err.rstrip().endswith("WARNING raygents: plain")
    assert logging.getLogger("raygents").propagate is True


def test_reset_undoes_setup(clean: None) -> None:
    logger = logging.getLogger("raygents")
    logs.setup({logs.FORMAT_ENV: "JSON"})
    assert len(logger.handlers) == 1
    assert any(isinstance(f, logs.RunFilter) for f in logger.filters)
    logs.reset()
    assert logger.handlers == []
    assert logger.filters == []
    assert logger.propagate is True
