"""MkDocs hook: publishes benchmarks/README.md and its results as the site's benchmarks page.

The README stays where the benchmark scripts and ``run.py --update-readme`` keep it; its
relative links to ``results/`` work as they are, those to ``../docs/`` are made relative to the
site, and the result tables' plot links (relative to benchmarks/) relative to their own folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def on_files(files: Files, config: Any) -> Files:
    paths = [BENCH / "README.md", *sorted((BENCH / "results").glob("*.*"))]
    for path in paths:
        files.append(
            File(
                str(path.relative_to(ROOT)),
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    src = page.file.src_uri
    if src == "benchmarks/README.md":
        return markdown.replace("](../docs/", "](../")
    if src.startswith("benchmarks/results/"):
        # report.py writes a table's plot links relative to benchmarks/, where its README is.
        return markdown.replace("](results/", "](")
    return markdown
