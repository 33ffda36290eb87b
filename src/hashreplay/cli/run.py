"""What every `hashreplay` command is handed (`Run`), and the exit codes they return."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from hashreplay.cli.console import Console, printable
from hashreplay.core.config import Config
from hashreplay.core.errors import ConfigError, RecordingError
from hashreplay.core.store import Store
from hashreplay.maintenance.files import Loaded, default_paths, find_given, find_recordings, load
from hashreplay.maintenance.hygiene import Stray, find_strays

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
        #: reads recordings with their blobs, as a test run does
        self.store = Store.from_config(config)

    def show_path(self, path: Path) -> str:
        """A path relative to the working directory when it is below it."""
        try:
            return str(path.resolve().relative_to(self._cwd))
        except ValueError:
            return str(path)

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
            printable(f"{self.show_path(path)}: unreadable: {exc.problem}; skipped, left unchanged")
        )

    @property
    def status(self) -> int:
        return EXIT_PROBLEMS if self.unreadable or self.empty_paths else EXIT_OK


Command = Callable[[Run], int]
