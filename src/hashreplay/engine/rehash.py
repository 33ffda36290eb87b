"""Re-keying recordings: `hashreplay rehash` and `hashreplay mv`.

`rehash`: after the hashing or normalising rules changed, each file's key is recomputed
from its stored request (re-normalised under the current rules), the file is renamed to it
and its `key_version` updated, so no recording becomes unreachable. The stored URL is
brought to its current form too (a loopback upstream keeps no port); the URL is not hashed,
so that never renames a file. A rename never overwrites a different file: that is reported
as a collision.

`mv OLD NEW` (docs/design.md §14): the test id is part of the key (§3), so a renamed or
moved test finds none of its recordings. `mv` re-keys the recordings of a test id, a test
file or a directory under the new name, each under its own matching rule, into the
directory the store layout (§4) gives the new id, and moves the test ids and files the
usage log names, so `prune` keeps what moved. It moves everything or nothing.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from hashreplay.core.constants import KEY_VERSION
from hashreplay.core.errors import RecordingError, SettingsError, UsageError
from hashreplay.core.urls import stored_url
from hashreplay.engine.files import Loaded, Rules, recorded_test_id, write_like
from hashreplay.engine.usage import TestUsage, read_usage, relative, usage_path, write_usage


@dataclass(frozen=True)
class Rekey:
    """One file re-keyed: where it is, where it belongs, and its new bytes."""

    source: Path
    target: Path
    content: bytes

    @property
    def renames(self) -> bool:
        return self.source != self.target


def plan_rekey(
    loaded: Loaded, rules: Rules, test_id: str | None = None, directory: Path | None = None
) -> Rekey | None:
    """The file re-normalised and re-named under the current rules; None when it is current.
    With `test_id`, re-keyed under that test id, into `directory` when given (`mv`)."""
    recording = loaded.recording
    if test_id is not None:
        recording = recording.replace(test_id=test_id)
    body = rules.renormalised_body(recording)
    url = stored_url(recording.request.url)
    request = recording.request.replace(body=body, url=url)
    # the file's own rule, else the project's current one (docs/design.md §14)
    rule = rules.rule_of(recording)
    match = None if rule is None or rules.is_shared(recording) else rule.stored()
    updated = recording.replace(key_version=KEY_VERSION, request=request, match=match)
    content = rules.store.dump(updated)
    target = (directory or loaded.path.parent) / rules.file_name(recording, body)
    if target == loaded.path and content == loaded.content:
        return None
    return Rekey(loaded.path, target, content)


@dataclass
class RekeyResult:
    done: list[Rekey] = field(default_factory=list)
    #: Sources dropped because their target already held exactly the same recording.
    duplicates: list[Rekey] = field(default_factory=list)
    collisions: list[tuple[Rekey, str]] = field(default_factory=list)


class _Overlay:
    """The file system as it will be after the planned writes (all of them, or none)."""

    def __init__(self, write: bool) -> None:
        self.write = write
        self.changed: dict[Path, bytes | None] = {}

    def read(self, path: Path) -> bytes | None:
        if path in self.changed:
            return self.changed[path]
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError:
            return b""  # present but unreadable: never overwritten

    def put(self, path: Path, content: bytes, like: Path) -> None:
        if self.write:
            write_like(path, content, like)
        self.changed[path] = content

    def delete(self, path: Path) -> None:
        if self.write:
            path.unlink(missing_ok=True)
        self.changed[path] = None


def apply_rekeys(plans: Sequence[Rekey], *, dry_run: bool) -> RekeyResult:
    """Write every plan that can be written without overwriting a different file.

    A plan whose target is a file that itself still has to move waits for it (so `a → b`,
    `b → c` works in any order); a target holding a different recording is a collision,
    reported and left alone; one holding the very same bytes makes the source a duplicate.
    The new file is written before the old one is removed, so a crash loses nothing.
    """
    fs = _Overlay(write=not dry_run)
    result = RekeyResult()
    pending = list(plans)
    while pending:
        moving = {p.source.resolve() for p in pending if p.renames}
        waiting: list[Rekey] = []
        for plan in pending:
            if not plan.renames:
                fs.put(plan.source, plan.content, plan.source)
                result.done.append(plan)
                continue
            existing = fs.read(plan.target)
            if existing is None:
                fs.put(plan.target, plan.content, plan.source)
                fs.delete(plan.source)
                result.done.append(plan)
            elif plan.target.resolve() in moving:
                waiting.append(plan)
            elif existing == plan.content:
                fs.delete(plan.source)
                result.duplicates.append(plan)
            else:
                result.collisions.append((plan, "it exists and holds a different recording"))
        if len(waiting) == len(pending):
            result.collisions.extend(
                (p, "its target has to move first, in a cycle of renames") for p in waiting
            )
            break
        pending = waiting
    return result


# --- mv ---------------------------------------------------------------------------------------

#: What `mv` refuses in a name: it takes a test id, a file or a directory, never a pattern.
_NOT_IN_NAMES = re.compile(r"[*?\\\s]|^\s|\s$")


@dataclass(frozen=True)
class Rename:
    """`hashreplay mv OLD NEW`: the test ids OLD names and what each becomes.

    `kind` is "test" (`file.py::name`: the test, its parametrised cases `name[…]` and, for a
    class, its methods `name::…`), "file" (`tests/test_a.py`: every test id in it) or
    "directory" (`tests/old`: every test id of every file below it)."""

    kind: str
    old: str
    new: str

    def apply(self, test_id: str) -> str | None:
        """The new id of `test_id`, or None when OLD does not name it."""
        old = self.old
        if self.kind == "test":
            if test_id == old or test_id.startswith((f"{old}::", f"{old}[")):
                return self.new + test_id[len(old) :]
            return None
        file, sep, rest = test_id.partition("::")
        if self.kind == "file":
            return f"{self.new}{sep}{rest}" if file == old else None
        if file.startswith(f"{old}/"):
            return f"{self.new}{test_id[len(old) :]}"
        return None

    def describe(self) -> str:
        return {
            "test": f"test {self.old!r} (with its parametrised cases and methods)",
            "file": f"test file {self.old!r}",
            "directory": f"directory {self.old + '/'!r}",
        }[self.kind]


def _kind(name: str) -> str:
    if "::" in name:
        return "test"
    return "file" if PurePosixPath(name).suffix and not name.endswith("/") else "directory"


def _checked(name: str, which: str) -> str:
    """A name as given, checked: a node id or path relative to the project root."""
    if not name.strip():
        msg = f"{which} is empty: give a test id, a test file or a directory"
        raise SettingsError(msg)
    if _NOT_IN_NAMES.search(name):
        msg = (
            f"{which} {name!r} holds a wildcard, a backslash or a space: give a test id, a test "
            "file or a directory exactly as pytest names it (tests/test_a.py::test_x, "
            "tests/test_a.py, tests/old/), with / between directories"
        )
        raise SettingsError(msg)
    name = name.removeprefix("./")
    file = name.split("::", 1)[0]
    if file.startswith("/") or ".." in file.split("/"):
        msg = (
            f"{which} {name!r} leads outside the project: give it relative to the project "
            "root, as pytest prints node ids"
        )
        raise SettingsError(msg)
    if "::" in name and (not file or "" in name.split("::")[1:]):
        msg = f"{which} {name!r} is not a test id: write it as path/test_file.py::test_name"
        raise SettingsError(msg)
    return name if _kind(name) != "directory" else name.rstrip("/")


_FORMS = {
    "test": "a test id (path/test_file.py::test_name)",
    "file": "a test file (path/test_file.py)",
    "directory": "a directory (path/to/tests/)",
}


def parse_rename(old: str, new: str) -> Rename:
    """OLD and NEW checked and of one kind; a `SettingsError` says what is wrong."""
    old, new = _checked(old, "OLD"), _checked(new, "NEW")
    kind, new_kind = _kind(old), _kind(new)
    if kind != new_kind:
        msg = (
            f"OLD {old!r} is {_FORMS[kind]} and NEW {new!r} is {_FORMS[new_kind]}: give both "
            "in the same form"
        )
        raise SettingsError(msg)
    if not old or not new:
        msg = "the project root itself cannot be moved: name the directory below it"
        raise SettingsError(msg)
    if kind == "test" and "[" in new and "[" not in old:
        msg = (
            f"NEW {new!r} names a parametrised case but OLD {old!r} names the whole test: "
            "its cases keep their parameters; drop the [...] from NEW"
        )
        raise SettingsError(msg)
    if old == new:
        msg = f"OLD and NEW are both {old!r}: nothing to move"
        raise SettingsError(msg)
    return Rename(kind, old, new)


@dataclass(frozen=True)
class Move:
    """One recording moved: its re-keying and the test id it changes."""

    rekey: Rekey
    old_id: str
    new_id: str


@dataclass
class MoveResult:
    moves: list[Move] = field(default_factory=list)
    #: the re-keying: done (or, with collisions or unreadable files, only planned)
    rekeyed: RekeyResult = field(default_factory=RekeyResult)
    #: files OLD names that cannot be read: nothing moves while one is left
    unreadable: list[tuple[Path, RecordingError]] = field(default_factory=list)
    #: test ids of other recordings that look like OLD (when OLD named nothing)
    near: list[str] = field(default_factory=list)
    #: test ids the usage log moved; None: no log, or it could not be read (`usage_problem`)
    usage_moved: int | None = None
    usage_problem: str | None = None
    written: bool = False

    @property
    def refused(self) -> bool:
        return bool(self.rekeyed.collisions or self.unreadable)


def plan_moves(
    loaded: Iterable[Loaded],
    rules: Rules,
    rename: Rename,
    unreadable: Iterable[tuple[Path, RecordingError]] = (),
) -> MoveResult:
    """What `mv` does to each recording OLD names (nothing is written)."""
    keyer = rules.engine.keyer
    store = rules.store
    # a test id is stored with its secret shapes removed (docs/design.md §7): so is OLD
    stored = Rename(rename.kind, keyer.test_id(rename.old) or rename.old, rename.new)
    result = MoveResult()
    others: set[str] = set()
    for item in loaded:
        test_id = item.recording.test_id
        if test_id is None or item.is_model_list_file or rules.is_shared(item.recording):
            continue  # shared by every test: named without a test id (docs/design.md §3)
        new_id = stored.apply(test_id)
        if new_id is None:
            others.add(test_id)
            continue
        new_id = keyer.test_id(new_id) or new_id  # redacted as a write redacts it (§7)
        own = item.path.parent.resolve() == store.dir_for(test_id)
        directory = store.dir_for(new_id) if own else None  # the common directory stays
        rekey = plan_rekey(item, rules, new_id, directory)
        if rekey is not None:
            result.moves.append(Move(rekey, test_id, new_id))
    for path, problem in unreadable:
        test_id = recorded_test_id(path)
        if test_id is not None and stored.apply(test_id) is not None:
            result.unreadable.append((path, problem))
    if not result.moves and not result.unreadable:
        result.near = near_names(rename, others)
    return result


def near_names(rename: Rename, test_ids: Iterable[str], limit: int = 5) -> list[str]:
    """Names of OLD's kind among recorded test ids that look like OLD: those containing it,
    then the closest spellings."""
    ids = sorted(test_ids)
    if rename.kind == "test":
        names = ids
    elif rename.kind == "file":
        names = sorted({t.split("::", 1)[0] for t in ids})
    else:
        names = sorted(
            {str(p) + "/" for t in ids for p in PurePosixPath(t.split("::", 1)[0]).parents} - {"./"}
        )

    def tail(name: str) -> str:  # the last part: the test's name, the file's, the directory's
        return name.rstrip("/").rsplit("::", 1)[-1].rsplit("/", 1)[-1]

    wanted = tail(rename.old)
    found = [n for n in names if wanted in n]
    tails = {tail(n) for n in names}
    close = difflib.get_close_matches(wanted, tails, n=limit, cutoff=0.8)
    found += [n for t in close for n in names if tail(n) == t]
    return list(dict.fromkeys(found))[:limit]


def apply_moves(result: MoveResult, root: Path, rename: Rename, *, dry_run: bool) -> None:
    """Re-key every planned move, or nothing when one would overwrite a different file or a
    file OLD names cannot be read; then move the usage log's test ids and files."""
    plans = [move.rekey for move in result.moves]
    result.rekeyed = apply_rekeys(plans, dry_run=True)
    if result.refused:
        return
    if not dry_run:
        result.rekeyed = apply_rekeys(plans, dry_run=False)
        result.written = True
        for plan in plans:
            if plan.source.parent != plan.target.parent:
                _remove_if_empty(plan.source.parent)
    files = {relative(p.source, root): relative(p.target, root) for p in plans}
    try:
        result.usage_moved = move_usage(root, rename, files, write=not dry_run)
    except UsageError as exc:
        result.usage_problem = str(exc)


