"""`hashreplay prune` and `--hashreplay-prune`: which recordings the last run shows unused.

It never guesses: a recording is pruned only when its test ran to completion without using
it, or, after a full run, when its test no longer exists; shared model lists only when a full
run in which every test ran to completion used none. Everything else is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hashreplay.core.config import Config
from hashreplay.core.constants import MODEL_LIST_PREFIX
from hashreplay.core.errors import RecordingError
from hashreplay.core.recording import Recording
from hashreplay.engine.usage_log import RunUsage, relative
from hashreplay.maintenance.files import default_paths, find_recordings, load


@dataclass(frozen=True)
class Unused:
    path: Path
    reason: str


REASON_UNUSED = "its test ran to completion without using it"
REASON_GONE = "its test no longer exists"
REASON_MODELS = "no test used a model list in a full run"


def plan_prune(
    run: RunUsage,
    recordings: Iterable[tuple[Path, Recording]],
    root: Path,
    *,
    check_mtimes: bool = True,
) -> list[Unused]:
    """The recordings the run shows to be unused, with the reason for each.

    Kept, always: files any test (or code outside tests) used; files changed after the run
    started; files with no test id; files of tests that were deselected, skipped, failed, ran
    in `live` mode or talked to a server (`passthrough`); and shared model lists unless a full
    run where every test ran to completion used none. A file belongs to the test named by
    its stored `test_id`. `check_mtimes` False (logs from other machines, whose runs came
    before this checkout) trusts the logs alone.
    """
    used = run.used_files()
    collected = set(run.collected)
    models_unused = (
        run.full_suite
        and run.every_test_completed
        and not any(Path(u).name.startswith(MODEL_LIST_PREFIX) for u in used)
    )
    found: list[Unused] = []
    for path, recording in recordings:
        name = relative(path, root)
        if name in used or (check_mtimes and _changed_since(path, run.started)):
            continue
        if path.name.startswith(MODEL_LIST_PREFIX):
            if models_unused:
                found.append(Unused(path, REASON_MODELS))
            continue
        test_id = recording.test_id
        if test_id is None:
            continue
        test = run.tests.get(test_id)
        if test is not None:
            if test.prunable:
                found.append(Unused(path, REASON_UNUSED))
        elif run.full_suite and test_id not in collected:
            found.append(Unused(path, REASON_GONE))
    return found


def _changed_since(path: Path, started: float) -> bool:
    try:
        return path.stat().st_mtime > started
    except OSError:
        return True  # gone or unreadable: not ours to delete


def delete_unused(unused: Iterable[Unused], *, dry_run: bool) -> dict[Path, str]:
    """Delete the unused files (nothing with `dry_run`); returns those that could not be
    deleted, with the reason."""
    failed: dict[Path, str] = {}
    if dry_run:
        return failed
    for entry in unused:
        try:
            entry.path.unlink()
        except FileNotFoundError:
            pass  # already gone: nothing left to prune
        except OSError as exc:
            failed[entry.path] = exc.strerror or str(exc)
    return failed


@dataclass
class PruneResult:
    #: How many recording files the project holds.
    total: int
    unused: list[Unused]
    #: Unused files that could not be deleted, with the reason.
    failed: dict[Path, str]
    unreadable: list[RecordingError]


def prune_project(
    config: Config,
    run: RunUsage,
    *,
    dry_run: bool,
    progress: Callable[[Sequence[Path]], Iterable[Path]] | None = None,
    check_mtimes: bool = True,
) -> PruneResult:
    """Find (and unless `dry_run`, delete) the project's unused recordings.

    Unreadable files are collected, never deleted.
    """
    files = find_recordings(default_paths(config), config.common_dir)
    recordings: list[tuple[Path, Recording]] = []
    unreadable: list[RecordingError] = []
    for path in progress(files) if progress is not None else files:
        try:
            recordings.append((path, load(path).recording))
        except RecordingError as exc:
            unreadable.append(exc)
    unused = plan_prune(run, recordings, config.root, check_mtimes=check_mtimes)
    failed = delete_unused(unused, dry_run=dry_run)
    return PruneResult(len(files), unused, failed, unreadable)
