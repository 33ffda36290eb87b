"""What the usage logs say (`.hashreplay/usage.json`, written by the pytest plugin; one per CI
shard, merged with `--usage-log`): the last-run line of `status`, the logs `prune` judges by,
and `used`, the recordings each test of the last run replayed or wrote.
"""

from __future__ import annotations

import time
from pathlib import Path

from hashreplay.cli.output import printable
from hashreplay.cli.run import EXIT_OK, EXIT_PROBLEMS, Run, matches
from hashreplay.core.errors import UsageError
from hashreplay.engine.files import Loaded
from hashreplay.engine.prune import Logs, plan_prune, read_logs
from hashreplay.engine.usage import TestUsage, read_usage, usage_path


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


#: What `used` shows for the files no test was running for (session start-up, threads).
OUTSIDE_TESTS = "(outside any test)"


def used(run: Run) -> int:
    """`hashreplay used [--test PATTERN] [--usage-log PATH]…`: per test id of the last run,
    the recordings it replayed or wrote, as the usage log has them. 0 when something was
    listed; 1 without a readable log, or when no test matches PATTERN."""
    root, console, pattern = run.config.root, run.console, run.args.test
    given: list[Path] = run.args.usage_logs
    for path in given or [usage_path(root)]:
        if path.exists():
            continue
        if given:
            console.error(
                f"no usage log at --usage-log {path}: check the path (each CI shard's "
                ".hashreplay/usage.json, as its pytest run left it)"
            )
        else:  # the engine's own message would send the user to prune
            console.error(
                f"no usage log at {path}: the pytest plugin writes it at the end of every "
                "run; run the tests (pytest), then hashreplay used again"
            )
        return EXIT_PROBLEMS
    logs = logs_of(run)  # an unreadable log raises: the error names it
    usage = logs.run
    tests: list[tuple[str, TestUsage | None, list[str]]] = [
        (test_id, test, test.files)
        for test_id, test in sorted(usage.tests.items())
        if matches(test_id, pattern)
    ]
    if usage.outside_tests and matches(OUTSIDE_TESTS, pattern):
        tests.append((OUTSIDE_TESTS, None, usage.outside_tests))
    for test_id, test, files in tests:
        how = f" ({test.outcome}, {test.mode or usage.mode})" if test is not None else ""
        none = "" if files else ": no recordings"
        console.line(printable(f"{test_id}{how}{none}"))
        for name in files:
            path = root / name
            gone = "" if path.exists() else " (not there now: deleted or moved since the run)"
            console.line(printable(f"  {run.show_path(path)}{gone}"))
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(usage.finished or usage.started))
    source = f"{len(logs.paths)} usage logs, " if len(logs.paths) > 1 else ""
    scope = f"{source}{when}, {usage.mode}, {_scope(logs)}"
    if not tests:
        if pattern is None:
            console.error(f"no test ran in the usage log ({scope})")
        else:
            console.error(
                f"no test id matches {pattern!r} in the usage log ({scope}); without --test, "
                "hashreplay used lists every test id it has"
            )
        return EXIT_PROBLEMS
    recordings = len({name for _, _, names in tests for name in names})
    counts = f"{_count(len(tests), 'test')}, {_count(recordings, 'recording')}"
    console.line(f"Summary: {counts} (last run: {scope})")
    return EXIT_OK


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
