"""The ``raygents history``, ``fork`` and ``replay`` commands: a run's checkpoints, a new run
from one of them, and the check of recorded runs against new agent code."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from raygents.cli.output import print_json, render_table
from raygents.cli.runs import UsageError
from raygents.cli.terminal import visible
from raygents.errors import RaygentsError

__all__ = ["COMMANDS", "add_commands", "run"]

COMMANDS = ("history", "fork", "replay")
_COLUMNS = ("seq", "turn", "agent", "at", "reason", "messages", "last")
_STORE_HELP = "read this store (file://, s3://) with no cluster"
_AGENT_HELP = "MODULE:ATTR of an agent whose graph holds the run's agents"


def add_commands(
    sub: Any,
    common: argparse.ArgumentParser,
    waits: argparse.ArgumentParser,
    run_id: Callable[[str], str],
) -> None:
    """Add the subcommands to ``sub`` (the ``raygents`` command's subparsers)."""
    history = sub.add_parser(
        "history", parents=[common], help="a run's durable checkpoints, oldest first"
    )
    history.add_argument("run_id", type=run_id, metavar="RUN_ID")
    history.add_argument("--store", help=_STORE_HELP)

    fork = sub.add_parser(
        "fork",
        parents=[common, waits],
        help="start a new run from a run's checkpoint (its newest by default), with new input; "
        "followed until it stops, since this command drives it",
    )
    fork.add_argument("run_id", type=run_id, metavar="RUN_ID")
    fork.add_argument("--agent", required=True, help=_AGENT_HELP)
    fork.add_argument("--at", type=int, metavar="SEQ", help="the checkpoint's seq (see history)")
    fork.add_argument("--input", metavar="TEXT", help="new user input for the fork")
    fork.add_argument("--run-id", dest="new_run_id", type=run_id, help="the fork's run id")

    replay = sub.add_parser(
        "replay",
        parents=[common],
        help="check that an agent graph makes runs' recorded decisions again (no model or "
        "tool is called); exit status 1 at a divergence",
    )
    replay.add_argument("run_ids", type=run_id, nargs="+", metavar="RUN_ID")
    replay.add_argument("--agent", required=True, help=_AGENT_HELP)
    replay.add_argument("--store", help=_STORE_HELP)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run one of :data:`COMMANDS`; returns its exit status."""
    from raygents.cli.runs import connect, disconnect, load_agent

    store = getattr(args, "store", None)
    if store is not None and args.address:
        raise UsageError("--store reads the store alone: leave out --address")
    if hasattr(args, "agent"):
        args.agent = load_agent(args.agent)
    if store is not None:
        return _command(args, out)
    connect(args.address, args.namespace)
    try:
        return _command(args, out)
    finally:
        disconnect()


def _command(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "history":
        return _history(args, out)
    if args.command == "fork":
        return _fork(args, out)
    return _replay(args, out)


def _history(args: argparse.Namespace, out: TextIO) -> int:
    import raygents as rg

    rows = [
        {
            "seq": c.seq,
            "turn": c.turn,
            "agent": c.agent_name,
            "at": c.at.isoformat(timespec="seconds"),
            "reason": c.reason,
            "messages": c.messages,
            "last": c.last,
        }
        for c in rg.history(args.run_id, store=args.store)
    ]
    if args.json:
        print_json(rows, out)
    else:
        out.write(render_table(rows, _COLUMNS) + "\n")
    return 0


def _fork(args: argparse.Namespace, out: TextIO) -> int:
    import raygents as rg
    from raygents.cli.runs import _started

    handle = rg.fork(
        args.run_id, agent=args.agent, at=args.at, input=args.input, run_id=args.new_run_id
    )
    return _started(handle, args, out)


def _replay(args: argparse.Namespace, out: TextIO) -> int:
    import raygents as rg

    status, docs = 0, []
    for run_id in args.run_ids:
        doc: dict[str, Any] = {"run_id": run_id}
        try:
            report = rg.replay(run_id, agent=args.agent, store=args.store)
        except RaygentsError as exc:
            doc |= {"ok": False, "error": str(exc)}
            line = f"{run_id}: cannot replay: {exc}"
        else:
            doc |= {"ok": report.ok, "checked": report.checked}
            if not report.ok:
                doc |= {"turn": report.turn, "expected": report.expected, "got": report.got}
            line = str(report)
        status = status if doc["ok"] else 1
        docs.append(doc)
        if not args.json:
            out.write(visible(line) + "\n")
    if args.json:
        print_json(docs, out)
    return status
