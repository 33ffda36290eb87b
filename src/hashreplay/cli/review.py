"""Setting a project up and reviewing its recordings: `init` (docs/design.md §16 Activation),
`git-setup`, `textconv` (what git runs to show a recording in `git diff`, `git log -p` and `git
show`; it never fails, so git always shows a diff), `diff` (the same without git); `verify`,
`rehash` and `normalize` hold them to the current rules, `drift-report` to the providers.
"""

from __future__ import annotations

import difflib
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hashreplay.cli.console import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Console, Run, printable
from hashreplay.core.config import load_config
from hashreplay.core.constants import GIT_DIFF_DRIVER, GITATTRIBUTES_PATTERN, RECORDINGS_DIRNAME
from hashreplay.core.errors import ConfigError, RecordingError
from hashreplay.core.paths import PYPROJECT, find_root
from hashreplay.core.transcript import textconv as textconv_bytes
from hashreplay.engine.files import Rules, load
from hashreplay.engine.files import verify as verify_file

#: How long a git command may take before the review gives up on it.
GIT_TIMEOUT = 60


def textconv(path: Path, console: Console) -> int:
    """Print the file as git should show it. Exits 0 whatever the file holds."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        console.error(f"cannot read {path}: {exc.strerror or exc}")
        return EXIT_OK  # git shows an empty side rather than failing the whole diff
    out = sys.stdout.buffer if console.out is sys.stdout else None
    converted = textconv_bytes(content)
    if out is not None:
        out.write(converted)
        out.flush()
    else:
        console.out.write(converted.decode("utf-8", errors="replace"))
    return EXIT_OK


class GitError(Exception):
    """A git command failed; the message says which and why."""


def _git(args: list[str], cwd: Path) -> bytes:
    if shutil.which("git") is None:
        msg = "git is not installed (or not on PATH)"
        raise GitError(msg)
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        msg = f"git {' '.join(args)} failed: {exc}"
        raise GitError(msg) from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", errors="replace").strip() or f"exit {done.returncode}"
        msg = f"git {' '.join(args)} (in {cwd}) failed: {why}"
        raise GitError(msg)
    return done.stdout


def _text(content: bytes) -> list[str]:
    return textconv_bytes(content).decode("utf-8", errors="replace").splitlines(keepends=True)


def diff(run: Run) -> int:
    """`hashreplay diff A B` / `hashreplay diff --rev REV FILE`: 0 the same, 1 different."""
    args, console = run.args, run.console
    paths: list[Path] = args.files
    if args.rev is not None:
        if len(paths) != 1:
            console.error("--rev REV compares one file with its committed version: give one FILE")
            return EXIT_USAGE
        path = paths[0]
        try:
            old = _git(["show", f"{args.rev}:./{path.name}"], cwd=path.resolve().parent)
            new = path.read_bytes()
        except GitError as exc:
            console.error(f"{exc}; is {path} committed at {args.rev}?")
            return EXIT_PROBLEMS
        except OSError as exc:
            console.error(f"cannot read {path}: {exc.strerror or exc}")
            return EXIT_PROBLEMS
        labels = (f"{path} ({args.rev})", str(path))
    else:
        if len(paths) != 2:
            console.error("give two recording files (A B), or one with --rev REV")
            return EXIT_USAGE
        try:
            old, new = paths[0].read_bytes(), paths[1].read_bytes()
        except OSError as exc:
            console.error(f"cannot read {exc.filename}: {exc.strerror or exc}")
            return EXIT_PROBLEMS
        labels = (str(paths[0]), str(paths[1]))
    lines = list(difflib.unified_diff(_text(old), _text(new), *labels))
    for line in lines:
        text = line.rstrip("\n")
        colour = {"+": "green", "-": "red", "@": "cyan"}.get(text[:1], "")
        bold = text.startswith(("+++", "---"))
        console.line(console.style(text, "bold") if bold else console.style(text, colour))
    return EXIT_PROBLEMS if lines else EXIT_OK


def textconv_command() -> str:
    """How git should call the textconv: `hashreplay textconv` when that command on PATH is
    this installation's, else this interpreter with `-m hashreplay textconv`."""
    found = shutil.which("hashreplay")
    here = Path(sys.executable).absolute().parent
    if found is not None and Path(found).absolute().parent == here:
        return "hashreplay textconv"
    return f"{shlex.quote(sys.executable)} -m hashreplay textconv"


