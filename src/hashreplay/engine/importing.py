"""Taking other tools' recordings over (`hashreplay import vcr|ogx`, docs/design.md §13): the
import run every source shares, and the OGX reader (cassettes: `engine/import_vcr.py`)."""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from hashreplay.core.atomic import write_bytes_atomic
from hashreplay.core.bodies import MAX_NESTING, deep_field, too_deep_problem
from hashreplay.core.config import Config
from hashreplay.core.constants import BLOBS_DIRNAME, RECORDINGS_DIRNAME, STATE_DIRNAME
from hashreplay.core.context import test_context
from hashreplay.core.errors import ConfigError, HashReplayError
from hashreplay.core.format import RecordedResponse
from hashreplay.core.matching import MatchRule, RuleSource
from hashreplay.core.model_lists import MODEL_LIST_SUFFIXES
from hashreplay.core.modes import Mode
from hashreplay.core.paths import SKIP_DIRS
from hashreplay.core.store import Store
from hashreplay.core.typed import refused_exception
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
    """One exchange read from a source file (a request and its response, or a call-layer call)."""

    test_id: str | None
    #: where it came from, for the report: `file` or `file#3`
    source: str
    request: IncomingRequest | None = None
    exchange: LiveExchange | None = None
    call: CallEntry | None = None
    #: the `match_on` its source matched it by (docs/design.md §14); None: the project's rule
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
        if not path.exists():
            raise UnreadableSource(f"no such file or directory: {path}")
        if not path.is_dir():
            found.append(path)
            continue
        for p in sorted(path.rglob("*")):
            parts = p.relative_to(path).parts
            left_out = any(s[:1] == "." or s in SKIP_DIRS or s == RECORDINGS_DIRNAME for s in parts)
            if p.is_file() and p.name.lower().endswith(tuple(suffixes)) and not left_out:
                found.append(p)
    return sorted(dict.fromkeys(found))


