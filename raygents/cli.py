"""The ``raygents`` command."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``raygents`` console script."""
    parser = argparse.ArgumentParser(prog="raygents", description="LLM agents on Ray.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the fan-out demo on a local Ray instance (offline by default)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from raygents.demo import main as demo

        return demo()
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
