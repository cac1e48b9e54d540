"""Runs ``raygents`` commands for the command tests, one after the other in this one process
(``raygents.cli.main.main``, what ``python -m raygents`` runs), instead of a new Python
process that imports Ray for each.

Reads commands from stdin, one JSON object a line: ``{"args": [...], "ray_address": ...}``
(``RAY_ADDRESS`` for the command, or null for none); for each prints one line,
``CLI_RESULT {"returncode": ..., "stdout": ..., "stderr": ...}``: the exit status and what the
command wrote on stdout and stderr. Ends at the end of its input.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

from raygents.cli.main import main as raygents

PREFIX = "CLI_RESULT "


def run(args: list[str], ray_address: str | None) -> dict[str, object]:
    """Run one command as ``python -m raygents ARGS`` would, with ``$RAY_ADDRESS`` set to
    ``ray_address`` (unset if None)."""
    os.environ.pop("RAY_ADDRESS", None)
    if ray_address is not None:
        os.environ["RAY_ADDRESS"] = ray_address
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = raygents(args, out=out)
        except SystemExit as exc:  # (argparse's usage errors, as the console script exits)
            status = exc.code if isinstance(exc.code, int) else 1
    return {"returncode": status, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main() -> None:
    protocol = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        answer = run(request["args"], request["ray_address"])
        protocol.write(PREFIX + json.dumps(answer) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
