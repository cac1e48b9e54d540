"""``raygents resolve``'s resolutions: read from its options, checked against the calls in
doubt, and shown before the run resumes."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, TextIO

import raygents as rg
from raygents.cli.output import doubt_text
from raygents.cli.terminal import visible

__all__ = ["WHICH_CALLS", "check_covered", "resolutions", "show_resolutions"]

WHICH_CALLS = (
    "say how to resolve each call in doubt: --rerun ID, --done ID=TEXT or --failed ID=TEXT"
)


class _Usage(ValueError):
    """An option of ``resolve`` that cannot be used (``runs.UsageError`` says it)."""


def resolutions(args: argparse.Namespace) -> dict[str, Any]:
    """The resolutions ``--rerun ID``, ``--done ID=TEXT`` and ``--failed ID=TEXT`` give.

    Raises:
        ValueError: a ``--done``/``--failed`` value has no ``=``, or a call is named twice.
    """
    given: list[tuple[str, Any]] = [(call_id, "rerun") for call_id in args.rerun]
    for option, values, is_error in (("--done", args.done, False), ("--failed", args.failed, True)):
        for value in values:
            call_id, sep, text = value.partition("=")
            if not sep or not call_id:
                raise _Usage(f"{option} takes CALL_ID=TEXT, got {value!r}")
            given.append((call_id, rg.ToolResult(text, is_error=is_error)))
    out: dict[str, Any] = {}
    for call_id, resolution in given:
        if call_id in out:
            raise _Usage(f"call {call_id!r} is resolved twice: say once what to do with it")
        out[call_id] = resolution
    if not out:
        raise _Usage(WHICH_CALLS)
    return out


def check_covered(run_id: str, calls: Sequence[Any], given: dict[str, Any]) -> None:
    """Refuse resolutions that do not name exactly the calls in doubt, before showing them."""
    ids = {c.call_id for c in calls}
    if set(given) != ids:
        missing, unknown = sorted(ids - set(given)), sorted(set(given) - ids)
        raise rg.ResolutionsMismatch(
            f"resolutions must cover exactly the calls in doubt of run {run_id!r}; "
            f"missing {missing!r}, unknown {unknown!r}",
            run_id=run_id,
            missing=missing,
            unknown=unknown,
        )


def show_resolutions(run_id: str, calls: Sequence[Any], given: dict[str, Any], out: TextIO) -> None:
    """What is about to be done with each call in doubt."""
    out.write(f"run {visible(run_id)}: resolving {len(calls)} call(s) in doubt:\n")
    for c in calls:
        resolution = given[c.call_id]
        if resolution == "rerun":
            verdict = "rerun (same key)"
        else:
            kind = "failed" if resolution.is_error else "done"
            verdict = f"{kind}: {visible(resolution.content)}"
        out.write(f"  {verdict}  {doubt_text(c.model_dump(mode='json'), run_id)}\n")
    out.flush()
