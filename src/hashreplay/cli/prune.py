"""`prune`: delete the recordings (and blobs) no test used, per the usage logs of the last
run, merged across CI shards with `--usage-log`; a partial run spares what it cannot judge.
"""

from __future__ import annotations

import time
from pathlib import Path

from hashreplay.cli.run import EXIT_PROBLEMS, Run
from hashreplay.cli.usage import logs_of
from hashreplay.engine.prune import kept_line, prune_project


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
            + "): shared model lists were kept; run the whole "
            "suite, then prune again to find those too"
        )
    return EXIT_PROBLEMS if result.failed or result.refused else run.status
