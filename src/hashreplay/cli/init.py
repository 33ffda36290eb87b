"""`hashreplay init`: opt a project in to the pytest plugin (docs/design.md §16 Activation).

It appends a `[tool.hashreplay]` table to the project's `pyproject.toml` as text, so every
byte already there (comments, order, spacing, line endings) stays as it was, and creates
the file when there is none. A file that already has the table is left alone, and one that
is not valid TOML is refused, naming the file and line. Then it runs `git-setup`, so
`git diff` shows re-recorded conversations.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from hashreplay.cli.console import Console
from hashreplay.cli.run import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Run
from hashreplay.core.config import load_config
from hashreplay.core.errors import ConfigError
from hashreplay.core.root import PYPROJECT, find_root

#: What `init` appends: the table, and enough words that the file explains itself.
TABLE = (
    "[tool.hashreplay]\n"
    "# hashreplay records the LLM/HTTP calls of this project's tests and replays them:\n"
    "# `pytest` replays (no keys, no network); `INFERENCE_MODE=record-if-missing pytest`\n"
    "# records what is missing. Settings (mode, recordings_dir, passthrough, redact_keys, ...)\n"
    "# go in this table; see hashreplay's docs/usage.md, Configuration.\n"
)


class NotToml(Exception):
    """`pyproject.toml` exists but is not valid TOML: `init` changes nothing."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: not valid TOML: {problem}")
        self.path = path


def init_root(explicit: Path | None) -> Path:
    """Where `init` writes: `--root`, else the root every other command finds, or a nearer
    `pyproject.toml` on the way up from the working directory (pytest takes the nearest
    `pyproject.toml` as its rootdir when nothing else names one)."""
    found = find_root(explicit)
    if explicit is not None:
        return found.path
    here = Path.cwd().resolve()
    for directory in (here, *here.parents):
        if directory == found.path or found.path not in directory.parents:
            break
        if (directory / PYPROJECT).is_file():
            return directory
    return found.path


def _parse(text: str, path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise NotToml(path, str(exc)) from None
    return data


def _has_table(data: dict[str, Any]) -> bool:
    tool = data.get("tool")
    return isinstance(tool, dict) and "hashreplay" in tool


def with_table(current: bytes | None, path: Path) -> bytes | None:
    """`current` (None: no file) with the table appended, or None when it already has one.
    Raises NotToml for a file that is not valid TOML, or that would not be with the table
    (a `tool` written as an inline table cannot take another)."""
    if current is None:
        return TABLE.encode()
    try:
        text = current.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotToml(path, f"not UTF-8 (byte {exc.start})") from None
    if _has_table(_parse(text, path)):
        return None
    newline = "\r\n" if "\r\n" in text else "\n"
    lead = "" if not text else (newline if text.endswith("\n") else newline * 2)
    added = lead + TABLE.replace("\n", newline)
    result = text + added
    try:
        ok = _has_table(_parse(result, path))
    except NotToml:
        ok = False
    if not ok:
        raise NotToml(
            path,
            "its [tool] is written in a form a [tool.hashreplay] table cannot be added to "
            "(an inline table); add `hashreplay = {}` to it by hand",
        )
    return result.encode("utf-8")


def init(args: Any, console: Console) -> int:
    """`hashreplay init [--root DIR]`: 0 done (or nothing to do), 1 a file could not be
    read or written or git-setup failed, 2 a pyproject.toml that is not valid TOML."""
    try:
        root = init_root(args.root)
    except ConfigError as exc:  # an unreadable pyproject.toml on the way up
        console.error(f"{exc}; fix it, then run hashreplay init again (nothing was changed)")
        return EXIT_USAGE
    path = root / PYPROJECT
    target = path.resolve() if path.is_symlink() else path  # write the file, keep the link
    try:
        current: bytes | None = target.read_bytes()
    except FileNotFoundError:
        current = None
    except OSError as exc:
        console.error(f"cannot read {path}: {exc.strerror or exc}")
        return EXIT_PROBLEMS
    try:
        updated = with_table(current, path)
    except NotToml as exc:
        console.error(f"{exc}; fix it, then run hashreplay init again (nothing was changed)")
        return EXIT_USAGE
    where = _shown(path)
    if updated is None:
        console.line(f"{where}: already has [tool.hashreplay]; nothing changed")
    else:
        from hashreplay.core.temp_files import write_bytes_atomic

        try:
            write_bytes_atomic(target, updated)
        except OSError as exc:
            console.error(f"cannot write {path}: {exc.strerror or exc}")
            return EXIT_PROBLEMS
        done = "created, with" if current is None else "added"
        console.line(f"{where}: {done} [tool.hashreplay]; plain `pytest` now replays (commit it)")
    try:
        run = Run(args, console, load_config(root))
    except ConfigError as exc:  # a table that was there already, with invalid settings
        console.error(str(exc))
        return EXIT_USAGE
    return _git_setup(run)


def _shown(path: Path) -> str:
    """`path` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _git_setup(run: Run) -> int:
    """`git-setup`, as `hashreplay git-setup` runs it; without git or outside a repository
    there is nothing to set up yet, which a note says (the exit status stays 0)."""
    from hashreplay.cli.review import git_setup, in_git_repository

    if shutil.which("git") is None:
        run.console.line("git is not installed: skipped git-setup")
        return EXIT_OK
    if not in_git_repository(run.config.root):
        run.console.line(
            f"{run.show_path(run.config.root)} is not in a git repository: skipped git-setup "
            "(after `git init`, run `hashreplay git-setup` so git diff shows recordings as "
            "conversations)"
        )
        return EXIT_OK
    return git_setup(run)
