"""`hashreplay prune` and `--hashreplay-prune`: which recordings the last run shows unused.

It never guesses: a recording is pruned only when its test ran to completion without using
it, or, after a full run, when its test no longer exists; shared model lists only when a full
run in which every test ran to completion used none. Everything else is kept. A blob goes
when no recording that stays refers to it (and none is unreadable: it might).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from hashreplay.core.blobs import references
from hashreplay.core.config import Config
from hashreplay.core.errors import RecordingError
from hashreplay.core.names import is_model_list_name
from hashreplay.core.recording import Recording
from hashreplay.core.store import Store
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
        and not any(is_model_list_name(Path(u).name) for u in used)
    )
    found: list[Unused] = []
    for path, recording in recordings:
        name = relative(path, root)
        if name in used or (check_mtimes and _changed_since(path, run.started)):
            continue
        if is_model_list_name(path.name):
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
    #: Blobs no remaining recording refers to (deleted unless a dry run).
    blobs: list[Path] = field(default_factory=list)


def unreferenced_blobs(
    store: Store, raws: Iterable[dict[str, object]], started: float
) -> list[Path]:
    """The files of the blob directory that none of `raws` (the JSON of every recording
    that stays) refers to, leaving alone any written since `started`."""
    if not store.blobs_dir.is_dir():
        return []
    referenced = {ref.digest for raw in raws for ref in references(raw)}
    return [
        path
        for path in sorted(store.blobs_dir.iterdir())
        if path.is_file()
        and not path.name.startswith(".")
        and path.name not in referenced
        and not _changed_since(path, started)
    ]


def _stored_json(path: Path) -> dict[str, object] | None:
    """A file's JSON as stored (blob references kept), or None when it is not readable."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


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
    store = Store.from_config(config)
    files = find_recordings(default_paths(config), config.common_dir)
    recordings: list[tuple[Path, Recording]] = []
    raws: dict[Path, dict[str, object]] = {}
    unreadable: list[RecordingError] = []
    for path in progress(files) if progress is not None else files:
        try:
            loaded = load(path, store)
        except RecordingError as exc:
            unreadable.append(exc)
            raw = _stored_json(path)
            if raw is not None:
                raws[path] = raw  # its blobs stay, even if some other one is missing
            continue
        recordings.append((path, loaded.recording))
        raws[path] = loaded.raw
    unused = plan_prune(run, recordings, config.root, check_mtimes=check_mtimes)
    gone = {entry.path for entry in unused}
    unparsable = any(exc.path not in raws for exc in unreadable)
    blobs = (
        []
        if unparsable
        else unreferenced_blobs(
            store, (raw for path, raw in raws.items() if path not in gone), run.started
        )
    )
    failed = delete_unused(
        [*unused, *(Unused(blob, "unreferenced blob") for blob in blobs)], dry_run=dry_run
    )
    return PruneResult(len(files), unused, failed, unreadable, blobs)