def run_import(
    config: Config,
    files: Sequence[Path],
    reader: Reader,
    *,
    dry_run: bool = False,
    overwrite: bool = False,
) -> ImportReport:
    """Record every file's entries through the engine (`Session.prepare` + `Session.record`: as
    recordings are redacted, normalised, hashed and stored) into a staging copy of the project,
    then bring the staged files over (not with `dry_run`): a new one is written, an identical
    one left alone (importing twice changes nothing), a different one kept unless `overwrite`."""
    report = ImportReport()
    staging = Path(tempfile.mkdtemp(prefix="hashreplay-import-"))
    try:
        staged_config = config.model_copy(update={"root": staging / "root", "mode": Mode.RECORD})
        session = Session(staged_config)
        # an imported answer carries its source's day or none, never the import's: a day
        # made up here would make old answers look fresh (docs/recordings.md, "Age")
        session.recorder.today = lambda: None
        kept = _kept_rules(Store.from_config(config))
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
                except (KeyError, TypeError, ValueError) as exc:  # a field no rule foresaw
                    reason = f"unreadable: {type(exc).__name__}: {exc}"
                    report.skipped.append(Skipped(entry.source, reason))
                    continue
                report.imported.append((entry.source, path))
                report.tests.add(entry.test_id)
        session.close()
        moves = _moves(staged_config, config)
        targets = dict(moves)
        report.imported = [(s, targets.get(p, p)) for s, p in report.imported]
        _bring_over(moves, report, dry_run=dry_run, overwrite=overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report


def _read(reader: Reader, file: Path) -> Read:
    try:
        return reader(file)
    except UnreadableSource as exc:
        return Read(skipped=[Skipped(str(file), str(exc))])
    except OSError as exc:
        return Read(skipped=[Skipped(str(file), f"cannot read the file: {exc.strerror or exc}")])
    except (KeyError, TypeError, ValueError, RecursionError) as exc:  # one odd source, not all
        reason = f"unreadable ({type(exc).__name__}: {exc}); not imported"
        return Read(skipped=[Skipped(str(file), reason)])


def _kept_rules(store: Store) -> Callable[[str | None, str | None], list[MatchRule]]:
    """(test id, shown test id) → the narrower rules that test's recordings carry as `match`,
    read once per directory: a re-import keys a cassette under the rule its earlier import left
    (as `hashreplay rehash` keeps a file's own rule, docs/design.md §14), so importing again
    after a rehash, or after the project's `ignore` changed, finds the same files."""
    by_dir = functools.cache(_rules_by_test)
    return lambda test_id, shown: by_dir(store.dir_for(test_id)).get(shown, [])


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


def _record(
    session: Session, entry: Entry, kept: Callable[[str | None, str | None], list[MatchRule]]
) -> Path:
    if entry.call is not None:
        with test_context(entry.test_id):
            prep = session.prepare_call(entry.call.name, [], entry.call.kwargs)
        response = entry.call.response
        path = session.record(prep, response.replace(body=session.redactor.value(response.body)))
        assert path is not None  # a call's outcome, exception or not, is its answer
        return path
    assert entry.request is not None and entry.exchange is not None  # the readers' duty
    prep = session.prepare(entry.request, test_id=entry.test_id)
    if entry.match_on is not None:  # keyed as its source matched it, so it replays as it did
        narrowed = MatchRule(session.config.ignore, entry.match_on, RuleSource.IMPORT)
        earlier = kept(entry.test_id, prep.shown_test_id)
        earlier = [r for r in earlier if r.match_on == narrowed.match_on]
        if len(earlier) == 1:
            narrowed = earlier[0].with_source(RuleSource.IMPORT)
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
    for data in (old, new):
        if isinstance(data, dict):
            for response in [data.get("response"), *(data.get("later_responses") or [])]:
                if isinstance(response, dict):
                    response.pop("recorded_on", None)
    return bool(old == new)


def _moves(staged: Config, real: Config) -> list[tuple[Path, Path]]:
    """Each staged file and where it belongs in the project; blobs first, so no recording
    is ever written before the blobs it refers to."""
    moves: dict[Path, Path] = {}
    for staged_top, real_top in [(staged.common_dir, real.common_dir), (staged.root, real.root)]:
        for path in sorted(staged_top.rglob("*")) if staged_top.is_dir() else []:
            if STATE_DIRNAME in path.relative_to(staged_top).parts:
                continue  # the staging store's own files (temp files, .gitignore)
            if path.is_file() and path not in moves:
                moves[path] = real_top / path.relative_to(staged_top)
    return sorted(moves.items(), key=lambda m: (m[0].parent.name != BLOBS_DIRNAME, m[1]))


def _bring_over(
    moves: Sequence[tuple[Path, Path]], report: ImportReport, *, dry_run: bool, overwrite: bool
) -> None:
    for staged, target in moves:
        content = staged.read_bytes()
        existing = target.read_bytes() if target.exists() else None
        is_blob = staged.parent.name == BLOBS_DIRNAME
        unchanged = existing == content
        if existing is not None and not (unchanged or overwrite or is_blob):
            unchanged = _same_but_days(existing, content)
        if unchanged:
            if not is_blob:
                report.unchanged.append(target)
            continue
        if existing is not None and not overwrite:
            report.kept.append(target)
            continue
        if not dry_run:
            write_bytes_atomic(target, content)
        if is_blob:
            report.blobs_written += 1
        elif existing is None:
            report.written.append(target)
        else:
            report.overwritten.append(target)


def load_json(content: bytes, *, locate: bool = False) -> Any:
    """`content` as JSON; an UnreadableSource when it is not, or nests deeper than orjson reads
    (1,024 levels), then naming where when `locate`."""
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        if "depth" not in exc.msg:
            raise UnreadableSource(f"not JSON: {exc}") from None
        where = f"line {exc.lineno} column {exc.colno}: " if locate else ""
        raise UnreadableSource(f"{where}{too_deep_problem()}; not imported") from None


def check_depth(value: Any, where: str, limit: int) -> None:
    """Refuse `value` when it nests deeper than `limit`, naming the field path from `where`."""
    deep = deep_field(value, where, limit)
    if deep is not None:
        raise UnreadableSource(f"{deep}: {too_deep_problem()}; not imported")


# --- OGX (formerly Llama Stack) api_recorder files -----------------------------------------

JSON_TYPE = "application/json"
#: call-layer name of an imported OGX tool call: `ogx.tools:<provider>.<tool_name>`
TOOL_CALL_PREFIX = "ogx.tools:"


def read_ogx(path: Path) -> Read:
    """The one entry of an OGX file: a request (inference: `method`, `url`, `body`; raw httpx:
    `url`, `method`, `payload`; tool: `tool_name`) and its response, SDK objects stored typed
    (`{"__type__", "__data__"}`), as the SDK saw it on the wire: a typed object its JSON body,
    chunks an SSE stream ending in `[DONE]` (OpenAI) or NDJSON lines (Ollama), a model list the
    provider's list response (to a `GET`, as the SDK sends), a provider error the HTTP error
    response it came from. Tool calls become call-layer recordings (docs/design.md §2)."""
    data = load_json(path.read_bytes(), locate=True)
    if not isinstance(data, dict):
        msg = f"unknown shape: expected a JSON object, found {type(data).__name__}"
        raise UnreadableSource(msg)
    request, response = data.get("request"), data.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict):
        msg = "unknown shape: no `request` and `response` objects (not an OGX recording?)"
        raise UnreadableSource(msg)
    # refused before any walk recurses into them; OGX's typed wrappers add a level to each
    # object, so twice the limit here: the wire body is held to the limit when it is staged
    check_depth(request, "request", 2 * MAX_NESTING)
    check_depth(response, "response", 2 * MAX_NESTING)
    test_id = data.get("test_id", request.get("test_id"))
    if test_id is not None and not isinstance(test_id, str):
        raise UnreadableSource(f"unknown shape: test_id is {type(test_id).__name__}, not a string")
    try:
        return Read(entries=[_ogx_entry(request, response, test_id, str(path))])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UnreadableSource(f"unknown shape: {type(exc).__name__}: {exc}") from None


