"""The `hashreplay` command: its parser, `main(argv) -> int` (testable without a subprocess),
and `status`, the one command that reports on a project whose config is invalid. Exit status:
0 when all went well, 1 when the command found problems (unreadable files, `verify` findings,
`rehash` collisions, nothing to show), 2 for usage errors (an unknown command or option, a path
that does not exist, an invalid `[tool.hashreplay]`). Start-up stays fast: no SDK, HTTP client
or server is imported.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from hashreplay import __version__
from hashreplay.cli.console import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Command, Console, Run
from hashreplay.core.config import Config, ModeSource, load_config, load_config_reporting
from hashreplay.core.constants import MODE_ENV
from hashreplay.core.errors import ConfigError, HashReplayError, PathNotFound
from hashreplay.core.model_lists import newest_model_list
from hashreplay.core.modes import MaxAge, age_in_days, today
from hashreplay.core.names import hash_of_name, is_model_list_name
from hashreplay.core.transcript import Tokens, printable, response_tokens
from hashreplay.engine.files import Loaded


def _add_root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        type=Path,
        default=None,
        help="project root (default: $HASHREPLAY_ROOT, else the nearest directory above the "
        "current one with a pyproject.toml holding [tool.hashreplay], else pytest's rootdir "
        "markers, else .git, else the current directory)",
    )


def _add_paths(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="recording files or directories (default: every recordings directory of the "
        "project and the common directory)",
    )


def _add_usage_logs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--usage-log",
        dest="usage_logs",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="a usage log (.hashreplay/usage.json) of one CI shard; repeat it to merge the "
        "logs of a suite split across machines (default: the project's own log)",
    )


def _add_dry_run(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--dry-run", action="store_true", help=f"list what {what}; write nothing")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hashreplay",
        description="Record and replay the LLM/HTTP calls of a test suite: inspect and "
        "maintain its recordings.",
    )
    parser.add_argument("--version", action="version", version=f"hashreplay {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    init = sub.add_parser(
        "init",
        help="turn hashreplay on for this project: [tool.hashreplay] in pyproject.toml, "
        "then git-setup",
    )
    _add_root(init)
    init.set_defaults(textconv=None)  # git-setup's default textconv command

    status = sub.add_parser("status", help="mode, recordings directories, tokens they hold")
    _add_root(status)
    _add_usage_logs(status)
    status.add_argument(
        "--paths",
        dest="paths_only",
        action="store_true",
        help="print only the directories that hold recordings, one a line (for git add)",
    )
    status.add_argument(
        "--older-than",
        metavar="AGE",
        help='list only the recordings with a response older than AGE ("90d", "12w"): '
        "age, day recorded, test id, file",
    )

    listing = sub.add_parser("list", help="one line per recording")
    _add_root(listing)
    listing.add_argument(
        "--test", metavar="PATTERN", help="test ids containing PATTERN (a glob with * or ?)"
    )
    listing.add_argument(
        "--endpoint", metavar="PATTERN", help="endpoints containing PATTERN (a glob with * or ?)"
    )
    _add_paths(listing)

    show = sub.add_parser("show", help="one recording in readable form")
    _add_root(show)
    show.add_argument(
        "target", metavar="HASH|PATH", help="a file, or a hash or its first characters"
    )
    show.add_argument("--raw", action="store_true", help="print the file as it is stored")

    verify = sub.add_parser(
        "verify", help="check recordings: readable, current, redacted, correctly named"
    )
    _add_root(verify)
    _add_paths(verify)

    rehash = sub.add_parser("rehash", help="re-key recordings after the hashing rules changed")
    _add_root(rehash)
    _add_dry_run(rehash, "would be renamed or updated")
    _add_paths(rehash)

    move = sub.add_parser(
        "mv",
        help="re-key the recordings of a renamed or moved test, test file or directory",
        description="Re-key the recordings of a test id, a test file or a directory under "
        "a new name (the test id is part of each recording's hash), into the directory "
        "the new name's recordings belong in; the usage log follows. Moves everything or "
        "nothing.",
    )
    _add_root(move)
    _add_dry_run(move, "would move")
    move.add_argument(
        "old",
        metavar="OLD",
        help="what the recordings were made under: a test id (tests/test_a.py::test_x, its "
        "parametrised cases included), a test file (tests/test_a.py) or a directory "
        "(tests/old/)",
    )
    move.add_argument("new", metavar="NEW", help="the new name, in the same form as OLD")

    normalize = sub.add_parser("normalize", help="re-apply the response normaliser")
    _add_root(normalize)
    _add_dry_run(normalize, "would change")
    _add_paths(normalize)

    prune = sub.add_parser("prune", help="delete recordings no test uses (per the last pytest run)")
    _add_root(prune)
    _add_dry_run(prune, "would be deleted")
    _add_usage_logs(prune)

    drift = sub.add_parser(
        "drift-report",
        help="the last `pytest --hashreplay-drift` result: each drifted test, every difference",
    )
    _add_root(drift)

    _add_review(sub)

    from hashreplay.cli.store import configure as configure_import

    configure_import(sub)

    server = _server_cli()
    if server is not None:  # `hashreplay serve`: the proxy registers its own options
        server.configure_parser(sub.add_parser("serve", help="record/replay HTTP proxy"))
    return parser


def _add_review(sub: Any) -> None:
    textconv = sub.add_parser(
        "textconv", help="print a recording as a conversation (git's textconv for diffs)"
    )
    textconv.add_argument("file", type=Path, metavar="FILE")

    git_setup = sub.add_parser(
        "git-setup", help="make git diff and git log -p show recordings as conversations"
    )
    _add_root(git_setup)
    git_setup.add_argument(
        "--textconv",
        metavar="CMD",
        help="the command git runs to convert a recording (default: hashreplay textconv, "
        "or this Python with -m hashreplay textconv when that is not on PATH)",
    )

    diff = sub.add_parser("diff", help="compare two recordings as conversations")
    diff.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="A B, or one FILE with --rev"
    )
    diff.add_argument(
        "--rev", metavar="REV", help="compare FILE with its version at this git revision"
    )


def _mode_source(run: Run) -> str:
    config = run.config
    source = config.mode_source
    if source is ModeSource.ENV:
        return f"env ({MODE_ENV})"
    if source is ModeSource.FILE and config.config_file is not None:
        return f"config ({run.show_path(config.config_file)})"
    return str(source)


def status(run: Run) -> int:
    console, config = run.console, run.config
    files = run.files()
    if run.args.paths_only:
        # `git add $(hashreplay status --paths)`: every directory holding recordings
        for directory in sorted({run.show_path(path.parent) for path in files}):
            console.line(directory)
        return EXIT_OK
    if run.args.older_than is not None:  # checked before any file is read
        limit = MaxAge.parse(run.args.older_than, source="--older-than")
        return _older_than(run, run.load_all(files, "reading"), limit)
    loaded = run.load_all(files, "reading")
    console.line(f"mode: {console.style(config.mode.value, 'bold')}")
    console.line(f"mode source: {_mode_source(run)}")
    reason = "--root" if run.args.root is not None else config.root_reason
    # the root absolute (which project was found); every other path relative to here
    console.line(f"root: {config.root} (from {reason})")
    shown = run.show_path(config.config_file) if config.config_file else None
    if run.config_problem is not None:
        console.line(
            f"config: {shown or 'pyproject.toml'} is invalid: each setting in error takes its "
            "default here (the problems are listed at the end)"
        )
    else:
        console.line(f"config: {shown or 'none (defaults)'}")
    console.line(f"common directory: {run.show_path(config.common_dir)}")

    by_dir: dict[Path, list[int]] = {}
    for path in files:
        by_dir.setdefault(path.parent, []).append(_size(path))
    rows = [
        [run.show_path(d), str(len(sizes)), console.size(sum(sizes))]
        for d, sizes in sorted(by_dir.items())
    ]
    total = sum(sum(s) for s in by_dir.values())
    if console.tty and rows:
        console.line()
        console.table(
            [*rows, ["total", str(len(files)), console.size(total)]],
            ["recordings directory", "files", "size"],
        )
        console.line()
    elif not console.tty:
        for row in rows:
            console.line(f"recordings: {row[0]}\t{row[1]} files\t{row[2]} bytes")
        console.line(f"total: {len(files)} files\t{total} bytes")
    if not files:
        console.line("no recordings yet: INFERENCE_MODE=record-if-missing pytest records them")
    for stray in run.strays():
        console.line(f"stray: {run.show_path(stray.path)}: {stray.problem}")

    tokens = Tokens()
    for item in loaded:
        for response in item.recording.responses:
            tokens.add(response_tokens(response))
    console.line(
        f"tokens: {tokens.input} input + {tokens.output} output = "
        f"{console.style(str(tokens.total), 'bold')} total in {tokens.responses} responses "
        "(what every replayed run saves)"
    )
    from hashreplay.cli.store import last_run

    last_run(run, loaded)
    return run.status


def _older_than(run: Run, loaded: list[Loaded], limit: MaxAge) -> int:
    """`status --older-than AGE`: each recording whose oldest response is older than AGE,
    oldest first (docs/recordings.md, "Age"); responses without a day are counted apart."""
    day = today()
    rows: list[tuple[int, str, str, str]] = []
    undated = 0
    lists: dict[str, list[Loaded]] = {}  # a shared model list is dated by its newest file
    for item in loaded:
        if is_model_list_name(item.path.name) and (hash_hex := hash_of_name(item.path.name)):
            lists.setdefault(hash_hex, []).append(item)
    older_sets: set[Path] = set()  # the model sets a newer file of the same list outdates
    for group in lists.values():
        newest = newest_model_list([(i.path, i.recording.response) for i in group])
        older_sets.update(item.path for n, item in enumerate(group) if n != newest)
    for item in loaded:
        if item.path in older_sets:
            continue
        ages = [
            (age, response.recorded_on or "")
            for response in item.recording.responses
            if (age := age_in_days(response.recorded_on, day)) is not None
        ]
        undated += len(item.recording.responses) - len(ages)
        oldest = max(ages, default=None)
        if oldest is not None and oldest[0] > limit.days:
            shared = "(shared model list)" if is_model_list_name(item.path.name) else "(shared)"
            test = item.recording.test_id or shared
            rows.append((oldest[0], oldest[1], test, run.show_path(item.path)))
    rows.sort(key=lambda row: (-row[0], row[3]))
    console = run.console
    for age, recorded_on, test, path in rows:
        console.line(f"{age}d\t{recorded_on}\t{printable(test)}\t{path}")
    summary = f"{len(rows)} of {len(loaded)} recording(s) older than {limit} (today {day})"
    if undated:
        summary += f"; {undated} response(s) have no recorded day (recorded before days were kept)"
    console.line(summary)
    return run.status


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _server_cli() -> ModuleType | None:
    """`hashreplay.server.cli` (standard library only at import time), when present."""
    try:
        return importlib.import_module("hashreplay.server.cli")
    except ImportError:
        return None


def _commands() -> dict[str, Command]:
    from hashreplay.cli import console, review, store

    return {
        "import": store.import_recordings,
        "git-setup": review.git_setup,
        "status": status,
        "list": console.list_recordings,
        "show": console.show,
        "verify": review.verify,
        "rehash": review.rehash,
        "mv": store.move,
        "normalize": store.normalize,
        "prune": store.prune,
        "drift-report": review.drift_report,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help()
        return EXIT_OK
    if args.command == "serve":
        server = _server_cli()
        assert server is not None  # the sub-command exists only when the module does
        code: int = server.run(args)
        return code
    if args.command == "init":  # before any configuration is read: it may write the table
        from hashreplay.cli.review import init

        return init(args, Console())
    if args.command in ("textconv", "diff"):  # no project needed: they read the files given
        from hashreplay.cli import review

        console = Console()
        if args.command == "textconv":
            return review.textconv(args.file, console)
        return review.diff(Run(args, console, Config()))
    return _run(_commands()[args.command], args)


def _run(command: Command, args: argparse.Namespace) -> int:
    console = Console()
    try:
        if getattr(args, "command", None) == "status":
            # status reports on a project whose config is invalid too, as far as it can
            config, problem = load_config_reporting(args.root)
        else:
            config, problem = load_config(args.root), None
        run = Run(args, console, config)
        run.config_problem = problem
        code = command(run)
        if problem is not None:
            console.error(str(problem))
            return EXIT_USAGE
        return code
    except PathNotFound as exc:
        console.error(f"{exc}; give an existing recording file or directory")
        return EXIT_USAGE
    except ConfigError as exc:
        console.error(str(exc))
        return EXIT_USAGE
    except HashReplayError as exc:
        console.error(str(exc))
        return EXIT_PROBLEMS
    except BrokenPipeError:  # `hashreplay list | head`: the reader left, nothing to report
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush is quiet
        return EXIT_OK
    except KeyboardInterrupt:
        console.error("interrupted")
        return 130


def normalize_script(argv: Sequence[str] | None = None) -> int:
    """`scripts/normalize_recordings.py [--dry-run] [PATHS…]` (contract).

    The same as `hashreplay normalize`, except that the default paths are every recordings
    directory under `tests/` plus the common directory.
    """
    parser = argparse.ArgumentParser(
        prog="normalize_recordings.py",
        description="Re-apply the response normaliser to recordings (response bodies only).",
    )
    _add_root(parser)
    _add_dry_run(parser, "would change")
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="recording files or directories (default: tests/ and the common directory)",
    )
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    from hashreplay.cli.store import normalize

    args.default_scope = "tests"
    return _run(normalize, args)


def entry_point() -> None:  # pragma: no cover - the console script
    sys.exit(main())
