"""What does not belong in a store: symlinks and temp files (in recordings directories and
their `blobs/`).

`hashreplay verify` and `status` report both. Replay refuses a symlink that leads outside the
project root; a temp file is what a killed writer left behind (`.<name>.json.<random>.tmp`,
the pattern `write_bytes_atomic` uses) and is swept at the next start.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hashreplay.core.constants import BLOBS_DIRNAME, RECORDINGS_DIRNAME
from hashreplay.core.store_paths import SKIP_DIRS, outside_root
from hashreplay.core.temp_files import is_temp_name

__all__ = ["Stray", "find_strays"]


@dataclass(frozen=True)
class Stray:
    path: Path
    problem: str


def _walk(top: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    for current, dirs, files in os.walk(top):  # never follows a symlinked directory
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        yield Path(current), dirs, files


def _symlink(path: Path, root: Path) -> Stray:
    target = path.resolve()
    where = "outside the project root: replay refuses it" if outside_root(target, root) else ""
    problem = f"symlink to {target}" + (f" ({where})" if where else "")
    return Stray(path, problem + "; replace it with the real file or directory")


def find_strays(tops: Iterable[Path], root: Path) -> list[Stray]:
    """Symlinked recordings directories and files, and temp files, under `tops`."""
    root = root.resolve()
    found: dict[Path, Stray] = {}
    for top in tops:
        if not top.is_dir():
            continue
        for here, dirs, files in _walk(top):
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
                    found.setdefault(
                        path,
                        Stray(path, "temp file left by an interrupted write; safe to delete"),
                    )
                elif (in_blobs or name.endswith(".json")) and path.is_symlink():
                    found.setdefault(path, _symlink(path, root))
    return [found[p] for p in sorted(found)]
