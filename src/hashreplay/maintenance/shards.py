"""Usage logs of a suite split across machines (`hashreplay prune --usage-log PATH`…).

Each CI shard writes its own `.hashreplay/usage.json`, and each is partial on its own (its
tests were selected or deselected). Merged, they say which tests ran anywhere and which
files each used; the merge is the full suite when every test that exists ran in some shard
and no shard stopped for another reason (interrupted, collection errors, a lost worker).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hashreplay.core.errors import UsageError
from hashreplay.engine.usage_log import RunUsage, read_usage_file

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
