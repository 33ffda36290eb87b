"""`hashreplay import vcr|ogx PATH…`: other tools' recordings become hashreplay recordings.

The readers live in `maintenance.import_vcr` / `maintenance.import_ogx`; the engine-driven
import in `maintenance.importing`. This module parses the options and prints the report.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hashreplay.cli.run import EXIT_OK, EXIT_PROBLEMS, Run
from hashreplay.maintenance.importing import ImportReport, Reader, run_import, source_files

#: File endings searched for under a directory, per format.
SUFFIXES = {"vcr": (".yaml", ".yml", ".json"), "ogx": (".json",)}


def configure(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`import vcr` and `import ogx`, each with its options."""
    parser = sub.add_parser("import", help="import vcrpy/pytest-recording cassettes or OGX files")
    formats = parser.add_subparsers(dest="format", metavar="FORMAT", required=True)
    vcr = formats.add_parser("vcr", help="vcrpy / pytest-recording cassettes (YAML or JSON)")
    vcr.add_argument(
        "--test-id",
        metavar="ID",
        help="the test id of a single cassette (default: from pytest-recording's layout, "
        "<dir>/cassettes/<module>/<test>.yaml -> <dir>/<module>.py::<test>)",
    )
    vcr.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="HOST",
        help="import only requests to this host (repeatable); others are skipped",
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
        from hashreplay.maintenance.import_ogx import read_ogx

        return read_ogx
    from hashreplay.maintenance.import_vcr import vcr_reader

    return vcr_reader(
        root=run.config.root,
        test_id=args.test_id,
        hosts=tuple(args.host),
        max_bytes=run.config.max_body_bytes,
    )


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
