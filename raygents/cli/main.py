"""The ``raygents`` command: its arguments, and which subcommand runs where (on a running
namespace, or from a checkpoint store alone); exit status 0 on success, 1 when the run is not
found or the action failed, 2 on bad usage, 130 when interrupted and 141 when what reads its
output goes away first."""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
from typing import TextIO

__all__ = ["main", "parser"]

_EPILOG = (
    "Subcommands join a running namespace: --address (else $RAY_ADDRESS, else the Ray "
    "instance running on this machine) and --namespace. 'runs', 'show', 'gc', 'history' and "
    "'replay' work on a checkpoint store alone with --store (no cluster)."
)

_WAIT_HELP = (
    "wait until the run stops (ends, suspends or waits for approval): always done, since the "
    "resumed run is driven by this command"
)


def _run_id(text: str) -> str:
    from raygents.errors import UserError
    from raygents.ids import validate_id

    try:
        validate_id(text, "run id")
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _tenant(text: str) -> str:
    from raygents.errors import UserError
    from raygents.ids import validate_id

    try:
        validate_id(text, "tenant")
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _status(text: str) -> str:
    from raygents.records.runinfo import table_status

    try:
        return table_status(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def _seconds(text: str) -> float:
    """A wait in seconds: positive, and no longer than a thread can wait (about 292 years;
    a longer one, or ``inf``, would fail only once the command had acted)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= threading.TIMEOUT_MAX:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds up to {threading.TIMEOUT_MAX:.0f}, got {text!r}"
        )
    return value


def _duration(text: str) -> float:
    from raygents.records.retention import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not math.isfinite(seconds):  # (hundreds of digits: no time, and no JSON number)
        raise argparse.ArgumentTypeError(f"expected a finite duration, got {text!r}")
    return seconds


def parser() -> argparse.ArgumentParser:
    """The command's argument parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--address", help="Ray address (default: $RAY_ADDRESS, else this machine's)"
    )
    common.add_argument("--namespace", default="raygents", help="raygents namespace")
    common.add_argument("--json", action="store_true", help="JSON output (JSON Lines for streams)")
    waits = argparse.ArgumentParser(add_help=False)
    waits.add_argument("--timeout", type=_seconds, default=300.0, help="seconds to wait at most")

    top = argparse.ArgumentParser(prog="raygents", description="LLM agents on Ray.", epilog=_EPILOG)
    sub = top.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the fan-out demo on a local Ray instance (offline by default)")

    runs = sub.add_parser("runs", parents=[common], help="list runs, newest first")
    runs.add_argument("--status", type=_status, help="only runs with this status")
    runs.add_argument("--agent", help="only runs whose current agent has this name")
    runs.add_argument("--limit", type=_positive, help="at most this many runs")
    runs.add_argument(
        "--all",
        action="store_true",
        help="agent-as-tool child runs too (with their parents); by default top-level runs only",
    )
    runs.add_argument("--store", help="read this store (file://, s3://) with no cluster")

    show = sub.add_parser("show", parents=[common], help="a run's status, usage and conversation")
    show.add_argument("run_id", type=_run_id, metavar="RUN_ID")
    show.add_argument("--store", help="read this store (file://, s3://) with no cluster")
    show.add_argument(
        "--tree", action="store_true", help="the run with its handoffs and agent-as-tool children"
    )

    suspend = sub.add_parser("suspend", parents=[common, waits], help="suspend a running run")
    suspend.add_argument("run_id", type=_run_id, metavar="RUN_ID")

    agent_help = "MODULE:ATTR of an agent whose graph holds the run's agents"
    cancel = sub.add_parser(
        "cancel",
        parents=[common, waits],
        help="stop a run that has not ended: running, suspended, awaiting approval or in doubt "
        "(its records stay)",
    )
    cancel.add_argument("run_id", type=_run_id, metavar="RUN_ID")

    resume = sub.add_parser("resume", parents=[common, waits], help="resume a suspended run")
    resume.add_argument("run_id", type=_run_id, metavar="RUN_ID")
    resume.add_argument("--agent", required=True, help=agent_help)
    resume.add_argument("--wait", action="store_true", help=_WAIT_HELP)

    approve = sub.add_parser(
        "approve", parents=[common, waits], help="decide a run's pending tool calls and resume it"
    )
    approve.add_argument("run_id", type=_run_id, metavar="RUN_ID")
    approve.add_argument("--agent", required=True, help=agent_help)
    approve.add_argument(
        "--approve", action="append", default=[], metavar="CALL_ID", help="approve this call"
    )
    approve.add_argument(
        "--deny", action="append", default=[], metavar="CALL_ID", help="deny this call"
    )
    approve.add_argument("--all", action="store_true", help="approve every pending call")
    approve.add_argument("--wait", action="store_true", help=_WAIT_HELP)

    resolve = sub.add_parser(
        "resolve",
        parents=[common, waits],
        help="resolve a run's tool calls in doubt (rerun, or give their outcome) and resume it",
    )
    resolve.add_argument("run_id", type=_run_id, metavar="RUN_ID")
    resolve.add_argument("--agent", required=True, help=agent_help)
    resolve.add_argument(
        "--rerun", action="append", default=[], metavar="CALL_ID", help="run it again (same key)"
    )
    resolve.add_argument(
        "--done",
        action="append",
        default=[],
        metavar="CALL_ID=TEXT",
        help="it took effect: TEXT is its result",
    )
    resolve.add_argument(
        "--failed",
        action="append",
        default=[],
        metavar="CALL_ID=TEXT",
        help="it did not take effect: TEXT is its error result",
    )
    resolve.add_argument("--wait", action="store_true", help=_WAIT_HELP)

    gc = sub.add_parser(
        "gc",
        parents=[common],
        help="delete the records and kept results of runs that ended long enough ago",
    )
    gc.add_argument(
        "--older-than",
        type=_duration,
        metavar="AGE",
        help="runs that ended more than AGE ago (7d, 12h, 30m, 45s; default: the "
        "namespace's retention, else 7d); running, suspended, awaiting-approval and in-doubt runs "
        "are never touched",
    )
    gc.add_argument("--dry-run", action="store_true", help="only print what would be deleted")
    gc.add_argument("--store", help="work on this store (file://, s3://) with no cluster")

    served = sub.add_parser("serve", help="serve agents over HTTP (needs raygents[serve])")
    served.add_argument(
        "target", metavar="MODULE:ATTR", help="an agent, a list of agents or {name: agent}"
    )
    served.add_argument(
        "--address", help="Ray address (default: $RAY_ADDRESS, else a new local instance)"
    )
    served.add_argument("--namespace", default="raygents", help="raygents namespace")
    served.add_argument("--host", default="127.0.0.1", help="where to listen (default: loopback)")
    served.add_argument("--port", type=_positive, default=8000, help="HTTP port (default: 8000)")
    served.add_argument("--replicas", type=_positive, default=1, help="HTTP replicas")
    served.add_argument("--route-prefix", default="/", help="where the API lives (default: /)")

    budgets = sub.add_parser(
        "budgets", parents=[common], help="what each tenant spent today against its daily budget"
    )
    budgets.add_argument("--tenant", type=_tenant, help="only this tenant")
    events = sub.add_parser("events", parents=[common], help="a run's events")
    events.add_argument("run_id", type=_run_id, metavar="RUN_ID")
    events.add_argument("--follow", action="store_true", help="keep printing until the run ends")

    from raygents.cli.history import add_commands  # history, fork, replay

    add_commands(sub, common, waits, _run_id)
    return top


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``raygents`` console script; returns the exit status."""
    args = parser().parse_args(argv)
    out = out or sys.stdout
    if args.command == "demo":
        from raygents.cli.demo import main as demo

        return demo()
    from raygents.cli.runs import CommandFailed, UsageError
    from raygents.errors import RaygentsError

    try:
        if args.command == "serve":
            from raygents.cli.serve import serve

            return serve(args, out)
        if args.command in ("history", "fork", "replay"):
            from raygents.cli import history

            return history.run(args, out)
        if getattr(args, "store", None) is not None:  # (an empty one too: never the cluster)
            return _from_store(args, out)
        return _on_cluster(args, out)
    except UsageError as exc:
        _say(f"{args.command}: error: {exc}")
        return 2
    except (CommandFailed, RaygentsError) as exc:
        _say(f"{args.command}: {exc}")
        return 1
    except KeyboardInterrupt:
        print(f"raygents {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence(out)
        return 141


def _say(text: str) -> None:
    """A line on stderr: what an error says may quote a run, a store or an argument, so it
    is made visible as everything else the command prints."""
    from raygents.cli.terminal import visible

    print(f"raygents {visible(text, lines=True)}", file=sys.stderr)


def _silence(out: TextIO) -> None:
    """Send what is left of ``out`` nowhere: its reader went away (``raygents events | head``),
    and the interpreter's flush at exit would fail on it too."""
    try:
        fileno = out.fileno()
    except (AttributeError, OSError, ValueError):  # (not a file: nothing is flushed at exit)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fileno)
    finally:
        os.close(devnull)


