"""`import vcr` and `import ogx`: other tools' recordings brought into the store (the readers
are in `engine/`), with the test id of each found by collecting the suite, from a file of ids,
or from pytest-recording's layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hashreplay.cli.run import EXIT_OK, EXIT_PROBLEMS, Run
from hashreplay.core.errors import ConfigError
from hashreplay.engine.importing import ImportReport, Reader, run_import, source_files

if TYPE_CHECKING:
    from hashreplay.engine.import_vcr import CollectedTests


#: File endings searched for under a directory, per format.
SUFFIXES = {"vcr": (".yaml", ".yml", ".json"), "ogx": (".json",)}


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
    found, why, said = _collect(root)
    if found is None:
        run.console.line(_LAYOUT.format(why=f"not collected: {why}"))
    else:
        run.console.line(f"Test ids: {len(found.ids)} collected by pytest --collect-only{why}")
    if said:
        run.console.line("pytest --collect-only said:")
        for line in said:
            run.console.line(f"  {line}")
    return found


def _collect(root: Path) -> tuple[CollectedTests | None, str, list[str]]:
    """`pytest --collect-only` in the project (with the hashreplay plugin off, so it writes
    nothing), in a subprocess: the ids (or None), a remark or why there are none, and the
    first lines of its output when it failed."""
    import json
    import subprocess
    import sys
    import tempfile

    from hashreplay.engine.import_vcr import CollectedTests
    from hashreplay.plugin.recording import collection_failure

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
            return None, f"pytest --collect-only took over {COLLECT_TIMEOUT} s", []
        except OSError as exc:
            return None, f"cannot run {sys.executable}: {exc}", []
        try:
            result = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            said = collection_failure(done.stderr + done.stdout) or ["no output"]
            return None, f"pytest --collect-only failed (exit {done.returncode})", said
    ids = tuple(str(i) for i in result["ids"])
    failed = result["exit"] not in (0, 5)
    said = collection_failure(done.stderr + done.stdout, ids) if failed else []
    if not ids:
        what = "failed" if failed else "found no tests"
        why = f"pytest --collect-only in {root} {what} (exit {result['exit']})"
        return None, why, said
    remark = f" (it reported errors, exit {result['exit']})" if failed else ""
    return CollectedTests(ids, Path(result["rootdir"]), "pytest --collect-only"), remark, said


def import_recordings(run: Run) -> int:
    args = run.args
    files = source_files(args.paths, SUFFIXES[args.format])
    if args.format == "vcr" and args.test_id and len(files) != 1:
        run.console.error(
            f"--test-id names the test of one cassette, and {len(files)} files were given; "
            "import them one at a time, or drop --test-id to use pytest-recording's layout"
        )
        return EXIT_PROBLEMS
    reader = _reader(run)
    if args.format == "vcr":
        from hashreplay.plugin.recording import keep_vcrpy_note, vcr_importers

        importers = vcr_importers(run.config.root)
        if importers:
            run.console.line(f"Note: {keep_vcrpy_note(importers)}")
    report = run_import(run.config, files, reader, dry_run=args.dry_run, overwrite=args.overwrite)
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
