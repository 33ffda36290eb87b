"""Where the project's files live (docs/design.md §9): the project root, a test's recordings
directories, what does not belong in a store; recordings are read and written only inside
the root (a symlink leading outside is a `RecordingError` naming it).
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import NamedTuple

from hashreplay.core.atomic import is_temp_name
from hashreplay.core.constants import BLOBS_DIRNAME, RECORDINGS_DIRNAME, ROOT_ENV, STATE_DIRNAME
from hashreplay.core.errors import ConfigError, RecordingError

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
    """The project root: `explicit`, else `HASHREPLAY_ROOT`, else the nearest ancestor of
    `start` (the working directory) with a `pyproject.toml` holding `[tool.hashreplay]`, else
    with a pytest rootdir marker, else with `.git`, else `start`. `Found.reason` says which
    file decided (`hashreplay status`)."""
    if explicit is not None:
        return Found(Path(explicit).resolve(), "given")
    if value := (os.environ if env is None else env).get(ROOT_ENV):
        return Found(Path(value).resolve(), ROOT_ENV)
    here = (start if start is not None else Path.cwd()).resolve()
    for test, label in _RULES:
        for directory in (here, *here.parents):
            marker = test(directory)
            if marker is not None:
                return Found(directory, f"{marker} ({label})")
    return Found(here, "the working directory (no project marker above it)")


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
        pytest_table = _toml_tables(pyproject).get("pytest")
        if isinstance(pytest_table, dict) and "ini_options" in pytest_table:
            return pyproject
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        path = directory / name
        if path.is_file() and _ini_has(path, section):
            return path
    return None


def _git(directory: Path) -> Path | None:
    return directory / ".git" if (directory / ".git").exists() else None


_RULES: tuple[tuple[Callable[[Path], Path | None], str], ...] = (
    (_hashreplay_table, "[tool.hashreplay]"),
    (_pytest_marker, "pytest's rootdir marker"),
    (_git, "the git repository"),
)

#: Directories never searched for recordings.
SKIP_DIRS: frozenset[str] = frozenset(
    {".venv", ".git", "node_modules", STATE_DIRNAME, "site-packages", "__pycache__", ".tox"}
    | {".nox", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}
)

_SEPARATORS = r"[\\/]"

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

_BINARY = getattr(os, "O_BINARY", 0)

_LEFT_BEHIND = "temp file left by an interrupted write; safe to delete"


class RecordingsDirOutside(RecordingError):
    """A test's recordings directory may not be used: it leads outside the project root (a
    symlink), or it would nest inside another recordings directory (a test file in one, a
    test id naming one): no file of it is read or written. Its message is the whole problem
    (it is no file's)."""

    def __init__(self, directory: Path, problem: str) -> None:
        super().__init__(directory, problem)
        self.args = (problem,)


class RecordingsDirNested(RecordingsDirOutside):
    """The recordings directory would nest inside another store (a test file in one, a test
    id naming one): every request of the test is refused, while a test that makes none runs
    as any other (a test package may be named `recordings`)."""


def outside_root(path: Path, root: Path) -> bool:
    return path != root and root not in path.parents


def _safe_parts(file_part: str) -> list[str] | None:
    """The path components of a test id's file part, or None when it may not be used."""
    if not file_part or "\x00" in file_part:
        return None
    if PurePosixPath(file_part).is_absolute() or PureWindowsPath(file_part).is_absolute():
        return None
    parts = [p for p in re.split(_SEPARATORS, file_part) if p not in ("", ".")]
    if any(p != ".." and (p.startswith((".", "~")) or "%" in p or ":" in p) for p in parts):
        return None  # `.git`, `~user`, `%2e%2e`, `C:`
    return parts


def recordings_dir_for(root: Path, common_dir: Path, test_id: str | None) -> Path:
    """`tests/a/b/test_x.py::test_y[p]` → `<root>/tests/a/b/recordings`; the common
    directory for no test id and for any id that would lead elsewhere: a test id can come
    from a header (`X-HashReplay-Test-Id`), so it is untrusted. `root` is resolved."""
    file_part = (test_id or "").split("::", 1)[0]
    parts = _safe_parts(file_part)
    if parts is None:
        return common_dir
    candidate = Path(os.path.normpath(root.joinpath(*parts))).parent / RECORDINGS_DIRNAME
    if outside_root(candidate, root):
        return common_dir  # `..` leading out of the project
    inside = _store_around(candidate, root, common_dir)
    if inside is not None:
        msg = (
            f"test file {file_part} lies inside the recordings directory {inside}: its "
            f"recordings would go to {candidate}, within that store, where hashreplay's "
            f"tools take them for files of {inside} (or its blobs); move the test file out "
            f"of {inside}, or rename that directory if it holds no recordings"
        )
        raise RecordingsDirNested(candidate, msg)
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError):
        return common_dir
    if outside_root(resolved, root):
        msg = (
            f"the recordings directory {candidate} of {file_part} resolves "
            f"to {resolved}, outside the project root {root}{_via_link(candidate, root)}: "
            "recordings are only read and written inside the project; replace the link with "
            "a directory holding the recordings (move them into the project)"
        )
        raise RecordingsDirOutside(candidate, msg)
    return resolved


