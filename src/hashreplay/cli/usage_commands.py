"""What the usage logs say: `status`'s last-run line and `prune` (one log, or the merged
logs of a suite split across CI machines with `--usage-log PATH`…)."""

from __future__ import annotations

import time
from pathlib import Path

from hashreplay.cli.run import EXIT_PROBLEMS, Run
from hashreplay.core.errors import UsageError
from hashreplay.engine.usage_log import read_usage, usage_path
from hashreplay.maintenance.files import Loaded
from hashreplay.maintenance.prune import kept_line, plan_prune, prune_project
from hashreplay.maintenance.shards import Logs, read_logs


def logs_of(run: Run) -> Logs:
    """The logs named by `--usage-log`, merged; else the project's own log."""
    root = run.config.root
    given: list[Path] = getattr(run.args, "usage_logs", None) or []
    if given:
        return read_logs(given, root)
    return Logs(read_usage(root), [usage_path(root)], local=True)


def _scope(logs: Logs) -> str:
    run = logs.run
    if run.full_suite:
        return "full suite" if len(logs.paths) == 1 else "together the full suite"
    return "partial (" + "; ".join(run.partial_reasons) + ")"


def last_run(run: Run, loaded: list[Loaded]) -> None:
    explicit = bool(getattr(run.args, "usage_logs", None))
    try:
        logs = logs_of(run)
    except UsageError as exc:
        if explicit:
            run.console.error(str(exc))
            run.unreadable += 1
        else:
            run.console.line(
                "last run: none recorded (the pytest plugin writes .hashreplay/usage.json)"
            )
        return
    usage = logs.run
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(usage.finished or usage.started))
    unused = plan_prune(
        usage,
        [(i.path, i.recording) for i in loaded],
        run.config.root,
        check_mtimes=logs.local,
    )
    count = f"{len(unused)} recording{'' if len(unused) == 1 else 's'}"
    source = f"{len(logs.paths)} usage logs, " if len(logs.paths) > 1 else ""
    run.console.line(
        f"last run: {source}{when}, {usage.mode}, {_scope(logs)}, {len(usage.tests)} tests "
        f"ran; {count} unused (hashreplay prune --dry-run lists them)"
    )


def prune(run: Run) -> int:
    config, dry = run.config, run.args.dry_run
    logs = logs_of(run)  # an unreadable log raises here: nothing is deleted
    usage = logs.run
    result = prune_project(
        config,
        usage,
        dry_run=dry,
        progress=lambda files: run.console.progress(files, "reading"),
        check_mtimes=logs.local,
    )
    for exc in result.unreadable:
        run.report_unreadable(exc.path or Path("?"), exc)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(usage.finished or usage.started))
    if len(logs.paths) > 1:
        scope = "together the full suite" if usage.full_suite else "together a partial run"
        run.console.line(
            f"Usage logs: {len(logs.paths)} ({scope}), last finished {when}, "
            f"{len(usage.tests)} tests ran ({usage.mode})"
        )
    else:
        scope = "the full suite" if usage.full_suite else "a partial run"
        run.console.line(f"Last run: {when}, {scope}, {len(usage.tests)} tests ran ({usage.mode})")
    for entry in result.unused:
        if entry.path in result.failed:
            reason = result.failed[entry.path]
            run.console.error(f"cannot delete {run.show_path(entry.path)}: {reason}")
            continue
        verb = "Would prune" if dry else "Pruned"
        run.console.line(f"{verb}: {run.show_path(entry.path)} ({entry.reason})")
    for blob in result.blobs:
        verb = "Would prune" if dry else "Pruned"
        if blob in result.failed:
            run.console.error(f"cannot delete {run.show_path(blob)}: {result.failed[blob]}")
        else:
            run.console.line(f"{verb}: {run.show_path(blob)} (no recording refers to this blob)")
    for path, why in result.refused.items():
        run.console.error(f"will not touch {run.show_path(path)}: {why}")
    if result.kept:
        if dry:
            for entry in result.kept:
                run.console.line(f"Kept: {run.show_path(entry.path)} ({entry.reason})")
        run.console.line(kept_line(result.kept))
    pruned = len(result.unused) - len(result.failed.keys() - set(result.blobs))
    run.console.line(f"Summary: {pruned}/{result.total} files pruned")
    if not usage.full_suite:
        what = "the last run was" if len(logs.paths) == 1 else "the usage logs together are"
        run.console.line(
            f"Note: {what} not the full suite ("
            + "; ".join(usage.partial_reasons)
            + "): recordings of removed tests and shared model lists were kept; run the whole "
            "suite, then prune again to find those too"
        )
    return EXIT_PROBLEMS if result.failed or result.refused else run.status
