"""The project root outside pytest (docs/design.md §9): found from any directory of the project.

In order: `HASHREPLAY_ROOT`; else the nearest ancestor of the working directory holding a
`pyproject.toml` with `[tool.hashreplay]`; else the nearest with one of pytest's rootdir
markers (`pytest.ini`, `.pytest.ini`, `pyproject.toml` with `[tool.pytest.ini_options]`,
`tox.ini` with `[pytest]`, `setup.cfg` with `[tool:pytest]`); else the nearest with `.git`;
else the working directory. `Found.reason` says which file decided (`hashreplay status`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from hashreplay.core.constants import ROOT_ENV
from hashreplay.core.errors import ConfigError

PYPROJECT = "pyproject.toml"


class Found(NamedTuple):
    """A project root and why it is the root."""

    path: Path
    reason: str


def find_root(
    explicit: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    start: Path | None = None,
) -> Found:
    """The project root: `explicit`, else `HASHREPLAY_ROOT`, else found upward from `start`
    (the working directory)."""
    if explicit is not None:
        return Found(Path(explicit).resolve(), "given")
    value = (os.environ if env is None else env).get(ROOT_ENV)
    if value:
        return Found(Path(value).resolve(), ROOT_ENV)
    here = (start if start is not None else Path.cwd()).resolve()
    for test, label in _RULES:
        for directory in _upward(here):
            marker = test(directory)
            if marker is not None:
                return Found(directory, f"{marker} ({label})")
    return Found(here, "the working directory (no project marker above it)")


def _upward(start: Path) -> Iterator[Path]:
    yield start
    yield from start.parents


def _toml_tables(path: Path) -> dict[str, object]:
    if sys.version_info >= (3, 11):  # imported on first use (pytest has usually loaded it)
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        msg = f"cannot read {path} while looking for the project root: {exc}"
        raise ConfigError(msg) from exc
    tool = data.get("tool")
    return tool if isinstance(tool, dict) else {}


def _hashreplay_table(directory: Path) -> Path | None:
    path = directory / PYPROJECT
    return path if path.is_file() and "hashreplay" in _toml_tables(path) else None


def has_hashreplay_table(directory: Path) -> bool:
    """Whether `directory` has a `pyproject.toml` with a `[tool.hashreplay]` table, empty or
    not: how a project opts in to the pytest plugin (docs/design.md, Activation)."""
    return _hashreplay_table(directory) is not None


def _ini_has(path: Path, section: str) -> bool:
    import configparser  # only for a setup.cfg / tox.ini: not at import

    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return False  # pytest itself reports a broken file; it names no root for us
    return parser.has_section(section)


def _pytest_marker(directory: Path) -> Path | None:
    """The file that makes `directory` pytest's rootdir, in pytest's own order."""
    for name in ("pytest.ini", ".pytest.ini"):
        if (directory / name).is_file():
            return directory / name
    pyproject = directory / PYPROJECT
    if pyproject.is_file():
        tool = _toml_tables(pyproject)
        pytest_table = tool.get("pytest")
        if isinstance(pytest_table, dict) and "ini_options" in pytest_table:
            return pyproject
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        path = directory / name
        if path.is_file() and _ini_has(path, section):
            return path
    return None


def _git(directory: Path) -> Path | None:
    marker = directory / ".git"
    return marker if marker.exists() else None


_RULES: tuple[tuple[Callable[[Path], Path | None], str], ...] = (
    (_hashreplay_table, "[tool.hashreplay]"),
    (_pytest_marker, "pytest's rootdir marker"),
    (_git, "the git repository"),
)
