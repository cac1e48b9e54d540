"""raygents' log lines: the run each names, and their format in the Ray processes raygents starts.

While an agent actor drives a run, its run id and agent are in a context variable
(:func:`bind`); :class:`RunFilter` copies them onto every record of the ``raygents`` logger as
``run_id`` and ``agent`` (None outside a run), so a format string can use ``%(run_id)s``.
:func:`setup`, called where raygents starts a process's work (an agent actor, the
coordinator, the rate limiter), gives those records a handler: with
``RAYGENTS_LOG_FORMAT=json``, one JSON object per line (time, level, logger, message, run_id,
agent, exception); else, where nothing else handles them, a text line that names the run.
Ray workers inherit the environment of the raylet that starts them, which a local instance
takes from the driver that started it; on a cluster set the variable where ``ray start`` runs
or in the job's ``runtime_env`` ``env_vars``.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import logging
import os
import sys
from typing import Any

__all__ = [
    "FORMAT_ENV",
    "JsonFormatter",
    "RunFilter",
    "TextFormatter",
    "bind",
    "bound_run",
    "reset",
    "setup",
]

FORMAT_ENV = "RAYGENTS_LOG_FORMAT"
LOGGER = "raygents"

_run: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "raygents_run", default=None
)
"""The run (id, agent) the current task drives, if any."""
_handler: logging.Handler | None = None
"""The handler :func:`setup` gave the ``raygents`` logger in this process, if any."""


def bind(run_id: str, agent: str) -> None:
    """Name ``run_id`` on ``agent`` in the log records of the current task and of the tasks
    it starts from now on (an asyncio task has its own copy of the context)."""
    _run.set((run_id, agent))


def bound_run() -> str | None:
    """The id of the run the current task drives (:func:`bind`), or None outside a run; what
    a model served on the cluster routes a run's turns by."""
    bound = _run.get()
    return bound[0] if bound is not None else None


class RunFilter(logging.Filter):
    """Adds ``run_id`` and ``agent`` to records, from :func:`bind` (those given in a log
    call's ``extra`` win). Lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "run_id"):
            bound = _run.get()
            record.run_id, record.agent = bound if bound is not None else (None, None)
        elif not hasattr(record, "agent"):
            record.agent = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        created = datetime.datetime.fromtimestamp(record.created, tz=datetime.timezone.utc)
        doc: dict[str, Any] = {
            "time": created.isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "run_id": getattr(record, "run_id", None),
            "agent": getattr(record, "agent", None),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            doc["exception"] = record.exc_text
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message [run <id> agent <name>]``, the brackets where a run applies."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        run_id = getattr(record, "run_id", None)
        if run_id is None:
            return line
        head, sep, tail = line.partition("\n")  # (after the message, before a traceback)
        return f"{head} [run {run_id} agent {getattr(record, 'agent', None)}]{sep}{tail}"


def setup(env: dict[str, str] | None = None) -> None:
    """Give the ``raygents`` logger its run filter and, per ``RAYGENTS_LOG_FORMAT`` (read from
    ``env``, default the environment), a handler on stderr: ``json`` replaces whatever else
    would print its records; text is added only where no handler would print them (a bare
    Ray worker prints only warnings, without level or run). Idempotent."""
    global _handler
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(f, RunFilter) for f in logger.filters):
        logger.addFilter(RunFilter())
    if _handler is not None:
        return
    fmt = (env if env is not None else os.environ).get(FORMAT_ENV, "").strip().lower()
    if fmt == "json":
        formatter: logging.Formatter = JsonFormatter()
    elif logger.handlers or logging.getLogger().handlers:
        return  # someone configured logging here: records carry run_id for their format
    else:
        formatter = TextFormatter()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    handler.addFilter(RunFilter())  # (records of child loggers skip the logger's filter)
    logger.addHandler(handler)
    logger.propagate = fmt != "json"
    _handler = handler


def reset() -> None:
    """Undo :func:`setup` in this process (its handler and filters go)."""
    global _handler
    logger = logging.getLogger(LOGGER)
    for f in [f for f in logger.filters if isinstance(f, RunFilter)]:
        logger.removeFilter(f)
    if _handler is not None:
        logger.removeHandler(_handler)
        logger.propagate = True
        _handler = None
