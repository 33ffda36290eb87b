"""Reviewing recordings as conversations: `textconv` (what git runs to show a recording in
`git diff`, `git log -p` and `git show`; it never fails, so git always shows a diff) and `diff`
(the same comparison without git, or against a committed revision with `--rev`).
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

from hashreplay.cli.git import GitError, git
from hashreplay.cli.output import Console
from hashreplay.cli.run import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Run
from hashreplay.core.transcript import textconv as textconv_bytes


def textconv(path: Path, console: Console) -> int:
    """Print the file as git should show it. Exits 0 whatever the file holds."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        console.error(f"cannot read {path}: {exc.strerror or exc}")
        return EXIT_OK  # git shows an empty side rather than failing the whole diff
    out = sys.stdout.buffer if console.out is sys.stdout else None
    converted = textconv_bytes(content)
    if out is not None:
        out.write(converted)
        out.flush()
    else:
        console.out.write(converted.decode("utf-8", errors="replace"))
    return EXIT_OK


def _text(content: bytes) -> list[str]:
    return textconv_bytes(content).decode("utf-8", errors="replace").splitlines(keepends=True)


def diff(run: Run) -> int:
    """`hashreplay diff A B` / `hashreplay diff --rev REV FILE`: 0 the same, 1 different."""
    args, console = run.args, run.console
    paths: list[Path] = args.files
    if args.rev is not None:
        if len(paths) != 1:
            console.error("--rev REV compares one file with its committed version: give one FILE")
            return EXIT_USAGE
        path = paths[0]
        try:
            old = git(["show", f"{args.rev}:./{path.name}"], cwd=path.resolve().parent)
            new = path.read_bytes()
        except GitError as exc:
            console.error(f"{exc}; is {path} committed at {args.rev}?")
            return EXIT_PROBLEMS
        except OSError as exc:
            console.error(f"cannot read {path}: {exc.strerror or exc}")
            return EXIT_PROBLEMS
        labels = (f"{path} ({args.rev})", str(path))
    else:
        if len(paths) != 2:
            console.error("give two recording files (A B), or one with --rev REV")
            return EXIT_USAGE
        try:
            old, new = paths[0].read_bytes(), paths[1].read_bytes()
        except OSError as exc:
            console.error(f"cannot read {exc.filename}: {exc.strerror or exc}")
            return EXIT_PROBLEMS
        labels = (str(paths[0]), str(paths[1]))
    lines = list(difflib.unified_diff(_text(old), _text(new), *labels))
    for line in lines:
        text = line.rstrip("\n")
        colour = {"+": "green", "-": "red", "@": "cyan"}.get(text[:1], "")
        bold = text.startswith(("+++", "---"))
        console.line(console.style(text, "bold") if bold else console.style(text, colour))
    return EXIT_PROBLEMS if lines else EXIT_OK
