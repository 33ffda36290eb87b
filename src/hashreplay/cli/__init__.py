"""The `hashreplay` command: its parser, `main(argv) -> int` (testable without a subprocess)
and the entry point; each command family lives in its own module (`status`, `setup`, `review`,
`integrity`, `prune`, `imports`, `drift`, `usage`), imported only when its command runs. Exit
status:
0 when all went well, 1 when the command found problems (unreadable files, `verify` findings,
`rehash` collisions, nothing to show), 2 for usage errors (an unknown command or option, a path
that does not exist, an invalid `[tool.hashreplay]`). Start-up stays fast: no SDK, HTTP client
or server is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from hashreplay import __version__
from hashreplay.cli.output import Console
from hashreplay.cli.run import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Command, Run
from hashreplay.core.config import Config, load_config, load_config_reporting
from hashreplay.core.errors import ConfigError, HashReplayError, PathNotFound


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

    _add_used(sub)

    drift = sub.add_parser(
        "drift-report",
        help="the last `pytest --hashreplay-drift` result: each drifted test, every difference",
    )
    _add_root(drift)

    _add_review(sub)

    _add_import(sub)

    server = _server_cli()
    if server is not None:  # `hashreplay serve`: the proxy registers its own options
        server.configure_parser(sub.add_parser("serve", help="record/replay HTTP proxy"))
    return parser


def _add_used(sub: Any) -> None:
    used = sub.add_parser(
        "used",
        help="the recordings each test of the last run replayed or wrote (per its usage log)",
        description="Per test id of the last pytest run, the recording files it replayed or "
        "wrote, as the usage log (.hashreplay/usage.json) has them.",
    )
    _add_root(used)
    _add_usage_logs(used)
    used.add_argument(
        "--test", metavar="PATTERN", help="test ids containing PATTERN (a glob with * or ?)"
    )


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


def _add_import(sub: Any) -> None:
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


def _server_cli() -> ModuleType | None:
    """`hashreplay.server.cli` (standard library only at import time), when present."""
    try:
        return importlib.import_module("hashreplay.server.cli")
    except ImportError:
        return None


def _command(name: str) -> Command:
    """The function that runs command `name`; only its own module is imported."""
    module, function = _COMMANDS[name]
    found: Command = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    return found


#: Each command that runs in a project: the module of its family and its function.
_COMMANDS: dict[str, tuple[str, str]] = {
    "import": ("imports", "import_recordings"),
    "git-setup": ("setup", "git_setup"),
    "status": ("status", "status"),
    "list": ("status", "list_recordings"),
    "show": ("status", "show"),
    "verify": ("integrity", "verify"),
    "rehash": ("integrity", "rehash"),
    "mv": ("integrity", "move"),
    "normalize": ("integrity", "normalize"),
    "prune": ("prune", "prune"),
    "drift-report": ("drift", "drift_report"),
    "used": ("usage", "used"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status. A reader that leaves before the output ends
    (`hashreplay list | head`) stops the command quietly: exit 1 when it was cut short, as
    Python's own convention for a broken pipe has it, its own status when only the last
    flush found the reader gone."""
    try:
        code = _main(argv)
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_PROBLEMS
    try:
        sys.stdout.flush()  # a reader that left shows here, not in the interpreter's last flush
    except BrokenPipeError:
        _discard_stdout()
    return code


def _discard_stdout() -> None:
    """Point stdout at the null device, so that nothing more, the interpreter's final flush
    included, meets the closed pipe (and prints "Exception ignored")."""
    with contextlib.suppress(OSError, ValueError):  # a stdout without a file descriptor
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
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
        from hashreplay.cli.setup import init

        return init(args, Console())
    if args.command in ("textconv", "diff"):  # no project needed: they read the files given
        from hashreplay.cli import review

        console = Console()
        if args.command == "textconv":
            return review.textconv(args.file, console)
        return review.diff(Run(args, console, Config()))
    return _run(_command(args.command), args)


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
    from hashreplay.cli.integrity import normalize

    args.default_scope = "tests"
    return _run(normalize, args)


def entry_point() -> None:  # pragma: no cover - the console script
    sys.exit(main())
