"""Summarise py-spy ``record -f raw`` output (collapsed stacks): the top functions by
inclusive and by self samples.

    python benchmarks/tools/profile_summary.py actor.txt [--top 25] [--filter raygents]
"""

from __future__ import annotations

import argparse
import collections
import re


def frames(stack: str) -> list[str]:
    out = []
    for f in stack.split(";"):
        # "function (path/to/file.py:123)" -> "function (file.py)"
        m = re.match(r"(.*?) \((.*?)(?::\d+)?\)$", f.strip())
        if m:
            path = m.group(2)
            short = "/".join(path.split("/")[-2:])
            out.append(f"{m.group(1)} ({short})")
        else:
            out.append(f.strip())
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--filter", default="", help="only count inclusive frames containing this")
    args = ap.parse_args()
    incl: collections.Counter[str] = collections.Counter()
    self_: collections.Counter[str] = collections.Counter()
    total = idle = 0
    with open(args.file) as f:
        lines = f.read().splitlines()
    for line in lines:
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        fs = frames(stack)
        total += n
        leaf = fs[-1] if fs else "?"
        if any(
            x in leaf for x in ("epoll_wait", "select (", "_run_once (asyncio", "wait (threading")
        ):
            idle += n
        self_[leaf] += n
        for f in set(fs):
            if args.filter in f:
                incl[f] += n
    print(f"samples: {total} (leaf looks idle: {idle})")
    print("--- inclusive ---")
    for f, n in incl.most_common(args.top):
        print(f"{100 * n / total:6.1f}%  {f}")
    print("--- self ---")
    for f, n in self_.most_common(args.top):
        print(f"{100 * n / total:6.1f}%  {f}")


if __name__ == "__main__":
    main()