def _ogx_entry(
    request: dict[str, Any], response: dict[str, Any], test_id: str | None, source: str
) -> Entry:
    if "tool_name" in request:
        name = f"{TOOL_CALL_PREFIX}{request['provider']}.{request['tool_name']}"
        kwargs = dict(request.get("kwargs") or {})
        call = CallEntry(name, kwargs, RecordedResponse(status=None, body=response.get("body")))
        return Entry(test_id, source, call=call)
    url = sent_url(str(request["url"]))
    method = str(request["method"]).upper()
    body = request["payload"] if "payload" in request else request.get("body")
    path = urlsplit(url).path
    model_list = path.endswith(MODEL_LIST_SUFFIXES)
    if model_list:
        method, body = "GET", None  # OGX wrote POST with `{}`; the SDKs send a plain GET
    headers = [("content-type", JSON_TYPE)] if body is not None else []
    content = b"" if body is None else orjson.dumps(body)
    incoming = IncomingRequest(method, url, headers, content)
    return Entry(test_id, source, incoming, _exchange(response, path, model_list=model_list))


def sent_url(url: str) -> str:
    """The URL the SDK really sent: OGX stores its client's base URL (ending `/v1`) joined with
    the endpoint it calls (`/v1/chat/completions`), so `…/v1/v1/chat/completions`; the SDK sent
    `…/v1/chat/completions`, the path that must be recorded to be found (docs/design.md §13)."""
    parts = urlsplit(url)
    if "/v1/v1/" not in parts.path:
        return url
    return urlunsplit(parts._replace(path=parts.path.replace("/v1/v1/", "/v1/", 1)))


def untyped(value: Any) -> Any:
    """A stored value with each `{"__type__", "__data__"}` wrapper replaced by its wire JSON."""
    if isinstance(value, dict):
        if "__type__" in value and "__data__" in value:
            return untyped(value["__data__"])
        return {k: untyped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [untyped(v) for v in value]
    return value


def _is_ollama(path: str, body: Any) -> bool:
    first = body[0] if isinstance(body, list) and body else body
    kind = str(first.get("__type__", "")) if isinstance(first, dict) else ""
    return path.startswith("/api/") or kind.startswith("ollama.")


def _json(status: int, value: Any) -> LiveExchange:
    return LiveExchange(status, [("content-type", JSON_TYPE)], [orjson.dumps(value)])


def _exchange(response: dict[str, Any], path: str, *, model_list: bool) -> LiveExchange:
    if response.get("is_exception"):
        return _error(response)
    body = response.get("body")
    status = int(response.get("status") or 200)
    if model_list:
        items = untyped(body)
        if isinstance(items, list):
            ollama = _is_ollama(path, body)
            items = {"models": items} if ollama else {"object": "list", "data": items}
        return _json(status, items)
    if response.get("is_streaming"):
        if not isinstance(body, list):
            msg = f"a streamed response whose body is {type(body).__name__}, not a list of chunks"
            raise ValueError(msg)
        return _stream(status, body, path)
    wire = untyped(body)
    if isinstance(wire, str):
        return LiveExchange(status, [("content-type", "text/plain")], [wire.encode()])
    return _json(status, wire)


def _stream(status: int, chunks: list[Any], path: str) -> LiveExchange:
    events = [untyped(c) for c in chunks]
    if _is_ollama(path, chunks):
        lines = [orjson.dumps(e) + b"\n" for e in events]
        return LiveExchange(status, [("content-type", "application/x-ndjson")], lines, True)
    frames: list[bytes] = []
    named = path.endswith("/messages")  # Anthropic: `event: <type>` lines, no [DONE]
    for event in events:
        head = f"event: {event['type']}\n".encode() if named and isinstance(event, dict) else b""
        frames.append(head + b"data: " + orjson.dumps(event) + b"\n\n")
    if not named:
        frames.append(b"data: [DONE]\n\n")
    return LiveExchange(status, [("content-type", "text/event-stream")], frames, True)


def _error(response: dict[str, Any]) -> LiveExchange:
    """A recorded provider error as its HTTP error response; without a status, a failed exchange."""
    info = response.get("exception_data") or {}
    message = str(info.get("message") or response.get("exception_message") or "")
    if isinstance(status := info.get("status_code"), int):
        body = info.get("body")
        return _json(status, {"error": message if body is None else body})
    name = str(info.get("type") or "Exception")
    provider = str(info.get("provider") or "ogx")
    for dotted in (f"{provider}.{name}", f"builtins.{name}"):
        refused = refused_exception(dotted)
        if refused is not None:  # replay would refuse it: never write it (docs/design.md §2)
            msg = f"exception_data.type {name!r} (provider {provider!r}): {refused}; not imported"
            raise UnreadableSource(msg)
    error_class = type(name, (Exception,), {"__module__": provider})
    return LiveExchange(None, [], [], exception=error_class(message))
