"""`hashreplay prune` and `--hashreplay-prune`: which recordings the last run shows unused.

It never guesses (docs/design.md §13, "Prune"): a recording
is pruned only when its test, collected by the run that wrote the usage log, ran to
completion without using it; shared model lists only when a full run in which every test
ran to completion used none and nothing else records into the store. A file whose test id
the run never collected is kept and counted: made through `hashreplay serve` or
`install()` (whose test ids may name a collected test file, `tests/test_p.py::checkout
flow`), or by a test that is gone, which no log can tell apart. A blob goes when no
recording that stays refers to it (and none is unreadable: it might).

It deletes only regular files inside the store: a recording or recordings directory that is
a symlink, a blob directory that is one, and anything in it not named like a blob are
refused with the path and what to do, never deleted.

Usage logs of a suite split across machines (`hashreplay prune --usage-log PATH`…).

Each CI shard writes its own `.hashreplay/usage.json`, and each is partial on its own (its
tests were selected or deselected). Merged, they say which tests ran anywhere and which
files each used; the merge is the full suite when every test that exists ran in some shard
and no shard stopped for another reason (interrupted, collection errors, a lost worker).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import orjson

from hashreplay.core.blobs import references
from hashreplay.core.config import Config
from hashreplay.core.constants import BLOBS_DIRNAME
from hashreplay.core.errors import RecordingError, UsageError
from hashreplay.core.format import Recording
from hashreplay.core.names import is_model_list_name
from hashreplay.core.store import Store
from hashreplay.engine.files import default_paths, find_recordings, load
from hashreplay.engine.usage import RunUsage, read_usage_file, relative


@dataclass(frozen=True)
class Unused:
    path: Path
    reason: str


REASON_UNUSED = "its test ran to completion without using it"


REASON_MODELS = "no test used a model list in a full run"


#: Kept: the run cannot tell whether these are used (docs/design.md §13).
KEPT_FOREIGN = "not made by this pytest run"


KEPT_NO_TEST = "no test id, and this run did not use it"


KEPT_MODELS = "shared model list, and other front ends record into this store"


#: A blob's name: the 32 hex digits of its `xxh3_128`.
_BLOB_NAME = frozenset("0123456789abcdef")


class Plan(NamedTuple):
    """What the run shows unused, and what it kept because it cannot account for it."""

    unused: list[Unused]
    #: Files the run did not judge: their test ids were never collected by it.
    kept: list[Unused]


def plan_prune(
    run: RunUsage,
    recordings: Iterable[tuple[Path, Recording]],
    root: Path,
    *,
    check_mtimes: bool = True,
) -> list[Unused]:
    """The recordings the run shows to be unused, with the reason for each (`judge`)."""
    return judge(run, recordings, root, check_mtimes=check_mtimes).unused


def judge(
    run: RunUsage,
    recordings: Iterable[tuple[Path, Recording]],
    root: Path,
    *,
    check_mtimes: bool = True,
) -> Plan:
    """The recordings the run shows to be unused, and those it kept unjudged.

    Kept, always: files any test (or code outside tests) used; files changed after the run
    started; files of tests that were deselected, skipped, failed, ran in `live` mode or
    talked to a server (`passthrough`). Kept and counted (`Plan.kept`): files whose test id
    the run never collected, even in a test file it collected (a proxy's or an `install()`ed
    server's test ids, which pytest never collects, or a removed test's), files with no test
    id it did not use, and shared model lists while any such file is in the store. A file belongs
    to the test named by its stored `test_id`. `check_mtimes` False (logs from other
    machines, whose runs came before this checkout) trusts the logs alone.
    """
    used = run.used_files()
    collected = set(run.collected)
    found: list[Unused] = []
    kept: list[Unused] = []
    model_lists: list[Path] = []
    for path, recording in recordings:
        name = relative(path, root)
        if name in used or (check_mtimes and _changed_since(path, run.started)):
            continue
        if is_model_list_name(path.name):
            model_lists.append(path)
            continue
        test_id = recording.test_id
        if test_id is None:
            kept.append(Unused(path, KEPT_NO_TEST))
            continue
        test = run.tests.get(test_id)
        if test is not None:
            if test.prunable:
                found.append(Unused(path, REASON_UNUSED))
        elif test_id in collected:
            continue  # deselected, or it did not run
        else:
            kept.append(Unused(path, KEPT_FOREIGN))
    if model_lists:
        models_unused = (
            run.full_suite
            and run.every_test_completed
            and not any(is_model_list_name(Path(u).name) for u in used)
        )
        if models_unused and kept:
            kept.extend(Unused(path, KEPT_MODELS) for path in model_lists)
        elif models_unused:
            found.extend(Unused(path, REASON_MODELS) for path in model_lists)
    return Plan(sorted(found, key=_by_path), sorted(kept, key=_by_path))


def _by_path(entry: Unused) -> Path:
    return entry.path


def _changed_since(path: Path, started: float) -> bool:
    try:
        return path.stat().st_mtime > started
    except OSError:
        return True  # gone or unreadable: not ours to delete


def kept_line(kept: Sequence[Unused]) -> str:
    """The summary of what a run kept unjudged (`Plan.kept`), with what to do about it."""
    files = f"{len(kept)} file{'' if len(kept) == 1 else 's'}"
    return (
        f"Kept: {files} {KEPT_FOREIGN} (test ids it never collected: recorded through "
        "`hashreplay serve` or `install()`, or by a test that is gone); `hashreplay "
        "prune --dry-run` lists them: delete by hand those no longer needed"
    )


def refusal(path: Path) -> str | None:
    """Why prune may not delete the recording at `path` (a symlink, or in a symlinked
    recordings directory: the file it reaches may lie outside the store), or None."""
    if path.is_symlink():
        return (
            f"is a symlink to {_target(path)}: prune deletes nothing through a link; replace "
            "the link with the file it points to, or delete the link yourself"
        )
    if path.parent.is_symlink():
        return (
            f"its recordings directory {path.parent} is a symlink to {_target(path.parent)}: "
            "prune deletes nothing through a link; replace the link with a directory, or "
            "delete the file yourself"
        )
    return None


def _target(path: Path) -> str:
    try:
        return str(path.readlink())
    except OSError:
        return "?"


def delete_unused(unused: Iterable[Unused], *, dry_run: bool) -> dict[Path, str]:
    """Delete the unused files (nothing with `dry_run`); returns those that could not be
    deleted, with the reason. A file `refusal` names is never deleted, even in a dry run
    it is returned."""
    failed: dict[Path, str] = {}
    for entry in unused:
        refused = refusal(entry.path)
        if refused is not None:
            failed[entry.path] = refused
            continue
        if dry_run:
            continue
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
    #: Unused files that could not (or may not) be deleted, with the reason.
    failed: dict[Path, str]
    unreadable: list[RecordingError]
    #: Blobs no remaining recording refers to (deleted unless a dry run).
    blobs: list[Path] = field(default_factory=list)
    #: Files the run did not judge (`Plan.kept`): kept, and counted.
    kept: list[Unused] = field(default_factory=list)
    #: What is in the blob directory that prune may not touch, with what to do.
    refused: dict[Path, str] = field(default_factory=dict)


def is_blob_name(name: str) -> bool:
    return len(name) == 32 and _BLOB_NAME.issuperset(name)


def unreferenced_blobs(
    blobs_dir: Path, raws: Iterable[dict[str, object]], started: float
) -> tuple[list[Path], dict[Path, str]]:
    """The files of the blob directory that none of `raws` (the JSON of every recording
    that stays) refers to, leaving alone any written since `started`; and what prune
    refuses to touch there (a symlinked blob directory, a symlink, a name that is not a
    blob's), with what to do. Hidden files (`.gitkeep`, temp files) are left alone."""
    for directory in (blobs_dir.parent, blobs_dir):
        if directory.is_symlink():
            msg = (
                f"is a symlink to {_target(directory)}: prune deletes no blobs through a "
                "link; replace the link with the directory it points to"
            )
            return [], {directory: msg}
    if not blobs_dir.is_dir():
        return [], {}
    referenced = {ref.digest for raw in raws for ref in references(raw)}
    found: list[Path] = []
    refused: dict[Path, str] = {}
    for path in sorted(blobs_dir.iterdir()):
        name = path.name
        if name.startswith("."):
            continue
        if path.is_symlink():
            refused[path] = (
                f"is a symlink to {_target(path)}, not a blob: prune deletes nothing through "
                "a link; replace it with the blob's bytes or remove it yourself"
            )
        elif not is_blob_name(name) or not path.is_file():
            refused[path] = (
                "is not a blob (a blob is a file named by the 32 hex digits of its xxh3): "
                f"prune leaves it; move it out of {blobs_dir}"
            )
        elif name not in referenced and not _changed_since(path, started):
            found.append(path)
    return found, refused


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
    plan = judge(run, recordings, config.root, check_mtimes=check_mtimes)
    failed = delete_unused(plan.unused, dry_run=dry_run)
    # blobs are judged by what really goes: a refused or undeletable file keeps its own
    gone = {entry.path for entry in plan.unused if entry.path not in failed}
    unparsable = any(exc.path not in raws for exc in unreadable)
    blobs, refused = (
        ([], {})
        if unparsable
        else unreferenced_blobs(
            config.common_dir / BLOBS_DIRNAME,
            (raw for path, raw in raws.items() if path not in gone),
            run.started,
        )
    )
    failed.update(
        delete_unused((Unused(blob, "unreferenced blob") for blob in blobs), dry_run=dry_run)
    )
    return PruneResult(len(files), plan.unused, failed, unreadable, blobs, plan.kept, refused)


#: Why a shard alone is partial when that is only its share of the suite being chosen: the
#: merge is whole when the shards together ran every test. Anything else (stopped early,
#: collection errors, a worker that never reported) keeps the merge partial.
SELECTION_REASONS: tuple[str, ...] = (
    "paths or node ids given",
    "run from ",
    "-k ",
    "-m ",
    "--lf",
    "--deselect ",
    "--ignore",
    "deselected: ",
    "did not run: ",
)


@dataclass(frozen=True)
class Logs:
    """The usage the prune works from, and whether file times can be compared with it."""

    run: RunUsage
    #: Paths of the logs read (one per shard).
    paths: list[Path]
    #: False when a log was written at another root (another machine): the files here were
    #: checked out after that run, so their modification times say nothing about it.
    local: bool

    @property
    def label(self) -> str:
        return f"{len(self.paths)} usage logs" if len(self.paths) > 1 else str(self.paths[0])


def read_logs(paths: Sequence[Path], root: Path) -> Logs:
    """Read every log (raising `UsageError` naming the first unreadable one) and merge."""
    runs = [(path, read_usage_file(path)) for path in paths]
    if not runs:
        msg = "no usage log given"
        raise UsageError(msg)
    local = all(not run.root or Path(run.root).resolve() == root.resolve() for _, run in runs)
    return Logs(merge_runs([run for _, run in runs], [p for p, _ in runs]), list(paths), local)


def merge_runs(runs: Sequence[RunUsage], names: Sequence[Path] | None = None) -> RunUsage:
    """One run made of several: tests and files united, full when together they ran all."""
    if len(runs) == 1:
        return runs[0]
    first, *rest = runs
    merged = RunUsage.model_validate(first.model_dump())
    for run in rest:
        merged.merge(run)
    merged.finished = max(run.finished for run in runs)
    merged.mode = ", ".join(sorted({run.mode for run in runs}))
    merged.root = ""
    labels = [str(n) for n in names] if names is not None else [str(i) for i in range(len(runs))]
    hard = [
        f"{label}: {reason}"
        for label, run in zip(labels, runs, strict=True)
        for reason in run.partial_reasons
        if not reason.startswith(SELECTION_REASONS)
    ]
    not_run = [t for t in merged.collected if _ran(merged, t) is False]
    if not_run:
        count = f"{len(not_run)} test" + ("" if len(not_run) == 1 else "s")
        hard.append(f"not run in any log: {count}")
    if not merged.collected:
        hard.append("no tests collected")
    merged.partial_reasons = hard
    merged.full_suite = not hard
    return merged


def _ran(run: RunUsage, test_id: str) -> bool:
    test = run.tests.get(test_id)
    return test is not None and test.setup is not None
