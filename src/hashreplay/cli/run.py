"""What every command is handed (`Run`: its arguments, the console, the project's config, and
the recordings the command works on, found, read and shown as paths the user can paste), and
the exit codes every command returns.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from hashreplay.cli.output import Console, printable
from hashreplay.core.config import Config
from hashreplay.core.errors import ConfigError, RecordingError, unreadable_fix
from hashreplay.core.paths import Stray, find_strays
from hashreplay.core.store import Store
from hashreplay.engine.files import (
    Loaded,
    default_paths,
    find_given,
    find_recordings,
    load,
    recorded_test_id,
)
from hashreplay.engine.miss import record_target

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


class Run:
    """What every command gets: its arguments, the console and the project configuration."""

    def __init__(self, args: argparse.Namespace, console: Console, config: Config) -> None:
        self.args = args
        self.console = console
        self.config = config
        #: what is wrong with the project's config, when a command runs in spite of it
        self.config_problem: ConfigError | None = None
        self.unreadable = 0
        self.empty_paths = 0
        self._cwd = Path.cwd().resolve()
        self._root = config.root.resolve()
        #: reads recordings with their blobs, as a test run does
        self.store = Store.from_config(config)
        console.paths = self.show_paths_in

    def show_path(self, path: Path) -> str:
        """How the CLI prints a path: relative to the working directory when it is below
        it or inside the project (`../recordings/x.json` from `tests/`), so it can be pasted
        into the next command from where the user is; absolute otherwise."""
        absolute = Path(os.path.normpath(path.absolute()))
        # the directory resolved (a symlinked /tmp), the file itself not (a stray symlink
        # is shown under its own name)
        resolved = absolute.parent.resolve() / absolute.name if absolute.name else absolute
        inside = _below(resolved, self._cwd) or (
            _below(resolved, self._root) and _below(self._cwd, self._root)
        )
        if not inside:
            return str(path)
        return os.path.relpath(resolved, self._cwd)

    def show_paths_in(self, text: str) -> str:
        """`text` (a message) with every absolute path inside the project shown as
        `show_path` shows it."""
        roots = sorted({str(self._root), str(self.config.root)}, key=len, reverse=True)
        stop = r"""\s:;,'"()"""  # characters that end a path inside a sentence
        alternatives = "|".join(re.escape(r) for r in roots)
        found = re.compile(rf"(?:{alternatives})(?=[/.{stop}]|$)(?:/[^{stop}]*)?")

        def shown(match: re.Match[str]) -> str:
            path = match.group(0)
            stripped = path.rstrip(".")  # the full stop of a sentence is not the path's
            return self.show_path(Path(stripped)) + path[len(stripped) :]

        return found.sub(shown, text)

    def files(self, paths: Sequence[Path] | None = None) -> list[Path]:
        """The recordings under `paths` named on the command line (each one that holds none
        is a warning and makes the exit status 1), else the whole project's."""
        if not paths:
            return find_recordings(default_paths(self.config), self.config.common_dir)
        files, empty = find_given(paths, self.config.common_dir)
        for path in empty:
            self.empty_paths += 1
            self.console.warning(
                f"{path}: no recordings in it (no *.json named by a request hash, no "
                "recordings directory); check the path"
            )
        return files

    def strays(self, paths: Sequence[Path] | None = None) -> list[Stray]:
        """Symlinks and temp files in recordings directories."""
        return find_strays(paths or default_paths(self.config), self.config.root)

    def load_all(self, paths: Sequence[Path], label: str) -> list[Loaded]:
        """Every readable file; each unreadable one is reported, skipped and counted."""
        loaded: list[Loaded] = []
        for path in self.console.progress(paths, label):
            try:
                loaded.append(load(path, self.store))
            except RecordingError as exc:
                self.report_unreadable(path, exc)
        return loaded

    def report_unreadable(self, path: Path, exc: RecordingError) -> None:
        self.unreadable += 1
        self.console.error(
            printable(
                f"{self.show_path(path)}: unreadable: {exc.problem}; skipped, left unchanged; "
                f"to fix it: {self.unreadable_fix(path)}"
            )
        )

    def unreadable_fix(self, path: Path) -> str:
        """What replaces a recording file that cannot be read: re-recording the test it
        names (never the command that just met it again), or git."""
        test_id = recorded_test_id(path)
        return unreadable_fix(self.show_path(path), record_target(test_id) if test_id else None)

    @property
    def status(self) -> int:
        return EXIT_PROBLEMS if self.unreadable or self.empty_paths else EXIT_OK


def _below(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


Command = Callable[[Run], int]


def matches(value: str, pattern: str | None) -> bool:
    """How `--test PATTERN` and `--endpoint PATTERN` select: `value` contains `pattern`, or
    matches it as a glob when it has `*` or `?` (`[` stands for itself); no pattern, all."""
    if pattern is None:
        return True
    if "*" in pattern or "?" in pattern:
        return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))
    return pattern in value
