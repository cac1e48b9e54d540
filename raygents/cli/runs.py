"""The ``raygents`` command's subcommands over a running namespace: list, show, suspend,
cancel, resume and approve runs, and print their events, through raygents' public API; and
``gc``, through the coordinator."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import socket
import sys
import time
from typing import Any, TextIO

import raygents as rg
from raygents.cli import resolve
from raygents.cli.output import (
    detail,
    event_row,
    pending_text,
    print_budgets,
    print_gc,
    print_json,
    print_runs,
    render_detail,
    render_event,
    render_tree,
    run_row,
    tree_node,
    wall_seconds,
)
from raygents.cli.terminal import visible
from raygents.errors import SUSPEND_FOR_CHECKPOINT, CheckpointError, RaygentsError, RunNotFound

__all__ = [
    "CommandFailed",
    "UsageError",
    "check",
    "connect",
    "disconnect",
    "import_spec",
    "load_agent",
    "run_command",
]

_ENDED = frozenset(
    ("completed", "failed", "suspended", "awaiting_approval", "in_doubt", "cancelled")
)
_WHICH_CALLS = "say which calls to approve: --approve ID, --deny ID or --all"
_LISTENING_S = 5.0  # how long a cluster's address may take to accept a connection
_SETTINGS_S = 120.0  # how long its coordinator may take to answer


class CommandFailed(Exception):
    """The command could not do what it was asked (exit status 1)."""


class UsageError(Exception):
    """The command was given something it cannot use (exit status 2)."""


def connect(address: str | None, namespace: str) -> Any:
    """Join the Ray cluster at ``address`` (else ``$RAY_ADDRESS``, else the instance already
    running on this machine) and raygents' coordinator of ``namespace``, with its settings;
    returns them. Starts nothing: a namespace with no coordinator is an error."""
    import ray

    target = address or os.environ.get("RAY_ADDRESS") or "auto"
    if target == "local":
        raise UsageError(
            "the address 'local' starts a new Ray instance; give the address of a running one"
        )
    _check_listening(target)
    joined = ray.is_initialized()  # (a process that uses Ray already keeps it)
    try:
        ray.init(address=target, logging_level=logging.ERROR, log_to_driver=False)
    except ValueError as exc:  # (not an address at all)
        if not joined:
            ray.shutdown()
        raise UsageError(f"cannot connect to Ray at {target!r}: {exc}") from None
    except (ConnectionError, RuntimeError) as exc:
        if not joined:
            ray.shutdown()  # (a Ray client that failed to connect is left half set up)
        raise CommandFailed(f"cannot connect to Ray at {target!r}: {exc}") from exc
    try:
        return _join(namespace, target)
    except BaseException:
        disconnect()
        raise


def _check_listening(target: str) -> None:
    """Fail at once where nothing listens at a ``[ray://]host:port`` address: Ray itself
    retries such an address for minutes. Other forms (``auto``) are Ray's to resolve.

    Raises:
        CommandFailed: the connection was refused, or not answered in ``_LISTENING_S``.
    """
    address = target.removeprefix("ray://")
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not host or not port.isdigit() or int(port) > 65535:
        return  # (Ray says what is wrong with it)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_LISTENING_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise CommandFailed(
            f"cannot connect to Ray at {target!r}: nothing answers at {address} ({why})"
        ) from None


def _join(namespace: str, target: str) -> Any:
    """Join raygents' coordinator of ``namespace`` on the connected cluster at ``target``."""
    import ray

    from raygents.runtime.link.coordinator_client import COORDINATOR_NAME, checked_settings

    try:
        coordinator = ray.get_actor(COORDINATOR_NAME, namespace=namespace)
    except ValueError:
        raise CommandFailed(
            f"no raygents coordinator in namespace {namespace!r} at {target!r} (pass "
            "--namespace, or --store to read a store without a cluster)"
        ) from None
    try:
        answer: Any = ray.get(coordinator.settings.remote(), timeout=_SETTINGS_S)
    except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as exc:
        why = "did not answer" if isinstance(exc, ray.exceptions.GetTimeoutError) else "died"
        raise CommandFailed(
            f"the raygents coordinator in namespace {namespace!r} at {target!r} {why} "
            f"(asked for its settings, waited up to {_SETTINGS_S:.0f} s)"
        ) from None
    settings = checked_settings(answer, namespace)
    rg.init(
        namespace=namespace,
        store=settings.store,
        durability=settings.durability,
        detached=settings.detached,
        handle_sigterm=False,
    )
    return settings


def disconnect() -> None:
    """Leave raygents and the Ray cluster (what runs there goes on)."""
    import ray

    rg.shutdown()
    if ray.is_initialized():
        ray.shutdown()


def load_agent(spec: str) -> rg.Agent:
    """The agent ``MODULE:ATTR`` names (the current directory is importable).

    Raises:
        UsageError: it does not name an importable ``Agent``.
    """
    value = import_spec(spec, "--agent", "the agent")
    if not isinstance(value, rg.Agent):
        raise UsageError(f"{spec!r} is a {type(value).__name__}, not a raygents Agent")
    return value


def import_spec(spec: str, option: str, what: str) -> Any:
    """What ``MODULE:ATTR`` names (the current directory is importable); ``option`` and
    ``what`` name it in errors.

    Raises:
        UsageError: it does not name something importable.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr or module_name.startswith("."):
        raise UsageError(f"{option} takes MODULE:ATTR (e.g. myapp.agents:triage), got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot import {what} {spec!r}: {exc}") from exc
    return value


def check(args: argparse.Namespace) -> None:
    """Check what a connected subcommand was given as far as can be done without the cluster:
    ``--agent`` is imported (and replaced by the agent), ``approve`` is told which calls.

    Raises:
        UsageError: it was given something it cannot use.
    """
    if args.command in ("resume", "approve", "resolve"):
        args.agent = load_agent(args.agent)
    if args.command == "approve" and not (args.all or args.approve or args.deny):
        raise UsageError(_WHICH_CALLS)
    if args.command == "resolve":
        _resolutions(args)


def run_command(args: argparse.Namespace, out: TextIO) -> int:
    """Run a connected subcommand; returns its exit status."""
    commands = {
        "runs": _runs,
        "show": _show,
        "suspend": _suspend,
        "cancel": _cancel,
        "resume": _resume,
        "approve": _approve,
        "resolve": _resolve,
        "events": _events,
        "gc": _gc,
        "budgets": _budgets,
    }
    result: int = commands[args.command](args, out)
    return result


def _info(run_id: str) -> rg.RunInfo:
    """The run table's entry of ``run_id``.

    Raises:
        RunNotFound: the coordinator knows no such run.
    """
    for info in rg.runs():
        if info.run_id == run_id:
            return info
    raise RunNotFound(f"run {run_id!r} is not known to the coordinator", run_id=run_id)


def _runs(args: argparse.Namespace, out: TextIO) -> int:
    """The run table, newest first: top-level runs, or (``--all``) child runs too, each with
    its parent (the run table's, else the one its id names, e.g. after a restart)."""
    from raygents.records.runinfo import parent_of

    everything = rg.runs()
    known = {i.run_id for i in everything}
    rows = []
    for i in sorted(everything, key=lambda i: i.updated_at, reverse=True):
        if args.status not in (None, i.status) or args.agent not in (None, i.agent_name):
            continue
        parent = i.parent or parent_of(i.run_id, known)
        if parent is not None and not args.all:
            continue
        row = run_row(i.run_id, i.status, i.agent_name, i.turns, i.updated_at, i.last_error)
        if args.all:
            row["parent"] = parent
        rows.append(row)
    print_runs(rows[: args.limit], args.json, out, parents=args.all)
    return 0


def _gc(args: argparse.Namespace, out: TextIO) -> int:
    """Have the coordinator delete ended runs' records and kept results past an age (it
    knows which runs are running, suspended or awaiting approval: those stay)."""
    from raygents.runtime.driver.client import current

    rt = current()
    rt.send_notes()
    older_than, rows = rt.ask(rt.directory.client.gc(args.older_than, args.dry_run))
    print_gc(rows, older_than, args.dry_run, args.json, out)
    return 1 if any("error" in row for row in rows) else 0


def _budgets(args: argparse.Namespace, out: TextIO) -> int:
    """What each tenant spent today against its daily budget (``init(budgets=)``): the
    keeper's count, or the store's copy when no keeper runs.

    Raises:
        CommandFailed: ``--tenant`` names a tenant with no budget and no spending today.
    """
    report = budget_report()
    if args.tenant is not None:
        rows = [row for row in report["tenants"] if row["tenant"] == args.tenant]
        if not rows:
            raise CommandFailed(
                f"tenant {args.tenant!r} has no budget and spent nothing on {report['day']} "
                "(UTC); the namespace's budgets are those given to init(budgets=)"
            )
        report = {**report, "tenants": rows}
    print_budgets(report, args.json, out)
    return 0


def budget_report() -> dict[str, Any]:
    """Today's spending and budgets of the joined namespace, by tenant."""
    import ray

    from raygents.models.budgets import read_spending, report, today
    from raygents.runtime.actor.spending import KEEPER_NAME
    from raygents.runtime.driver.client import current

    rt = current()
    settings = rt.directory.cached_settings()
    try:
        keeper = ray.get_actor(KEEPER_NAME, namespace=rt.namespace)
    except ValueError:  # (no run of a budgeted tenant since the cluster started)
        keeper = None
    if keeper is not None:
        kept: Any = ray.get(keeper.report.remote(), timeout=_SETTINGS_S)
        return dict(kept)
    from raygents.stores.open import open_store

    spending, _ = read_spending(open_store(settings.store), today(), settings.key)
    return report(settings.budgets, spending)


def _show(args: argparse.Namespace, out: TextIO) -> int:
    info = _info(args.run_id)
    if args.tree:
        tree = _tree(info, {i.run_id: i for i in rg.runs()})
        if args.json:
            print_json(tree, out)
        else:
            out.write(render_tree(tree) + "\n")
        return 0
    doc = _detail(info)
    if args.json:
        print_json(doc, out)
    else:
        out.write(render_detail(doc) + "\n")
    return 0


def _tree(info: rg.RunInfo, known: dict[str, rg.RunInfo]) -> dict[str, Any]:
    """A run with its wall time, its handoffs and its agent-as-tool children (known to the
    run table), each with its own, from their conversations."""
    from raygents.runtime.actor.children import child_run_id

    doc = _detail(info)
    messages = doc["messages"] or []
    results = {m.get("tool_call_id"): m.get("content") or "" for m in messages}
    node = tree_node(doc, wall_seconds(info.status, info.started_at, info.updated_at))
    for m in messages:
        for c in m.get("tool_calls") or ():
            if c["name"].startswith("transfer_to_"):
                target = results.get(c["id"], "").removeprefix("Transferred to ")
                node["handoffs"].append(target or c["name"].removeprefix("transfer_to_"))
                continue
            child = known.get(child_run_id(info.run_id, c["id"]))
            if child is not None:
                via = {"tool": c["name"], "call_id": c["id"]}
                node["children"].append({**via, **_tree(child, known)})
    return node


def _detail(info: rg.RunInfo) -> dict[str, Any]:
    """``show``'s details of a run: a completed run's result, else its newest checkpoint."""
    base: dict[str, Any] = {
        "status": info.status,
        "agent": info.agent_name,
        "turns": info.turns,
        "last_error": info.last_error,
    }
    if info.status == "completed":
        try:
            result = rg.attach(info.run_id).result(timeout_s=60)
        except RaygentsError:  # (its table entry was read back from a marker: no history)
            pass
        else:
            return detail(
                info.run_id,
                **base,
                usage=result.usage,
                output=result.final_output,
                messages=result.messages,
            )
    state = _newest_state(info.run_id)
    if state is None:
        return detail(info.run_id, **base)
    return detail(
        info.run_id,
        **base,
        usage=state.usage,
        pending=state.pending,
        in_doubt=state.in_doubt,
        messages=state.messages,
    )


def _newest_state(run_id: str) -> Any:
    """The run's state at its newest checkpoint (the coordinator's copy, else the store's), or
    None when it has none or it cannot be read. Reads only."""
    from raygents.runtime.driver.client import current

    rt = current()
    try:
        found = rt.ask(rt.directory.client.load_state(run_id))
    except CheckpointError:
        return None
    return found[0] if found is not None else None


def _suspend(args: argparse.Namespace, out: TextIO) -> int:
    info = _info(args.run_id)
    if info.status not in ("pending", "running"):
        raise CommandFailed(f"run {args.run_id!r} is {info.status}, not running")
    handle = rg.attach(args.run_id)
    handle.suspend()
    # A run of a detached namespace is driven by the coordinator: the request goes there.
    from raygents.runtime.driver.client import current

    current().directory.client.send_suspends([(args.run_id, SUSPEND_FOR_CHECKPOINT)])
    return _report_end(handle, args, out, "suspend")


def _cancel(args: argparse.Namespace, out: TextIO) -> int:
    """Cancel a run that has not ended: a running one stops at once; a suspended or
    awaiting-approval one is cancelled where it lies (its pending calls can no longer be
    approved)."""
    info = _info(args.run_id)
    if info.status in ("suspended", "awaiting_approval", "in_doubt"):
        rg.cancel(args.run_id)
        doc = _detail(_info(args.run_id))
        if args.json:
            print_json(doc, out)
        else:
            out.write(render_detail(doc, last=6) + "\n")
        return 0 if doc["status"] == "cancelled" else 1
    if info.status not in ("pending", "running"):
        raise CommandFailed(f"run {args.run_id!r} is {info.status}, not running: it has ended")
    handle = rg.attach(args.run_id)
    rg.cancel(args.run_id)
    return _report_end(handle, args, out, "cancel")


def _resume(args: argparse.Namespace, out: TextIO) -> int:
    handle = rg.resume(args.run_id, agent=_agent(args))
    return _started(handle, args, out)


def _agent(args: argparse.Namespace) -> rg.Agent:
    """``--agent``'s agent (:func:`check` imported it already, where it ran)."""
    return args.agent if isinstance(args.agent, rg.Agent) else load_agent(args.agent)


def _approve(args: argparse.Namespace, out: TextIO) -> int:
    """Decide a run's pending calls as read from its newest checkpoint, after showing each
    with its decision; the decisions are refused (nothing decided) if the run's pending
    calls are no longer exactly those shown when it is claimed to resume."""
    agent = _agent(args)
    info = _info(args.run_id)
    if info.status != "awaiting_approval":
        raise CommandFailed(f"run {args.run_id!r} is {info.status}, not awaiting approval")
    state = _newest_state(args.run_id)
    if state is None:
        raise CommandFailed(f"cannot read the pending calls of run {args.run_id!r}")
    pending = tuple(state.pending)
    decisions: dict[str, bool] = {p.call_id: True for p in pending} if args.all else {}
    decisions.update({call_id: True for call_id in args.approve})
    decisions.update({call_id: False for call_id in args.deny})
    if not decisions:
        raise UsageError(_WHICH_CALLS)
    _check_covered(args.run_id, pending, decisions)
    _show_decisions(args.run_id, pending, decisions, sys.stderr if args.json else out)
    handle = rg.resume(args.run_id, agent=agent, approvals=decisions, _pending=pending)
    return _started(handle, args, out)


def _resolve(args: argparse.Namespace, out: TextIO) -> int:
    """Resolve a run's calls in doubt as read from its newest checkpoint, after showing each
    with what is done with it; resume refuses them (nothing resolved) if the run's calls in
    doubt are no longer exactly those."""
    agent = _agent(args)
    given = _resolutions(args)
    info = _info(args.run_id)
    if info.status != "in_doubt":
        raise CommandFailed(f"run {args.run_id!r} is {info.status}, not in doubt")
    state = _newest_state(args.run_id)
    if state is None:
        raise CommandFailed(f"cannot read the calls in doubt of run {args.run_id!r}")
    calls = tuple(state.in_doubt)
    resolve.check_covered(args.run_id, calls, given)
    resolve.show_resolutions(args.run_id, calls, given, sys.stderr if args.json else out)
    handle = rg.resume(args.run_id, agent=agent, resolutions=given)
    return _started(handle, args, out)


def _resolutions(args: argparse.Namespace) -> dict[str, Any]:
    try:
        return resolve.resolutions(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_covered(run_id: str, pending: tuple[Any, ...], decisions: dict[str, bool]) -> None:
    """Refuse decisions that do not name exactly the pending calls, before showing them."""
    ids = {p.call_id for p in pending}
    if set(decisions) != ids:
        raise rg.ApprovalDecisionsMismatch(
            f"approval decisions must cover exactly the pending calls of run {run_id!r}; "
            f"missing {sorted(ids - set(decisions))!r}, unknown {sorted(set(decisions) - ids)!r}",
            run_id=run_id,
        )


def _show_decisions(
    run_id: str, pending: tuple[Any, ...], decisions: dict[str, bool], out: TextIO
) -> None:
    """What is about to be decided, each call whole (its arguments as the tool gets them)."""
    approved = sum(decisions.values())
    out.write(
        f"run {visible(run_id)}: approving {approved} and denying {len(decisions) - approved} "
        "pending call(s):\n"
    )
    for p in pending:
        verdict = "approve" if decisions[p.call_id] else "deny   "
        out.write(f"  {verdict}  {pending_text(p.model_dump(mode='json'), run_id)}\n")
    out.flush()


def _started(handle: rg.RunHandle, args: argparse.Namespace, out: TextIO) -> int:
    """Follow a resumed run until it stops (ends, suspends or waits for approval) and print
    how: its drive belongs to this process, so the command cannot leave it running."""
    return _report_end(handle, args, out, "stop")


def _report_end(handle: rg.RunHandle, args: argparse.Namespace, out: TextIO, action: str) -> int:
    """Wait for the run to end and print how; 0 unless it failed or did not end in time."""
    try:
        handle.result(timeout_s=args.timeout)
    except TimeoutError:
        raise CommandFailed(
            f"run {handle.run_id!r} did not {action} within {args.timeout} s"
        ) from None
    except (rg.SuspendedError, rg.RunInterrupted, rg.RunInDoubt, rg.RunCancelled):
        pass
    except RaygentsError as exc:
        _print_end(handle, args, out, error=str(exc))
        return 1
    _print_end(handle, args, out)
    wanted = {"suspend": "suspended", "cancel": "cancelled"}.get(action)
    if wanted is not None and handle.status() != wanted:
        return 1
    return 0


def _print_end(
    handle: rg.RunHandle, args: argparse.Namespace, out: TextIO, error: str | None = None
) -> None:
    doc = _detail(_info(handle.run_id))
    if error is not None:
        doc["last_error"] = doc["last_error"] or error
    if args.json:
        print_json(doc, out)
    else:
        out.write(render_detail(doc, last=6) + "\n")


def _events(args: argparse.Namespace, out: TextIO) -> int:
    info = _info(args.run_id)
    handle = rg.attach(args.run_id)
    events = handle.events()
    if args.follow or info.status in _ENDED:
        stream = iter(events)
    else:  # a running run: what its records hold so far
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and not any(
            e.type == "checkpoint" for e in events.snapshot()
        ):
            time.sleep(0.05)
        stream = iter(events.snapshot())
    for event in stream:
        if args.json:
            print_json(event_row(event), out)
        else:
            out.write(render_event(event) + "\n")
            out.flush()
    return 0
