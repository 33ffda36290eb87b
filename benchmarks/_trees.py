"""Measuring several hashreplay source trees in one run: each measurement is a fresh
interpreter with `PYTHONPATH` set to one tree, trees interleaved round by round so machine
noise hits them alike (`hot_path.py`, `record_call.py`, `flush.py`)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def add_tree_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tree", action="append", default=[], help="NAME=SRC_DIR (repeatable); default: this tree"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)


def parse_trees(given: Sequence[str], default: Path) -> dict[str, str]:
    """`NAME=SRC_DIR` options as a dict; none given: this checkout's `src` as "this tree"."""
    trees = {}
    for entry in given:
        name, sep, src = entry.partition("=")
        if not sep or not name or not src:
            raise SystemExit(f"--tree {entry!r}: expected NAME=SRC_DIR")
        trees[name] = str(Path(src).resolve())
    return trees or {"this tree": str(default)}


def interleaved(names: Sequence[str], rounds: int) -> Iterator[tuple[int, str]]:
    """(round, name) in rotating order: each name goes first in turn."""
    for r in range(rounds):
        for name in [*names[r % len(names) :], *names[: r % len(names)]]:
            yield r, name


def run_child(script: Path, src: str, *args: str) -> Any:
    """`script --child ARGS` with `PYTHONPATH=src`; its last line of output is JSON."""
    done = subprocess.run(
        [sys.executable, str(script), "--child", *args],
        env={**os.environ, "PYTHONPATH": src},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} with {src} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