def _from_store(args: argparse.Namespace, out: TextIO) -> int:
    from raygents.cli.output import print_gc, print_json, print_runs, render_detail
    from raygents.cli.runs import UsageError
    from raygents.cli.store import StoreReader
    from raygents.records.retention import DEFAULT_GC_S

    if args.address:
        raise UsageError("--store reads the store alone: leave out --address")
    if getattr(args, "tree", False):
        raise UsageError("--tree needs the cluster: leave out --store")
    reader = StoreReader(args.store)
    if args.command == "gc":
        older_than = DEFAULT_GC_S if args.older_than is None else args.older_than
        rows = reader.gc(older_than, args.dry_run)
        print_gc(rows, older_than, args.dry_run, args.json, out)
        return 1 if any("error" in row for row in rows) else 0
    if args.command == "show":
        doc = reader.show(args.run_id)
        if args.json:
            print_json(doc, out)
        else:
            out.write(render_detail(doc) + "\n")
        return 0
    rows = [
        row
        for row in reader.runs()
        if args.status in (None, row["status"])
        and args.agent in (None, row["agent"])
        and (args.all or row["parent"] is None)
    ][: args.limit]
    if not args.all:
        rows = [{k: v for k, v in row.items() if k != "parent"} for row in rows]
    print_runs(rows, args.json, out, parents=args.all)
    return 0


def _on_cluster(args: argparse.Namespace, out: TextIO) -> int:
    from raygents.cli.runs import check, connect, disconnect, run_command

    check(args)  # (bad usage is said before minutes of trying to join a cluster)
    connect(args.address, args.namespace)
    try:
        return run_command(args, out)
    finally:
        disconnect()


if __name__ == "__main__":
    sys.exit(main())
