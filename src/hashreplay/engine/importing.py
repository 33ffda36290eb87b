"""Taking other tools' recordings over (`hashreplay import vcr|ogx`, docs/design.md §13).

A reader turns each source file into `Entry`s: an HTTP request and the response it got (or a
call-layer call), under the test id it belongs to. Every entry then goes through the engine
exactly as a live exchange would (`Session.prepare` + `Session.record`), so imports are
redacted, normalised, hashed and stored by the same rules as recording. The session writes
into a private staging copy of the project; only when every file is read are the staged
files compared with the project's: a new file is written (atomically), an identical one is
left alone (importing twice changes nothing), a different one is kept unless `overwrite`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from hashreplay.core.config import Config
from hashreplay.core.constants import BLOBS_DIRNAME, RECORDINGS_DIRNAME, STATE_DIRNAME
from hashreplay.core.errors import ConfigError, HashReplayError
from hashreplay.core.format import RecordedResponse
from hashreplay.core.keys import test_context
from hashreplay.core.matching import MatchRule
from hashreplay.core.modes import Mode
from hashreplay.core.paths import SKIP_DIRS, write_bytes_atomic
from hashreplay.core.store import Store
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.session import Session


class UnreadableSource(HashReplayError):
    """A source file (or one entry of it) that cannot be imported; the message says why."""


@dataclass(frozen=True)
class CallEntry:
    """A call-layer call (docs/design.md §2) and what it returned, as a recorded response."""

    name: str
    kwargs: dict[str, Any]
    response: RecordedResponse


@dataclass(frozen=True)
class Entry:
    """One recorded exchange read from a source file."""

    test_id: str | None
    #: where it came from, for the report: `file` or `file#3`
    source: str
    request: IncomingRequest | None = None
    exchange: LiveExchange | None = None
    call: CallEntry | None = None
    #: the `match_on` it was matched by where it came from (docs/design.md §14); None: the
    #: project's rule
    match_on: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Skipped:
    source: str
    reason: str
    #: False for what was left out on purpose (`--host`): it does not fail the import
    fatal: bool = True


@dataclass(frozen=True)
class Read:
    """What a reader made of one source file: entries to import and entries it skipped."""

    entries: list[Entry] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    #: what the user should know about how the file was read (a guessed test id)
    notes: list[str] = field(default_factory=list)


Reader = Callable[[Path], Read]


@dataclass
class ImportReport:
    #: source → the recording file it went into (project path)
    imported: list[tuple[str, Path]] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tests: set[str | None] = field(default_factory=set)
    written: list[Path] = field(default_factory=list)
    unchanged: list[Path] = field(default_factory=list)
    #: existing recordings that differ from the import and were kept (no `overwrite`)
    kept: list[Path] = field(default_factory=list)
    overwritten: list[Path] = field(default_factory=list)
    blobs_written: int = 0

    @property
    def ok(self) -> bool:
        return not any(s.fatal for s in self.skipped) and not self.kept


def source_files(paths: Iterable[Path], suffixes: Sequence[str]) -> list[Path]:
    """Files named on the command line, and files with one of `suffixes` under directories,
    leaving out hashreplay's own recordings directories, hidden files and `SKIP_DIRS`."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.is_file()
                and p.name.lower().endswith(tuple(suffixes))
                and not _left_out(p.relative_to(path))
            )
        elif path.exists():
            found.append(path)
        else:
            msg = f"no such file or directory: {path}"
            raise UnreadableSource(msg)
    return sorted(dict.fromkeys(found))


def _left_out(relative: Path) -> bool:
    return any(
        part.startswith(".") or part in SKIP_DIRS or part == RECORDINGS_DIRNAME
        for part in relative.parts
    )