def _remove_if_empty(directory: Path) -> None:
    """A recordings directory that `mv` emptied goes (never one holding anything)."""
    with contextlib.suppress(OSError):
        directory.rmdir()


def move_usage(
    root: Path, rename: Rename, files: Mapping[str, str], *, write: bool = True
) -> int | None:
    """The usage log (`.hashreplay/usage.json`) with OLD's test ids renamed and the moved
    files' paths changed, so `prune` sees the moved recordings as used by the test that used
    them; None when there is no log. Returns how many test ids move."""
    if not usage_path(root).exists():
        return None
    run = read_usage(root)  # an unreadable log is a UsageError: left as it is
    before = run.model_dump(mode="json")
    moved = 0
    tests: dict[str, TestUsage] = {}
    for test_id, test in sorted(run.tests.items(), key=lambda t: rename.apply(t[0]) is not None):
        new_id = rename.apply(test_id)
        moved += new_id is not None
        test.files = sorted(files.get(f, f) for f in test.files)
        there = tests.get(new_id or test_id)
        if there is None:
            tests[new_id or test_id] = test
        else:  # NEW ran too (both existed): it keeps its outcome, and uses both sets of files
            there.files = sorted({*there.files, *test.files})
    run.tests = tests
    run.collected = sorted({rename.apply(t) or t for t in run.collected})
    run.deselected = sorted({rename.apply(t) or t for t in run.deselected})
    run.outside_tests = sorted(files.get(f, f) for f in run.outside_tests)
    if write and run.model_dump(mode="json") != before:
        write_usage(run, root)
    return moved
