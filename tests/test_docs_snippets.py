"""Every Python snippet of the README and of each manual page in docs/ runs, in order, in one
fresh process per page.

A page's snippets share one script, so each page is self-contained: its first snippet imports
what the page uses. A snippet whose first line is ``# docs: skip`` (one that needs a cluster or
the network) is shown and not run. DESIGN.md (the API contract, in signature notation) and
perf-log.md (a dated log) are not manuals and are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
NOT_RUN = {"DESIGN.md", "perf-log.md"}
SKIP_MARKER = "# docs: skip"


def snippets(page: Path) -> list[str]:
    found = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    return [s for s in found if not s.startswith(SKIP_MARKER)]


def pages() -> list[Path]:
    return [README, *sorted(p for p in DOCS.glob("*.md") if p.name not in NOT_RUN)]


def test_pages_have_snippets() -> None:
    counts = {p.name: len(snippets(p)) for p in pages()}
    assert counts["README.md"] >= 6, counts
    assert counts["guide.md"] >= 8, counts
    for name in ("batch.md", "durability.md", "openai-agents-sdk.md"):
        assert counts[name] >= 1, counts


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", [p for p in pages() if snippets(p)], ids=lambda p: p.name)
def test_page_snippets_run(page: Path, tmp_path: Path) -> None:
    script = "\n\n".join(snippets(page))
    script += "\n\nimport raygents\n\nraygents.shutdown()\nprint('DOCS OK')\n"
    path = tmp_path / f"{page.stem}_snippets.py"
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
    assert "DOCS OK" in done.stdout