def run_import(
    config: Config,
    files: Sequence[Path],
    reader: Reader,
    *,
    dry_run: bool = False,
    overwrite: bool = False,
) -> ImportReport:
    """Read every file, record its entries through the engine into a staging copy of the
    project, then bring the staged files over (nothing with `dry_run`)."""
    report = ImportReport()
    staging = Path(tempfile.mkdtemp(prefix="hashreplay-import-"))
    try:
        staged_config = config.model_copy(update={"root": staging / "root", "mode": Mode.RECORD})
        session = Session(staged_config)
        # an imported answer carries its source's day or none, never the import's: a day
        # made up here would make old answers look fresh (docs/recordings.md, "Age")
        session.recorder.today = _no_day
        kept = KeptRules(Store.from_config(config))
        for file in files:
            read = _read(reader, file)
            report.skipped.extend(read.skipped)
            report.notes.extend(read.notes)
            for entry in read.entries:
                try:
                    path = _record(session, entry, kept)
                except HashReplayError as exc:
                    report.skipped.append(Skipped(entry.source, str(exc)))
                    continue
                report.imported.append((entry.source, path))
                report.tests.add(entry.test_id)
        session.close()
        moves = _moves(staged_config, config)
        report.imported = [(s, _project_path(p, moves)) for s, p in report.imported]
        _bring_over(moves, report, dry_run=dry_run, overwrite=overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report


def _no_day() -> None:
    return None


def _read(reader: Reader, file: Path) -> Read:
    try:
        return reader(file)
    except UnreadableSource as exc:
        return Read(skipped=[Skipped(str(file), str(exc))])
    except OSError as exc:
        return Read(skipped=[Skipped(str(file), f"cannot read the file: {exc.strerror or exc}")])


class KeptRules:
    """The narrower rules the project's recordings of each test already carry as `match`,
    read once per directory. A re-import keys a cassette under the rule its earlier import
    left (as `hashreplay rehash` keeps a file's own rule, docs/design.md §14), so importing
    again after a rehash, or after the project's `ignore` changed, finds the same files."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._dirs: dict[Path, dict[str | None, list[MatchRule]]] = {}

    def of(self, test_id: str | None, shown_test_id: str | None) -> list[MatchRule]:
        directory = self.store.dir_for(test_id)
        found = self._dirs.get(directory)
        if found is None:
            found = self._dirs[directory] = _rules_by_test(directory)
        return found.get(shown_test_id, [])


def _rules_by_test(directory: Path) -> dict[str | None, list[MatchRule]]:
    rules: dict[str | None, list[MatchRule]] = {}
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            data = orjson.loads(path.read_bytes())
            rule = MatchRule.from_json(data["match"])
        except (OSError, orjson.JSONDecodeError, ConfigError, KeyError, TypeError):
            continue  # no `match`, or one `hashreplay verify` names
        test_rules = rules.setdefault(data.get("test_id"), [])
        if rule not in test_rules:
            test_rules.append(rule)
    return rules


def _record(session: Session, entry: Entry, kept: KeptRules) -> Path:
    if entry.call is not None:
        with test_context(entry.test_id):
            prep = session.prepare_call(entry.call.name, [], entry.call.kwargs)
        response = entry.call.response
        redacted = response.replace(body=session.redactor.value(response.body))
        path = session.record(prep, redacted)
        assert path is not None  # a call's outcome, exception or not, is its answer
        return path
    if entry.request is None or entry.exchange is None:  # pragma: no cover - readers' duty
        msg = f"{entry.source}: an entry with neither a request nor a call"
        raise UnreadableSource(msg)
    prep = session.prepare(entry.request, test_id=entry.test_id)
    if entry.match_on is not None:  # keyed as its source matched it, so it replays as it did
        narrowed = MatchRule(session.config.ignore, entry.match_on)
        earlier = [
            r for r in kept.of(entry.test_id, prep.shown_test_id) if r.match_on == narrowed.match_on
        ]
        if len(earlier) == 1:
            narrowed = earlier[0]
        rule = None if narrowed.is_default else narrowed
        key = session.keyer.key_of(prep.request, prep.shown_test_id, rule)[0]
        prep = prep._replace(hash=key, rule=rule)
    path = session.record(prep, entry.exchange)
    if path is None:
        exc = entry.exchange.exception
        what = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
        msg = (
            f"it holds a call that got no HTTP response{what}, and hashreplay records only "
            "answers; re-record that test with the upstream reachable, or "
            'set record_failures = "all" in [tool.hashreplay] to import it as it is'
        )
        raise UnreadableSource(msg)
    return path


def _same_but_days(existing: bytes, content: bytes) -> bool:
    """Whether two recordings differ only in their responses' `recorded_on`: a re-import of
    unchanged answers keeps the file as it is, day included (the zero diff)."""
    try:
        old, new = orjson.loads(existing), orjson.loads(content)
    except orjson.JSONDecodeError:
        return False
    return bool(_undated(old) == _undated(new))


def _undated(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    responses = [data.get("response"), *(data.get("later_responses") or [])]
    for response in responses:
        if isinstance(response, dict):
            response.pop("recorded_on", None)
    return data


@dataclass(frozen=True)
class _Move:
    staged: Path
    target: Path


def _moves(staged: Config, real: Config) -> list[_Move]:
    """Each staged file and where it belongs in the project; blobs first, so no recording
    is ever written before the blobs it refers to."""
    places = [(staged.common_dir, real.common_dir), (staged.root, real.root)]
    moves: dict[Path, _Move] = {}
    for staged_top, real_top in places:
        if not staged_top.is_dir():
            continue
        for path in sorted(staged_top.rglob("*")):
            if STATE_DIRNAME in path.relative_to(staged_top).parts:
                continue  # the staging store's own files (temp files, .gitignore)
            if path.is_file() and path not in moves:
                moves[path] = _Move(path, real_top / path.relative_to(staged_top))
    return sorted(moves.values(), key=lambda m: (m.staged.parent.name != BLOBS_DIRNAME, m.target))


def _project_path(path: Path, moves: Sequence[_Move]) -> Path:
    for move in moves:
        if move.staged == path:
            return move.target
    return path


def _bring_over(
    moves: Sequence[_Move], report: ImportReport, *, dry_run: bool, overwrite: bool
) -> None:
    for move in moves:
        content = move.staged.read_bytes()
        try:
            existing: bytes | None = move.target.read_bytes()
        except FileNotFoundError:
            existing = None
        is_blob = move.staged.parent.name == BLOBS_DIRNAME
        if existing == content or (
            existing is not None
            and not overwrite
            and not is_blob
            and _same_but_days(existing, content)
        ):
            if not is_blob:
                report.unchanged.append(move.target)
            continue
        if existing is not None and not overwrite:
            report.kept.append(move.target)
            continue
        if not dry_run:
            write_bytes_atomic(move.target, content)
        if is_blob:
            report.blobs_written += 1
        elif existing is None:
            report.written.append(move.target)
        else:
            report.overwritten.append(move.target)


# --- reading a YAML document safely (cassettes) -------------------------------------------


def check_expansion(data: Any, size: int, max_bytes: int) -> None:
    """Refuse a cassette whose YAML aliases (`&a`, `*a`) make it, expanded, more than
    `max_bytes` larger than the file (a "billion laughs" document), or make it contain
    itself. The YAML loader shares one object per anchor, so the expanded size is counted
    over the shared objects, once each, without ever building the expansion."""
    limit = size + max_bytes
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        value, done = stack.pop()
        key = id(value)
        children = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
        if done:
            on_path.discard(key)
            total = 1 + sum(_leaf_size(c) if _is_leaf(c) else sizes[id(c)] for c in children)
            if total > limit:
                msg = (
                    f"its YAML aliases expand it to more than max_body_bytes ({max_bytes}) "
                    f'beyond the file\'s own {size} bytes (a "billion laughs" cassette?); '
                    "not imported: raise max_body_bytes in [tool.hashreplay] if it is genuine"
                )
                raise UnreadableSource(msg)
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise UnreadableSource("a YAML alias makes the cassette contain itself; not imported")
        on_path.add(key)
        stack.append((value, True))
        stack.extend((c, False) for c in children if not _is_leaf(c) and id(c) not in sizes)


def _is_leaf(value: Any) -> bool:
    return not isinstance(value, (dict, list, tuple))


def _leaf_size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes)) else 8


def yaml_loader() -> Callable[[bytes], Any]:
    try:
        import yaml
    except ImportError:
        msg = (
            "reading YAML cassettes needs PyYAML: pip install 'hashreplay[import]' "
            "(JSON cassettes need nothing more)"
        )
        raise UnreadableSource(msg) from None

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[valid-type,misc]
        """Safe, plus the harmless Python tags old cassettes carry (str, tuple)."""

    def scalar(loader: Any, node: Any) -> Any:
        return loader.construct_scalar(node)

    def sequence(loader: Any, node: Any) -> Any:
        return tuple(loader.construct_sequence(node))

    Loader.add_constructor("tag:yaml.org,2002:python/str", scalar)
    Loader.add_constructor("tag:yaml.org,2002:python/unicode", scalar)
    Loader.add_constructor("tag:yaml.org,2002:python/tuple", sequence)

    def loads(content: bytes) -> Any:
        return yaml.load(content, Loader=Loader)

    return loads