def attribute_lines(root: Path, common_dir: Path) -> list[str]:
    """`.gitattributes` lines that send every recording through the diff driver."""
    lines = [f"{GITATTRIBUTES_PATTERN} diff={GIT_DIFF_DRIVER}"]
    try:
        common = common_dir.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        common = None
    if common is not None and Path(common).name != RECORDINGS_DIRNAME:
        lines.append(f"{attribute_pattern(common)} diff={GIT_DIFF_DRIVER}")
    return lines


#: Characters a gitattributes pattern treats as a glob, escaped to stand for themselves.
_GLOB = str.maketrans({c: "\\" + c for c in "\\*?["})


#: What a C-style quoted pattern writes as an escape.
_C_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def attribute_pattern(directory: str) -> str:
    """The `.gitattributes` pattern of the `*.json` files directly in `directory` (relative
    to the root, POSIX form): glob characters escaped, and the whole pattern C-quoted when
    it holds whitespace or a quote, since git splits a line at whitespace (`/my
    recordings/*.json` would be the pattern `/my` with the attribute `recordings/*.json`)."""
    pattern = f"/{directory.translate(_GLOB)}/*.json"
    if any(c.isspace() or c == '"' for c in pattern):
        return '"' + pattern.translate(_C_ESCAPES) + '"'
    return pattern


def setup_git(root: Path, common_dir: Path, command: str) -> list[str]:
    """Add the attribute lines that are missing to `<root>/.gitattributes` (returned) and set
    `diff.hashreplay.textconv` in the repository's local configuration."""
    _git(["rev-parse", "--git-dir"], cwd=root)  # raises outside a repository
    attributes = root / ".gitattributes"
    try:
        current = attributes.read_text(encoding="utf-8")
    except FileNotFoundError:
        current = ""
    present = {line.strip() for line in current.splitlines()}
    added = [line for line in attribute_lines(root, common_dir) if line not in present]
    if added:
        lead = "" if not current or current.endswith("\n") else "\n"
        attributes.write_text(current + lead + "\n".join(added) + "\n", encoding="utf-8")
    _git(["config", "--local", f"diff.{GIT_DIFF_DRIVER}.textconv", command], cwd=root)
    return added


def git_setup(run: Run) -> int:
    config, console = run.config, run.console
    command = run.args.textconv or textconv_command()
    try:
        added = setup_git(config.root, config.common_dir, command)
    except GitError as exc:
        console.error(f"{exc}; run hashreplay git-setup inside the project's git repository")
        return EXIT_PROBLEMS
    except OSError as exc:
        console.error(f"cannot write {config.root / '.gitattributes'}: {exc.strerror or exc}")
        return EXIT_PROBLEMS
    where = run.show_path(config.root / ".gitattributes")
    for line in added:
        console.line(f"{where}: added {line}")
    if not added:
        console.line(f"{where}: already sends recordings to the {GIT_DIFF_DRIVER} diff driver")
    console.line(f"git config --local diff.{GIT_DIFF_DRIVER}.textconv {shlex.quote(command)}")
    console.line(
        "git diff, git log -p and git show now show recordings as conversations; commit "
        f"{where} so everyone who clones gets the attribute (each clone runs "
        "hashreplay git-setup once for the configuration)"
    )
    return EXIT_OK