def _store_around(candidate: Path, root: Path, common_dir: Path) -> Path | None:
    """The recordings directory (a test's, or the common one with its blobs) that
    `candidate`, a test's recordings directory, would nest in; None when it nests in none.
    The common directory is a test's own for a test file at the top of the project."""
    if common_dir in candidate.parents:
        return common_dir
    here = root
    for part in candidate.parent.relative_to(root).parts:
        here = here / part
        if part == RECORDINGS_DIRNAME:
            return here
    return None


def _via_link(candidate: Path, root: Path) -> str:
    """` (<link> is a symlink to <target>)`: the link on the way that leads out, or ``."""
    for path in (candidate, *candidate.parents):
        if path == root or root not in path.parents:
            break
        if path.is_symlink():
            try:
                return f" ({path} is a symlink to {path.readlink()})"
            except OSError:
                return f" ({path} is a symlink)"
    return ""


def read_contained(path: Path, root: Path) -> bytes:
    """The bytes of a recording file, refusing a symlink that leads outside `root`. Costs
    no extra system call on the usual path (the open itself refuses to follow a link)."""
    try:
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _BINARY)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            target = path.resolve()
            if outside_root(target, root):
                msg = (
                    f"is a symlink to {target}, outside the project root {root}: recordings "
                    "are only read inside the project; replace the link with the file"
                )
                raise RecordingError(path, msg) from None
            return read_bytes(path)  # a symlink inside the project
        try:
            return _read_fd(fd)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RecordingError(path, f"cannot read the file: {exc.strerror or exc}") from None


def read_bytes(path: Path | str, *, follow: bool = True) -> bytes:
    """A file's bytes, like `Path.read_bytes` but with one `open`, `fstat` and `read` (a
    store's file index reads every file through it); `follow=False` refuses a symlink
    (OSError ELOOP). OSError passes through."""
    fd = os.open(path, os.O_RDONLY | _BINARY | (0 if follow else _NOFOLLOW))
    try:
        return _read_fd(fd)
    finally:
        os.close(fd)


def _read_fd(fd: int) -> bytes:
    """Everything from an open file: one `read` of the size `fstat` gives, no buffering."""
    size = os.fstat(fd).st_size
    data = os.read(fd, size + 1)
    if len(data) <= size:
        return data  # a short read of a regular file is its end
    parts = [data]  # it grew meanwhile: read on to its end
    while chunk := os.read(fd, 1 << 16):
        parts.append(chunk)
    return b"".join(parts)


class Stray(NamedTuple):
    """A file that does not belong in a store, and why."""

    path: Path
    problem: str


def _symlink(path: Path, root: Path) -> Stray:
    target = path.resolve()
    where = " (outside the project root: replay refuses it)" if outside_root(target, root) else ""
    return Stray(path, f"symlink to {target}{where}; replace it with the real file or directory")


def find_strays(tops: Iterable[Path], root: Path) -> list[Stray]:
    """Symlinked recordings directories and files, and temp files (what a killed writer left;
    swept at the next start), under `tops`: `hashreplay verify` and `status` report them."""
    root = root.resolve()
    found: dict[Path, Stray] = {}
    for top in tops:
        if top.is_symlink():  # given, or the common directory: os.walk would follow it
            found.setdefault(top, _symlink(top, root))
            if outside_root(top.resolve(), root):
                continue
        for current, dirs, files in os.walk(top):  # never follows a symlinked directory
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            here = Path(current)
            in_recordings = here.name == RECORDINGS_DIRNAME
            for name in list(dirs):
                path = here / name
                if path.is_symlink() and (name == RECORDINGS_DIRNAME or in_recordings):
                    found.setdefault(path, _symlink(path, root))
            in_blobs = here.name == BLOBS_DIRNAME and here.parent.name == RECORDINGS_DIRNAME
            if not in_recordings and not in_blobs:
                continue
            for name in files:
                path = here / name
                if is_temp_name(name):
                    found.setdefault(path, Stray(path, _LEFT_BEHIND))
                elif (in_blobs or name.endswith(".json")) and path.is_symlink():
                    found.setdefault(path, _symlink(path, root))
    return [found[p] for p in sorted(found)]
