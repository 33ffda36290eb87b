"""The `hashreplay` command. `main(argv) -> int` is testable without a subprocess."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hashreplay",
        description="Record and replay the LLM/HTTP calls of a test suite.",
    )
    parser.add_argument("--version", action="version", version=f"hashreplay {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0


def entry_point() -> None:  # pragma: no cover - the console script
    sys.exit(main())
