"""Setting a project up: `init` (the `[tool.hashreplay]` table in pyproject.toml,
docs/design.md §16 Activation, then `git-setup` when there is a repository) and `git-setup`
(the `.gitattributes` lines and the local git configuration that make `git diff` show
recordings as conversations through `hashreplay textconv`).
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from hashreplay.cli.git import GitError, git
from hashreplay.cli.output import Console
from hashreplay.cli.run import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Run
from hashreplay.core.config import load_config
from hashreplay.core.constants import GIT_DIFF_DRIVER, GITATTRIBUTES_PATTERN, RECORDINGS_DIRNAME
from hashreplay.core.errors import ConfigError
from hashreplay.core.paths import PYPROJECT, find_root


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
    git(["rev-parse", "--git-dir"], cwd=root)  # raises outside a repository
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
    git(["config", "--local", f"diff.{GIT_DIFF_DRIVER}.textconv", command], cwd=root)
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
        git(["rev-parse", "--git-dir"], cwd=run.config.root)
    except GitError:
        run.console.line(
            f"{run.show_path(run.config.root)} is not in a git repository: skipped git-setup "
            "(after `git init`, run `hashreplay git-setup` so git diff shows recordings as "
            "conversations)"
        )
        return EXIT_OK
    return git_setup(run)
