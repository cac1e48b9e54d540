"""How the ``raygents`` command prints: run rows and run details as plain dicts, shown as
tables and text, or as JSON (one document, or one line per event for streams).

Every text a run or a store gave goes through :func:`~raygents.cli.terminal.visible` on its
way to the terminal (JSON through :func:`~raygents.cli.terminal.json_text`): a tool result or
a planted record cannot redraw what the operator reads before they approve a call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

from raygents.cli.terminal import json_text, visible
from raygents.core.approvals import PendingApproval
from raygents.core.doubt import InDoubt
from raygents.core.events import RunEvent
from raygents.core.messages import Message, Usage

__all__ = [
    "ALL_RUN_COLUMNS",
    "GC_COLUMNS",
    "RUN_COLUMNS",
    "detail",
    "event_row",
    "message_row",
    "pending_text",
    "print_json",
    "render_detail",
    "render_event",
    "render_table",
    "render_tree",
    "run_row",
    "tree_node",
    "usage_text",
    "wall_seconds",
    "wall_text",
]

RUN_COLUMNS = ("run_id", "status", "agent", "turns", "updated", "last_error")
"""The columns of the run table, in order (the keys of :func:`run_row`'s dicts)."""
ALL_RUN_COLUMNS = ("run_id", "parent", *RUN_COLUMNS[1:])
"""The columns of ``raygents runs --all``: agent-as-tool child runs too, with their parents."""
GC_COLUMNS = ("run_id", "status", "agent", "ended", "keys", "error")
"""The columns of ``raygents gc``'s table."""
_CELL = 60  # characters of a table cell, at most (an error's text is cut there)


def run_row(
    run_id: str,
    status: str,
    agent: str,
    turns: int,
    updated_at: float | None,
    last_error: str | None,
) -> dict[str, Any]:
    """A row of the run table (``updated`` as an ISO time in UTC, or None when not known)."""
    return {
        "run_id": run_id,
        "status": status,
        "agent": agent,
        "turns": turns,
        "updated": _iso(updated_at),
        "last_error": last_error,
    }


def _iso(at: float | None) -> str | None:
    """``at`` as an ISO time in UTC; None where not known, or not a time of a calendar year
    1 to 9999 (a record's ``at`` is any finite number its writer put there)."""
    if not at:
        return None
    try:
        when = time.gmtime(at)
    except (OverflowError, OSError, ValueError):
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", when) if 1 <= when.tm_year <= 9999 else None


def render_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """``rows`` as an aligned text table with a header line (empty cells as ``-``)."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    header = [c.upper().replace("_", " ") for c in columns]
    widths = [max(len(text) for text in column) for column in zip(header, *cells, strict=False)]
    lines = [header, *cells]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    text = visible(" ".join(str(value).split()))  # one line
    return text if len(text) <= _CELL else text[: _CELL - 3] + "..."


def usage_text(usage: Mapping[str, Any] | None) -> str:
    """A usage's counts in one line (and its cost, where a price was known)."""
    if not usage:
        return "-"
    total = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    cost = usage.get("cost_usd")
    return (
        f"{usage.get('requests', 0)} requests, {usage.get('input_tokens', 0)} input + "
        f"{usage.get('output_tokens', 0)} output = {total} tokens"
        + ("" if cost is None else f", ${cost:.6f}")
    )


def message_row(message: Message) -> dict[str, Any]:
    """A conversation message as plain data."""
    row: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        row["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        row["tool_call_id"] = message.tool_call_id
    return row


def detail(
    run_id: str,
    *,
    status: str,
    agent: str,
    turns: int,
    usage: Usage | Mapping[str, int] | None = None,
    last_error: str | None = None,
    output: str | None = None,
    pending: Iterable[PendingApproval] = (),
    in_doubt: Iterable[InDoubt] = (),
    messages: Iterable[Message] | None = None,
    source: str = "cluster",
) -> dict[str, Any]:
    """What ``raygents show`` tells about a run, as plain data (``messages`` None: the
    conversation is not known, e.g. a completed run whose records are gone)."""
    if isinstance(usage, Usage):
        usage = usage.model_dump(mode="json")
    return {
        "run_id": run_id,
        "status": status,
        "agent": agent,
        "turns": turns,
        "usage": dict(usage) if usage is not None else None,
        "last_error": last_error,
        "output": output,
        "pending": [p.model_dump(mode="json") for p in pending],
        "in_doubt": [d.model_dump(mode="json") for d in in_doubt],
        "messages": None if messages is None else [message_row(m) for m in messages],
        "source": source,
    }


def render_detail(doc: Mapping[str, Any], last: int = 20) -> str:
    """``raygents show``'s text for a :func:`detail`, with the conversation's ``last``
    messages (JSON output has them all)."""
    lines = [
        f"run         {visible(doc['run_id'])}",
        f"status      {visible(doc['status'])}",
        f"agent       {visible(doc['agent'])}",
        f"turns       {visible(doc['turns'])}",
        f"usage       {usage_text(doc.get('usage'))}",
        f"last error  {_indent(doc.get('last_error') or '-', 12)}",
    ]
    if doc.get("output") is not None:
        lines.append(f"output      {_indent(doc['output'], 12)}")
    pending = doc.get("pending") or []
    if pending:
        lines.append("pending approvals")
        lines.extend(f"  {pending_text(p, doc['run_id'])}" for p in pending)
    doubts = doc.get("in_doubt") or []
    if doubts:
        lines.append("calls in doubt (may or may not have had their effect)")
        lines.extend(f"  {doubt_text(d, doc['run_id'])}" for d in doubts)
    messages = doc.get("messages")
    if messages is None:
        lines.append("conversation  (not kept)")
    else:
        lines.append(f"conversation  ({len(messages)} messages)")
        if len(messages) > last:
            lines.append(f"  ... {len(messages) - last} earlier messages (--json has them)")
        lines.extend(_conversation_line(m) for m in messages[max(0, len(messages) - last) :])
    return "\n".join(lines)


def pending_text(p: Mapping[str, Any], run_id: str) -> str:
    """A pending call of run ``run_id`` (a ``PendingApproval``'s fields) in one line, all of
    it: its id, whose call it is (and in which agent-as-tool child run, where it is a
    child's) and its arguments."""
    child = p.get("run_id") not in (None, "", run_id)
    where = f" in run {visible(p['run_id'])}" if child else ""
    return (
        f"{visible(p['call_id'])}  {visible(p['agent_name'])}{where}: "
        f"{visible(p['tool_name'])}({visible(p['arguments'])})"
    )


def doubt_text(d: Mapping[str, Any], run_id: str) -> str:
    """A call in doubt of run ``run_id`` (an ``InDoubt``'s fields) in one line: the pending
    call's, then its idempotency key and when it started."""
    started = datetime.fromtimestamp(d["started_at"], timezone.utc).isoformat(timespec="seconds")
    return f"{pending_text(d, run_id)}  key {visible(d['idempotency_key'])}  started {started}"


def _conversation_line(row: Mapping[str, Any]) -> str:
    role = visible(row["role"])
    parts = []
    if row.get("tool_call_id"):
        parts.append(f"[{visible(row['tool_call_id'])}]")
    if row.get("content"):
        parts.append(visible(row["content"], lines=True))
    for c in row.get("tool_calls") or ():
        parts.append(f"-> {visible(c['name'])}({visible(c['arguments'])}) [{visible(c['id'])}]")
    return f"  {role:<10} {_hang(' '.join(parts), 13)}"


def _indent(text: Any, by: int) -> str:
    """``text`` made visible on lines of its own, each after the first indented ``by``."""
    return _hang(visible(text, lines=True), by)


def _hang(text: str, by: int) -> str:
    return text.replace("\n", "\n" + " " * by)


def wall_seconds(
    status: str, started_at: float | None, updated_at: float, now: float | None = None
) -> float | None:
    """A run's wall time: from its first dispatch to its last update (the end of a run that
    stopped), or to ``now`` (default: the time now) while it runs; None where when it started
    is not known (or the two times are too far apart to be times of one run)."""
    if started_at is None:
        return None
    end = (time.time() if now is None else now) if status in ("running", "pending") else updated_at
    wall = max(0.0, end - started_at)
    return wall if math.isfinite(wall) else None


def wall_text(seconds: float | None) -> str:
    """A wall time for people: ``0.42s``, ``12.3s``, ``4m05s``, ``2h07m``; ``-`` if unknown."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}m{int(seconds % 60):02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def tree_node(doc: Mapping[str, Any], wall_s: float | None = None) -> dict[str, Any]:
    """A run's node in ``show --tree``: its :func:`detail` without the conversation, with its
    wall time (``wall_s``, None where not known), the agents it handed off to and its
    agent-as-tool children (filled in by the caller); ``tokens`` None where its usage is not
    known (a completed child's records are gone)."""
    usage = doc.get("usage")
    tokens = None if usage is None else usage["input_tokens"] + usage["output_tokens"]
    return {
        "run_id": doc["run_id"],
        "status": doc["status"],
        "agent": doc["agent"],
        "turns": doc["turns"],
        "tokens": tokens,
        "wall_s": None if wall_s is None else round(wall_s, 3),
        "handoffs": [],
        "children": [],
    }


def render_tree(node: Mapping[str, Any]) -> str:
    """``show --tree``'s text: a line per run, its children drawn below it."""
    return "\n".join(_tree_lines(node, ""))


def _tree_lines(node: Mapping[str, Any], indent: str) -> list[str]:
    via = f"{visible(node['tool'])}[{visible(node['call_id'])}]  " if "tool" in node else ""
    handoffs = "".join(f" -> {visible(target)}" for target in node["handoffs"])
    lines = [
        f"{via}{visible(node['run_id'])}  {visible(node['status'])}  {visible(node['agent'])}  "
        f"handoffs:{handoffs or ' -'}  turns {node['turns']}  tokens {_cell(node['tokens'])}  "
        f"wall {wall_text(node.get('wall_s'))}"
    ]
    children = node["children"]
    for i, child in enumerate(children):
        last = i == len(children) - 1
        sub = _tree_lines(child, "")
        lines.append(indent + ("└─ " if last else "├─ ") + sub[0])
        more = indent + ("   " if last else "│  ")
        lines.extend(more + line for line in sub[1:])
    return lines


def event_row(event: RunEvent) -> dict[str, Any]:
    """A run event as plain data (its fields that are set)."""
    return event.model_dump(mode="json", exclude_defaults=True)


def render_event(event: RunEvent) -> str:
    """One line for a run event: its seq (where numbered), type, agent, what it says, and the
    agent-as-tool calls leading to a child run's event."""
    what = {
        "tool_start": lambda e: (
            f"{visible(e.tool_name)}({visible(e.arguments)}) [{visible(e.call_id)}]"
        ),
        "tool_end": lambda e: f"{visible(e.tool_name)} [{visible(e.call_id)}] -> {_cell(e.result)}",
        "handoff": lambda e: f"-> {visible(e.to_agent)}",
        "complete": lambda e: _cell(e.output),
        "error": lambda e: _cell(e.error),
        "suspended": lambda e: _cell(e.error),
        "checkpoint": lambda e: f"seq {visible((e.data or {}).get('seq'))}",
        "llm_delta": lambda e: visible(" ".join((e.delta or "").split())),
        "lagged": lambda e: f"missed {visible((e.data or {}).get('missed'))}",
        "recovered": lambda e: _cell(e.error),
        "compacted": _compacted,
    }.get(event.type)
    text = what(event) if what is not None else ""
    if event.path:
        text += f"  (in {visible('/'.join(event.path))})"
    number = f"{event.seq:>6} " if event.seq is not None else ""
    line = f"{number}{visible(event.type):<12} {visible(event.agent_name or '-'):<14} {text}"
    return line.rstrip()


def _compacted(event: RunEvent) -> str:
    data = event.data or {}
    before, after = visible(data.get("tokens_before")), visible(data.get("tokens_after"))
    return f"{visible(data.get('policy'))}: {before} -> {after} tokens"


def print_runs(
    rows: Sequence[Mapping[str, Any]], as_json: bool, out: TextIO, parents: bool = False
) -> None:
    """The rows of ``raygents runs``: one JSON document, or a table (``parents``: with the
    column of their agent-as-tool parents)."""
    if as_json:
        print_json(list(rows), out)
    else:
        out.write(render_table(rows, ALL_RUN_COLUMNS if parents else RUN_COLUMNS) + "\n")


def print_json(value: Any, out: TextIO) -> None:
    """``value`` as one JSON document (one line) on ``out``: exact, readable text as it is,
    and what a terminal would act on or hide escaped (see :func:`terminal.json_text`)."""
    out.write(json_text(value) + "\n")
    out.flush()


def print_gc(
    rows: Sequence[Mapping[str, Any]],
    older_than_s: float,
    dry_run: bool,
    as_json: bool,
    out: TextIO,
) -> None:
    """What ``raygents gc`` deleted (or would, ``dry_run``): rows of ``retention.Expired``
    (with an ``error`` where a delete failed), as one JSON document or a line and a table;
    the batch jobs whose ledger shards went (rows of ``retention.ExpiredLedger``); and the
    runs it kept because they cannot be read (rows of ``retention.Unreadable``)."""
    from raygents.records.retention import describe

    kept = [
        {
            "run_id": row["run_id"],
            "status": row["status"],
            "keys": row["keys"],
            "why": row["unreadable"],
        }
        for row in rows
        if "unreadable" in row
    ]
    runs = [
        {
            "run_id": row["run_id"],
            "status": row["status"],
            "agent": row["agent_name"],
            "ended": _iso(row["ended_at"]),
            "keys": row["keys"],
            **({"error": row["error"]} if "error" in row else {}),
        }
        for row in rows
        if "unreadable" not in row and "job_id" not in row
    ]
    jobs = [row for row in rows if "job_id" in row]
    if as_json:
        doc = {
            "older_than_s": older_than_s,
            "dry_run": dry_run,
            "runs": runs,
            "unreadable": kept,
            "jobs": [{**row, "written_at": _iso(row["written_at"])} for row in jobs],
        }
        print_json(doc, out)
        return
    failed = sum(1 for run in runs if "error" in run)
    verb = "would delete" if dry_run else "deleted"
    out.write(
        f"{verb} {len(runs) - failed} run(s) that ended over {describe(older_than_s)} ago"
        + (f"; {failed} could not be deleted" if failed else "")
        + "\n"
    )
    if runs:
        columns = GC_COLUMNS if failed else GC_COLUMNS[:-1]
        out.write(render_table(runs, columns) + "\n")
    if jobs:
        bad = sum(1 for row in jobs if "error" in row)
        out.write(
            f"{verb} the ledger shards of {len(jobs) - bad} batch job(s) written over "
            f"{describe(older_than_s)} ago"
            + (f"; those of {bad} could not be deleted" if bad else "")
            + "\n"
        )
        for row in jobs:
            error = f"  {visible(row['error'])}" if "error" in row else ""
            written = _iso(row["written_at"]) or "-"
            out.write(f"  {visible(row['job_id'])}  {written}  {row['keys']} shard(s){error}\n")
    if kept:
        out.write(
            f"kept {len(kept)} run(s) that cannot be read, whatever their age (when they ended "
            "is unknown); inspect or remove them by hand:\n"
        )
        for run in kept:
            why = visible(run["why"]).removeprefix("unreadable: ")
            out.write(f"  {visible(run['run_id'])}  {visible(run['status'])}  {why}\n")


BUDGET_COLUMNS = ("tenant", "tokens", "tokens_per_day", "usd", "usd_per_day")


def print_budgets(report: Mapping[str, Any], as_json: bool, out: TextIO) -> None:
    """What ``raygents budgets`` shows: the day, then each tenant's spending and budgets, as
    one JSON document or a table (dollars to the cent's ten-thousandth)."""
    if as_json:
        print_json(report, out)
        return
    rows = [
        {
            **row,
            "usd": f"{row['usd']:.6f}",
            "usd_per_day": None if row["usd_per_day"] is None else f"{row['usd_per_day']:.6f}",
        }
        for row in report["tenants"]
    ]
    out.write(f"spent on {visible(report['day'])} (UTC)\n")
    out.write(render_table(rows, BUDGET_COLUMNS) + "\n")
