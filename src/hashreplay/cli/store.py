"""The commands that change what the store holds: `import` (other tools' recordings; the readers
are in `engine/`), `prune` (what the usage logs say, merged across CI shards with `--usage-log`),
`mv`, which moves a renamed test's recordings within it, and `normalize`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hashreplay.cli.console import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Run
from hashreplay.core.errors import ConfigError, RecordingError, SettingsError, UsageError
from hashreplay.engine.files import Loaded, Rules, find_recordings, load, renormalised, write_json
from hashreplay.engine.importing import ImportReport, Reader, run_import, source_files
from hashreplay.engine.prune import Logs, kept_line, plan_prune, prune_project, read_logs
from hashreplay.engine.usage import read_usage, usage_path

if TYPE_CHECKING:
    from hashreplay.engine.import_vcr import CollectedTests


#: File endings searched for under a directory, per format.
SUFFIXES = {"vcr": (".yaml", ".yml", ".json"), "ogx": (".json",)}


def configure(sub: Any) -> None:
    """`import vcr` and `import ogx`, each with its options."""
    parser = sub.add_parser("import", help="import vcrpy/pytest-recording cassettes or OGX files")
    formats = parser.add_subparsers(dest="format", metavar="FORMAT", required=True)
    vcr = formats.add_parser("vcr", help="vcrpy / pytest-recording cassettes (YAML or JSON)")
    vcr.add_argument(
        "--test-id",
        metavar="ID",
        help="the test id of a single cassette (default: the collected test whose "
        "pytest-recording cassette it is)",
    )
    vcr.add_argument(
        "--test-ids",
        type=Path,
        metavar="FILE",
        help="the suite's test ids, one a line (`pytest --collect-only -q > FILE`), instead of "
        "collecting them",
    )
    vcr.add_argument(
        "--no-collect",
        action="store_true",
        help="do not run `pytest --collect-only`: guess each test id from pytest-recording's "
        "layout, <dir>/cassettes/<module>/[<Class>.]<test>.yaml -> "
        "<dir>/<module>.py::[<Class>::]<test> (wrong for parameters it changed)",
    )
    vcr.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="HOST",
        help="import only requests to this host (repeatable); others are skipped",
    )
    vcr.add_argument(
        "--match-on",
        action="append",
        default=None,
        metavar="PART",
        help="key on this request part besides method and endpoint (repeatable; `body` makes "
        "the import strict); default: as the cassette was matched (its vcr_config's match_on, "
        "else vcrpy's method + URI)",
    )
    ogx = formats.add_parser("ogx", help="OGX (Llama Stack) api_recorder files")
    for parser_ in (vcr, ogx):
        parser_.add_argument(
            "--root",
            type=Path,
            default=None,
            help="project root (default: $HASHREPLAY_ROOT, else the current directory)",
        )
        parser_.add_argument(
            "--dry-run", action="store_true", help="report what would be imported; write nothing"
        )
        parser_.add_argument(
            "--overwrite",
            action="store_true",
            help="replace existing recordings that differ from the import (default: keep them)",
        )
        parser_.add_argument(
            "paths", nargs="+", type=Path, metavar="PATH", help="files or directories to import"
        )


def _reader(run: Run) -> Reader:
    args = run.args
    if args.format == "ogx":
        from hashreplay.engine.importing import read_ogx

        return read_ogx
    from hashreplay.core.matching import parse_match_on
    from hashreplay.engine.import_vcr import vcr_reader

    return vcr_reader(
        root=run.config.root,
        test_id=args.test_id,
        hosts=tuple(args.host),
        max_bytes=run.config.max_body_bytes,
        match_on=None
        if args.match_on is None
        else parse_match_on(("method", "endpoint", *args.match_on), source="--match-on"),
        collected=None if args.test_id else _collected(run),
    )


#: How long the suite's collection may take before the import goes on without it.
COLLECT_TIMEOUT = 600

_LAYOUT = (
    "Test ids: guessed from pytest-recording's layout (<dir>/cassettes/<module>/"
    "[<Class>.]<test>.yaml -> <dir>/<module>.py::[<Class>::]<test>), {why}; a parameter "
    "pytest-recording changed in a cassette name (any of <>?%*:|\"'/\\ became -) comes out "
    "wrong: check 'Tests covered' below, or pass --test-ids FILE (pytest --collect-only -q > FILE)"
)


def _collected(run: Run) -> CollectedTests | None:
    """The suite's test ids: from `--test-ids FILE`, else from `pytest --collect-only` run
    in the project; None (and a line saying the ids are guessed) without them."""
    from hashreplay.engine.import_vcr import collected_from_lines

    args, root = run.args, run.config.root
    if args.test_ids is not None:
        try:
            lines = args.test_ids.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            msg = f"--test-ids {args.test_ids}: cannot read it: {exc}"
            raise ConfigError(msg) from None
        collected = collected_from_lines(lines, root, f"--test-ids {args.test_ids}")
        if not collected.ids:
            msg = (
                f"--test-ids {args.test_ids} holds no test ids (one a line, as "
                "`pytest --collect-only -q` prints them)"
            )
            raise ConfigError(msg)
        run.console.line(f"Test ids: {len(collected.ids)} read from {args.test_ids}")
        return collected
    if args.no_collect:
        run.console.line(_LAYOUT.format(why="as --no-collect asks"))
        return None
    found, why = _collect(root)
    if found is None:
        run.console.line(_LAYOUT.format(why=f"not collected: {why}"))
        return None
    run.console.line(f"Test ids: {len(found.ids)} collected by pytest --collect-only{why}")
    return found


def _collect(root: Path) -> tuple[CollectedTests | None, str]:
    """`pytest --collect-only` in the project (with the hashreplay plugin off, so it writes
    nothing), in a subprocess: the ids and a remark, or None and why not."""
    import json
    import subprocess
    import sys
    import tempfile

    from hashreplay.engine.import_vcr import CollectedTests

    script = "import sys, hashreplay.plugin.markers as m; m.collect_test_ids(sys.argv[1])"
    with tempfile.TemporaryDirectory(prefix="hashreplay-collect-") as temp:
        out = Path(temp) / "ids.json"
        try:
            done = subprocess.run(
                [sys.executable, "-c", script, str(out)],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=COLLECT_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, f"pytest --collect-only took over {COLLECT_TIMEOUT} s"
        except OSError as exc:
            return None, f"cannot run {sys.executable}: {exc}"
        try:
            result = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return None, f"pytest --collect-only failed ({tail[0]})"
    ids = tuple(str(i) for i in result["ids"])
    if not ids:
        return None, f"pytest --collect-only in {root} found no tests (exit {result['exit']})"
    remark = ""
    if result["exit"] not in (0, 5):
        remark = f" (it reported errors, exit {result['exit']}: pytest --collect-only shows them)"
    return CollectedTests(ids, Path(result["rootdir"]), "pytest --collect-only"), remark


def import_recordings(run: Run) -> int:
    args = run.args
    files = source_files(args.paths, SUFFIXES[args.format])
    if args.format == "vcr" and args.test_id and len(files) != 1:
        run.console.error(
            f"--test-id names the test of one cassette, and {len(files)} files were given; "
            "import them one at a time, or drop --test-id to use pytest-recording's layout"
        )
        return EXIT_PROBLEMS
    report = run_import(
        run.config, files, _reader(run), dry_run=args.dry_run, overwrite=args.overwrite
    )
    _print(run, report, len(files))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def _print(run: Run, report: ImportReport, sources: int) -> None:
    dry = run.args.dry_run
    show = run.show_path
    for source, path in report.imported:
        run.console.line(f"{'Would import' if dry else 'Imported'}: {source} -> {show(path)}")
    for note in report.notes:
        run.console.line(f"Note: {note}")
    for skipped in report.skipped:
        if skipped.fatal:
            run.console.error(f"skipped: {skipped.source}: {skipped.reason}")
        else:
            run.console.line(f"Filtered: {skipped.source}: {skipped.reason}")
    for path in report.kept:
        run.console.error(
            f"kept: {show(path)} exists and differs from the import; use --overwrite to replace it"
        )
    if report.tests:
        run.console.line("Tests covered:")
        for test in sorted(report.tests, key=lambda t: t or ""):
            run.console.line(f"  {test or '(none: shared or made outside a test)'}")
    files = len(report.written) + len(report.unchanged) + len(report.overwritten)
    summary = (
        f"Summary: {len(report.imported)} imported from {sources} files into "
        f"{files + len(report.kept)} recordings ({len(report.written)} new, "
        f"{len(report.unchanged)} unchanged, {len(report.overwritten)} overwritten, "
        f"{len(report.kept)} kept), {report.blobs_written} blobs, {len(report.skipped)} skipped"
    )
    run.console.line(summary + ("; dry run: nothing written" if dry else ""))


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
            + "): shared model lists were kept; run the whole "
            "suite, then prune again to find those too"
        )
    return EXIT_PROBLEMS if result.failed or result.refused else run.status


def move(run: Run) -> int:
    """`hashreplay mv OLD NEW` (docs/design.md §14): 0 when everything moved, 1 when OLD
    names nothing or a conflict or unreadable file stopped it (nothing moved), 2 for a
    malformed OLD or NEW."""
    from hashreplay.engine.rehash import apply_moves, parse_rename, plan_moves

    args, dry, show = run.args, run.args.dry_run, run.show_path
    try:
        rename = parse_rename(args.old, args.new)
    except SettingsError as exc:
        run.console.error(str(exc))
        return EXIT_USAGE
    loaded: list[Loaded] = []
    unreadable: list[tuple[Path, RecordingError]] = []
    for path in run.console.progress(run.files(), "reading"):
        try:
            loaded.append(load(path, run.store))
        except RecordingError as exc:
            unreadable.append((path, exc))
    result = plan_moves(loaded, Rules(run.config), rename, unreadable)
    if not result.moves and not result.unreadable:
        near = f"; recorded names like it: {', '.join(result.near)}" if result.near else ""
        run.console.error(
            f"no recording belongs to {rename.describe()}{near}. "
            "`hashreplay list --test PATTERN` lists the recorded test ids"
        )
        return EXIT_PROBLEMS
    apply_moves(result, run.config.root, rename, dry_run=dry)
    for path, problem in result.unreadable:
        run.console.error(
            f"cannot move {show(path)}: unreadable: {problem.problem}; to fix it: "
            f"{run.unreadable_fix(path)}, or delete it; then run the mv again"
        )
    for plan, _why in result.rekeyed.collisions:
        run.console.error(
            f"conflict: {show(plan.target)} already exists and holds a different recording "
            f"than {show(plan.source)}, which would move there; compare them (hashreplay diff "
            f"{show(plan.source)} {show(plan.target)}), delete the one no test needs, then "
            "run the mv again"
        )
    if result.refused:
        problems = len(result.unreadable) + len(result.rekeyed.collisions)
        run.console.line(
            f"Nothing moved: {problems} problem{'' if problems == 1 else 's'} above "
            f"({len(result.moves)} recordings of {rename.describe()} left as they are)"
        )
        return EXIT_PROBLEMS
    by_source = {m.rekey.source: m for m in result.moves}
    for plan in result.rekeyed.done:
        m = by_source[plan.source]
        verb = "Would move" if dry else "Moved"
        run.console.line(
            f"{verb}: {show(plan.source)} -> {show(plan.target)} ({m.old_id} -> {m.new_id})"
        )
    for plan in result.rekeyed.duplicates:
        verb = "Would remove duplicate" if dry else "Removed duplicate"
        run.console.line(f"{verb}: {show(plan.source)} (the same recording is {show(plan.target)})")
    if result.usage_problem is not None:
        run.console.warning(
            f"the usage log was left as it is: {result.usage_problem}; until the next run "
            "writes a new one, `hashreplay prune` may not see the moved recordings as used"
        )
    tests = len({m.new_id for m in result.moves})
    summary = (
        f"Summary: {len(result.moves)} recording{'' if len(result.moves) == 1 else 's'} of "
        f"{tests} test{'' if tests == 1 else 's'} {'would move' if dry else 'moved'}"
    )
    if result.usage_moved:
        summary += f"; usage log: {result.usage_moved} test ids renamed"
    run.console.line(summary + ("; dry run: nothing written" if dry else ""))
    return EXIT_OK


def normalize(run: Run) -> int:
    config, dry = run.config, run.args.dry_run
    paths = list(run.args.paths)
    if not paths and getattr(run.args, "default_scope", None) == "tests":
        paths = [p for p in (config.root / "tests", config.common_dir) if p.is_dir()]
        files = find_recordings(paths, config.common_dir) if paths else []
    else:
        files = run.files(paths)
    rules = Rules(config)
    modified = 0
    for item in run.load_all(files, "normalizing"):
        data = renormalised(item, rules)
        if data is None:
            continue
        modified += 1
        if dry:
            run.console.line(f"Would normalize: {run.show_path(item.path)}")
        else:
            write_json(item.path, data, rules.store)
            run.console.line(f"Normalized: {run.show_path(item.path)}")
    run.console.line(f"Summary: {modified}/{len(files)} files modified")
    return run.status
