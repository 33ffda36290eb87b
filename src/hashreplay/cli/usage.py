"""What the usage logs say (`.hashreplay/usage.json`, written by the pytest plugin; one per CI
shard, merged with `--usage-log`): the last-run line of `status`, the logs `prune` judges by.
"""

from __future__ import annotations

import time
from pathlib import Path

from hashreplay.cli.run import Run
from hashreplay.core.errors import UsageError
from hashreplay.engine.files import Loaded
from hashreplay.engine.prune import Logs, plan_prune, read_logs
from hashreplay.engine.usage import read_usage, usage_path


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
