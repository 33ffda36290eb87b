"""Terminal output for the CLI: plain, greppable lines when piped; colour, aligned tables and a
progress bar (on stderr, only when it is a terminal) otherwise; `NO_COLOR` turns colour off.
Also what every command is handed (`Run`) and the exit codes they return.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO, TypeVar

from hashreplay.core.config import Config
from hashreplay.core.errors import ConfigError, RecordingError, unreadable_fix
from hashreplay.core.paths import Stray, find_strays
from hashreplay.core.store import Store
from hashreplay.core.transcript import printable
from hashreplay.engine.files import (
    Loaded,
    default_paths,
    find_given,
    find_recordings,
    load,
    recorded_test_id,
)
from hashreplay.engine.miss import record_target

__all__ = ["Console", "human_size", "printable"]


T = TypeVar("T")

#: Work on fewer items than this finishes before a progress bar would be worth drawing.
PROGRESS_MIN = 1000
_BAR_WIDTH = 30
_CLEAR = "\r\x1b[K"
_STYLES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def _unchanged(text: str) -> str:
    return text


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Console:
    """Where the CLI writes; created per command from the current `sys.stdout`/`sys.stderr`."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.tty = _isatty(self.out)
        self.err_tty = _isatty(self.err)
        self.colour = self.tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        self._bar = False
        #: how paths inside a message are shown (`Run` makes them relative to the working
        #: directory); errors and warnings pass through it, recorded data never does
        self.paths: Callable[[str], str] = _unchanged

    # --- text -----------------------------------------------------------------------------

    def style(self, text: str, *names: str) -> str:
        if not self.colour or not names:
            return text
        codes = ";".join(_STYLES[n] for n in names)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def line(self, text: str = "") -> None:
        self._clear_bar()
        print(text, file=self.out)

    def error(self, text: str) -> None:
        """A problem, on stderr (stdout stays clean for pipes)."""
        self._notice("error:", "31", text)

    def warning(self, text: str) -> None:
        """Something the user should look at, on stderr."""
        self._notice("warning:", "33", text)

    def _notice(self, label: str, colour: str, text: str) -> None:
        self._clear_bar()
        self.out.flush()
        prefix = f"\x1b[{colour}m{label}\x1b[0m" if self.colour and _isatty(self.err) else label
        print(f"{prefix} {self.paths(text)}", file=self.err)
        self.err.flush()

    def table(self, rows: Sequence[Sequence[str]], headers: Sequence[str]) -> None:
        """Aligned columns under a header on a terminal; tab-separated lines when piped."""
        if not self.tty:
            for row in rows:
                self.line("\t".join(row))
            return
        widths = [len(h) for h in headers]
        for row in rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

        def aligned(cells: Sequence[str]) -> str:  # the last column is not padded
            padded = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
            return "  ".join([*padded, cells[-1]])

        self.line(self.style(aligned(headers), "bold"))
        for row in rows:
            self.line(aligned(row).rstrip())

    # --- progress -------------------------------------------------------------------------

    def progress(self, items: Sequence[T], label: str) -> Iterator[T]:
        """Yield `items`, drawing a bar on stderr when it is a terminal and they are many."""
        draw = self.err_tty and len(items) >= PROGRESS_MIN
        total = len(items)
        shown = -1
        for index, item in enumerate(items):
            percent = 100 * index // total
            if draw and percent != shown:  # at most 100 redraws, however long the work
                self._draw(label, index, total)
                shown = percent
            yield item
        self._clear_bar()

    def _draw(self, label: str, done: int, total: int) -> None:
        filled = _BAR_WIDTH * done // max(total, 1)
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        self.out.flush()  # what was printed so far lands before the bar
        self.err.write(f"{_CLEAR}{label} [{bar}] {done}/{total}")
        self.err.flush()
        self._bar = True

    def _clear_bar(self) -> None:
        if self._bar:
            self.err.write(_CLEAR)
            self.err.flush()
            self._bar = False


def human_size(size: int) -> str:
    """`812 B`, `4.1 KiB`, `2.0 MiB`."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover - the loop always returns


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
