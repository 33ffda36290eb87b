"""Where a test's recordings may live, and reading a file that must stay in the project.

A test id can come from a header (`X-HashReplay-Test-Id`), so it is untrusted: its file part
may only name a place inside the project root, never a hidden directory (`.git/hooks`), a
home directory (`~/…`), a percent-encoded `..` or a drive. Anything else goes to the common
directory. A recordings directory or a recording file that is a symlink resolving outside
the project root is refused with a `RecordingError` naming it (docs/design.md §4):
recordings are only read and written inside the project.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path, PurePosixPath, PureWindowsPath

from hashreplay.core.constants import RECORDINGS_DIRNAME, STATE_DIRNAME
from hashreplay.core.errors import RecordingError

__all__ = ["RecordingsDirOutside", "outside_root", "read_contained", "recordings_dir_for"]

#: compiled on first use (the `re` module's cache), not at import: start-up time
#: Directories never searched for recordings.
SKIP_DIRS: frozenset[str] = frozenset(
    {
        ".venv",
        ".git",
        "node_modules",
        STATE_DIRNAME,
        "site-packages",
        "__pycache__",
        ".tox",
        ".nox",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
    }
)


_SEPARATORS = r"[\\/]"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class RecordingsDirOutside(RecordingError):
    """A test's recordings directory leads outside the project root (a symlink): no file
    of it is read or written. Its message is the whole problem (it is no file's)."""

    def __init__(self, directory: Path, problem: str) -> None:
        super().__init__(directory, problem)
        self.args = (problem,)


def outside_root(path: Path, root: Path) -> bool:
    return path != root and root not in path.parents


def _safe_parts(file_part: str) -> list[str] | None:
    """The path components of a test id's file part, or None when it may not be used."""
    if not file_part or "\x00" in file_part:
        return None
    if PurePosixPath(file_part).is_absolute() or PureWindowsPath(file_part).is_absolute():
        return None
    parts = re.split(_SEPARATORS, file_part)
    for part in parts:
        if part in ("", ".", ".."):
            continue
        if part.startswith((".", "~")) or "%" in part or ":" in part:
            return None  # `.git`, `~user`, `%2e%2e`, `C:`
    return [p for p in parts if p not in ("", ".")]


def recordings_dir_for(root: Path, common_dir: Path, test_id: str | None) -> Path:
    """`tests/a/b/test_x.py::test_y[p]` → `<root>/tests/a/b/recordings`; the common
    directory for no test id and for any id that would lead elsewhere. `root` is resolved."""
    if not test_id:
        return common_dir
    parts = _safe_parts(test_id.split("::", 1)[0])
    if parts is None:
        return common_dir
    candidate = Path(os.path.normpath(root.joinpath(*parts))).parent / RECORDINGS_DIRNAME
    if outside_root(candidate, root):
        return common_dir  # `..` leading out of the project
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError):
        return common_dir
    if outside_root(resolved, root):
        msg = (
            f"the recordings directory {candidate} of {test_id.split('::', 1)[0]} resolves "
            f"to {resolved}, outside the project root {root}{_via_link(candidate, root)}: "
            "recordings are only read and written inside the project; replace the link with "
            "a directory holding the recordings (move them into the project)"
        )
        raise RecordingsDirOutside(candidate, msg)
    return resolved


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
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise RecordingError(path, f"cannot read the file: {exc.strerror or exc}") from None
        target = path.resolve()
        if outside_root(target, root):
            msg = (
                f"is a symlink to {target}, outside the project root {root}: recordings are "
                "only read inside the project; replace the link with the file"
            )
            raise RecordingError(path, msg) from None
        return _read_followed(path)
    try:
        return _read_fd(fd)
    except OSError as exc:
        raise RecordingError(path, f"cannot read the file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _read_fd(fd: int) -> bytes:
    """Everything from an open file: one `read` of the size `fstat` gives (and one that
    returns nothing past it), no buffered file object in between."""
    size = os.fstat(fd).st_size
    data = os.read(fd, size + 1)
    if len(data) <= size:
        return data  # a short read of a regular file is its end
    parts = [data]  # it grew meanwhile: read on to its end
    while chunk := os.read(fd, 1 << 16):
        parts.append(chunk)
    return b"".join(parts)


def _read_followed(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RecordingError(path, f"cannot read the file: {exc.strerror or exc}") from None
