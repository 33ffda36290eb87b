"""`python -m hashreplay.server [options]`: the same as `hashreplay serve [options]`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hashreplay.server.cli import configure_parser, run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hashreplay.server")
    configure_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