#: What `init` appends: the table, and enough words that the file explains itself.
TABLE = (
    "[tool.hashreplay]\n"
    "# hashreplay records the LLM/HTTP calls of this project's tests and replays them:\n"
    "# `pytest` replays (no keys, no network); `INFERENCE_MODE=record-if-missing pytest`\n"
    "# records what is missing. Settings (mode, recordings_dir, passthrough, redact_keys, ...)\n"
    "# go in this table; see hashreplay's docs/usage.md, Configuration.\n"
)


class NotToml(Exception):
    """`pyproject.toml` exists but is not valid TOML: `init` changes nothing."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: not valid TOML: {problem}")
        self.path = path


def init_root(explicit: Path | None) -> Path:
    """Where `init` writes: `--root`, else the root every other command finds, or a nearer
    `pyproject.toml` on the way up from the working directory (pytest takes the nearest
    `pyproject.toml` as its rootdir when nothing else names one)."""
    found = find_root(explicit)
    if explicit is not None:
        return found.path
    here = Path.cwd().resolve()
    for directory in (here, *here.parents):
        if directory == found.path or found.path not in directory.parents:
            break
        if (directory / PYPROJECT).is_file():
            return directory
    return found.path


def _parse(text: str, path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise NotToml(path, str(exc)) from None
    return data


def _has_table(data: dict[str, Any]) -> bool:
    tool = data.get("tool")
    return isinstance(tool, dict) and "hashreplay" in tool


def with_table(current: bytes | None, path: Path) -> bytes | None:
    """`current` (None: no file) with the table appended, or None when it already has one.
    Raises NotToml for a file that is not valid TOML, or that would not be with the table
    (a `tool` written as an inline table cannot take another)."""
    if current is None:
        return TABLE.encode()
    try:
        text = current.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotToml(path, f"not UTF-8 (byte {exc.start})") from None
    if _has_table(_parse(text, path)):
        return None
    newline = "\r\n" if "\r\n" in text else "\n"
    lead = "" if not text else (newline if text.endswith("\n") else newline * 2)
    added = lead + TABLE.replace("\n", newline)
    result = text + added
    try:
        ok = _has_table(_parse(result, path))
    except NotToml:
        ok = False
    if not ok:
        raise NotToml(
            path,
            "its [tool] is written in a form a [tool.hashreplay] table cannot be added to "
            "(an inline table); add `hashreplay = {}` to it by hand",
        )
    return result.encode("utf-8")


def init(args: Any, console: Console) -> int:
    """`hashreplay init [--root DIR]`: 0 done (or nothing to do), 1 a file could not be
    read or written or git-setup failed, 2 a pyproject.toml that is not valid TOML."""
    try:
        root = init_root(args.root)
    except ConfigError as exc:  # an unreadable pyproject.toml on the way up
        console.error(f"{exc}; fix it, then run hashreplay init again (nothing was changed)")
        return EXIT_USAGE
    path = root / PYPROJECT
    target = path.resolve() if path.is_symlink() else path  # write the file, keep the link
    try:
        current: bytes | None = target.read_bytes()
    except FileNotFoundError:
        current = None
    except OSError as exc:
        console.error(f"cannot read {path}: {exc.strerror or exc}")
        return EXIT_PROBLEMS
    try:
        updated = with_table(current, path)
    except NotToml as exc:
        console.error(f"{exc}; fix it, then run hashreplay init again (nothing was changed)")
        return EXIT_USAGE
    where = _shown(path)
    if updated is None:
        console.line(f"{where}: already has [tool.hashreplay]; nothing changed")
    else:
        from hashreplay.core.atomic import write_bytes_atomic

        try:
            write_bytes_atomic(target, updated)
        except OSError as exc:
            console.error(f"cannot write {path}: {exc.strerror or exc}")
            return EXIT_PROBLEMS
        done = "created, with" if current is None else "added"
        console.line(f"{where}: {done} [tool.hashreplay]; plain `pytest` now replays (commit it)")
    try:
        run = Run(args, console, load_config(root))
    except ConfigError as exc:  # a table that was there already, with invalid settings
        console.error(str(exc))
        return EXIT_USAGE
    return _git_setup(run)


def _shown(path: Path) -> str:
    """`path` relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _git_setup(run: Run) -> int:
    """`git-setup`, as `hashreplay git-setup` runs it; without git or outside a repository
    there is nothing to set up yet, which a note says (the exit status stays 0)."""
    if shutil.which("git") is None:
        run.console.line("git is not installed: skipped git-setup")
        return EXIT_OK
    try:
        _git(["rev-parse", "--git-dir"], cwd=run.config.root)
    except GitError:
        run.console.line(
            f"{run.show_path(run.config.root)} is not in a git repository: skipped git-setup "
            "(after `git init`, run `hashreplay git-setup` so git diff shows recordings as "
            "conversations)"
        )
        return EXIT_OK
    return git_setup(run)


