"""Every Python snippet in README.md runs, in order, in one fresh process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_readme_has_snippets() -> None:
    assert len(snippets()) >= 6


@pytest.mark.timeout(900)
def test_readme_snippets_run(tmp_path: Path) -> None:
    script = "\n\n".join(snippets()) + "\n\nrg.shutdown()\nprint('README OK')\n"
    path = tmp_path / "readme_snippets.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAY_ADDRESS"))}
    env["RAYGENTS_STORE"] = f"file://{tmp_path / 'store'}"
    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "README OK" in done.stdout
