"""Every Python snippet of the README and of each manual page in docs/ runs, in order, in one
fresh process per page.

A page's snippets share one script, so each page is self-contained: its first snippet imports
what the page uses. A snippet whose first line is ``# docs: skip`` (one that needs a cluster or
the network) is shown and not run. DESIGN.md (the API contract, in signature notation) and
perf-log.md (a dated log) are not manuals and are not run.

The pages join one local Ray instance (``RAY_ADDRESS``, as a script joins a cluster) that
:func:`head` starts for the module, instead of each starting one of its own: each page gets a
store of its own, and starts once nothing of the page before is left on the instance. A page
that does not call ``init`` itself gets the suite's ``idle_actor_s`` (:data:`spaces.IDLE_ACTOR_S`)
from a first line the test adds, so that an agent actor left idle serves the page's next agent
instead of a process starting for each agent the page defines (the pages' runs are otherwise
what a user's script does: ``init`` with the defaults, the store from ``$RAYGENTS_STORE``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from driver_process import driver_process, ready_json
from spaces import IDLE_ACTOR_S

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


class RayHead:
    """The module's Ray instance, in the process that started it (:mod:`ray_head`), and the
    environment that joins it."""

    def __init__(self, process: subprocess.Popen[str], env: dict[str, str]) -> None:
        self.process = process
        self.env = env | {"RAY_ADDRESS": ready_json(process, "the Ray head")["address"]}

    def reset(self) -> None:
        """Wait until nothing a process left on the instance is alive."""
        assert self.process.stdin is not None
        self.process.stdin.write("reset\n")
        self.process.stdin.flush()
        assert ready_json(self.process, "the Ray head") == {"ready": True}


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    """One local Ray instance for the module's pages, with a token of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RAY_A"))}
    env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(32).hex()}
    cwd = tmp_path_factory.mktemp("ray_head")
    with driver_process([str(Path(__file__).parent / "ray_head.py")], cwd=cwd, env=env) as proc:
        yield RayHead(proc, env)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", [p for p in pages() if snippets(p)], ids=lambda p: p.name)
def test_page_snippets_run(page: Path, tmp_path: Path, head: RayHead) -> None:
    script = "\n\n".join(snippets(page))
    if ".init(" not in script:
        script = f"import raygents\n\nraygents.init(idle_actor_s={IDLE_ACTOR_S})\n\n{script}"
    script += "\n\nimport raygents\n\nraygents.shutdown()\nprint('DOCS OK')\n"
    path = tmp_path / f"{page.stem}_snippets.py"
    path.write_text(script)
    env = head.env | {"RAYGENTS_STORE": f"file://{tmp_path / 'store'}"}
    head.reset()
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
