"""A Python process an end-to-end test drives (a private Ray head, a driver with its own Ray
instance): it prints a line once it is ready and ends when its stdin closes."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["driver_process", "ready_json"]


@contextlib.contextmanager
def driver_process(
    args: list[str], *, cwd: str | Path, env: dict[str, str]
) -> Iterator[subprocess.Popen[str]]:
    """Run ``python *args``; on the way out close its stdin (it shuts raygents and its Ray
    instance down and exits) and wait for it, killing it after a minute."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def ready_json(proc: subprocess.Popen[str], what: str) -> Any:
    """The first line of the process's output that is a JSON object (Ray's own lines skipped).

    Raises:
        AssertionError: the process ended first.
    """
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"{what} exited before it was ready")