# --- verify ---------------------------------------------------------------------------------


def verify(run: Run) -> int:
    files = run.files(run.args.paths)
    rules = Rules(run.config)
    bad = 0
    for path in run.console.progress(files, "verifying"):
        try:
            item = load(path, run.store)
        except RecordingError as exc:
            problems = [f"unreadable: {exc.problem}; to fix it: {run.unreadable_fix(path)}"]
        else:
            problems = verify_file(item, rules)
        bad += bool(problems)
        for problem in problems:  # problems quote recorded values: shown, never interpreted
            run.console.line(printable(f"{run.show_path(path)}: {problem}"))
    strays = run.strays(run.args.paths)
    for stray in strays:
        run.console.line(printable(f"{run.show_path(stray.path)}: {stray.problem}"))
    run.console.line(f"Summary: {bad}/{len(files)} files with problems")
    if strays:
        run.console.line(f"Also: {len(strays)} symlinks or temp files in recordings directories")
    return EXIT_PROBLEMS if bad or strays else run.status


# --- rehash ---------------------------------------------------------------------------------


def rehash(run: Run) -> int:
    from hashreplay.engine.rehash import apply_rekeys, plan_rekey

    dry = run.args.dry_run
    files = run.files(run.args.paths)
    rules = Rules(run.config)
    plans = [
        plan
        for item in run.load_all(files, "reading")
        if (plan := plan_rekey(item, rules)) is not None
    ]
    result = apply_rekeys(plans, dry_run=dry)
    show = run.show_path
    for plan in result.done:
        if plan.renames:
            verb = "Would rename" if dry else "Renamed"
            run.console.line(f"{verb}: {show(plan.source)} -> {plan.target.name}")
        else:
            run.console.line(f"{'Would update' if dry else 'Updated'}: {show(plan.source)}")
    for plan in result.duplicates:
        verb = "Would remove duplicate" if dry else "Removed duplicate"
        run.console.line(f"{verb}: {show(plan.source)} (the same recording is {plan.target.name})")
    for plan, why in result.collisions:
        run.console.error(
            f"collision: cannot rename {show(plan.source)} to {plan.target.name}: {why}; "
            "compare the two (hashreplay show), delete the one no test needs, then run "
            "hashreplay rehash again"
        )
    changed = len(result.done) + len(result.duplicates)
    run.console.line(f"Summary: {changed}/{len(files)} files re-keyed")
    return EXIT_PROBLEMS if result.collisions else run.status


def drift_report(run: Run) -> int:
    """The last drift run's result (`.hashreplay/drift.json`), every difference of every
    drifted test; 1 when it found drift or there is no result, else 0."""
    from hashreplay.engine.drift import drift_path, read_result, render

    root = run.config.root
    try:
        result = read_result(root)
    except ValueError as exc:
        run.console.error(str(exc))
        return EXIT_PROBLEMS
    if result is None:
        run.console.error(
            f"no drift result: {drift_path(root)} does not exist. Run `pytest "
            "--hashreplay-drift` with the providers' keys set (a run that was interrupted "
            "writes none)"
        )
        return EXIT_PROBLEMS
    for line in render(result, every=True):
        run.console.line(line)
    return EXIT_PROBLEMS if result.get("drifted") else EXIT_OK
