"""Batch work on recording files: find them, read them, verify them, re-normalise responses.

Every operation reads a file fully before deciding, reports a file it cannot read instead of
touching it, and writes only through `write_bytes_atomic`. The hashing and normalising rules
come from the engine (`Session`), so a file is judged exactly as a test run would name it.
Re-keying lives in `engine/rehash.py`, pruning in `engine/prune.py`.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

from hashreplay.core.atomic import write_bytes_atomic
from hashreplay.core.config import Config
from hashreplay.core.constants import (
    KEY_VERSION,
    RECORD_COMMAND,
    RECORDINGS_DIRNAME,
)
from hashreplay.core.diff import first_difference
from hashreplay.core.errors import PathNotFound, RecordingError
from hashreplay.core.format import (
    EndState,
    RecordedRequest,
    RecordedResponse,
    Recording,
    is_no_response,
)
from hashreplay.core.matching import DEFAULT_RULE, MatchRule, file_rule
from hashreplay.core.model_lists import model_ids
from hashreplay.core.modes import RecordFailures
from hashreplay.core.names import (
    hash_of_name,
    is_model_list_name,
    model_list_filename,
    recording_name,
)
from hashreplay.core.normalise import IdRegistry, new_id_registry, normalise_request_body
from hashreplay.core.normalise_response import is_model_object, normalise_response
from hashreplay.core.paths import SKIP_DIRS, outside_root
from hashreplay.core.store import Store, dumps, parse_recording
from hashreplay.core.urls import stored_url
from hashreplay.engine.miss import record_target
from hashreplay.engine.session import Session


def find_recordings(paths: Iterable[Path], common_dir: Path | None = None) -> list[Path]:
    """Every recording file under `paths`, sorted and without duplicates.

    A file is taken as it is; a directory named `recordings` (or the common directory) gives
    its `*.json`; any other directory is searched for `recordings` directories, skipping
    virtual environments, VCS and cache directories (`SKIP_DIRS`).
    """
    common = common_dir.resolve() if common_dir is not None else None
    found: dict[Path, Path] = {}
    for path in paths:
        if _took_file(path, found):
            continue
        for directory in _recording_dirs(path, common):
            for file in _json_files(directory):
                found.setdefault(file.resolve(), file)
    return [found[key] for key in sorted(found)]


def _took_file(path: Path, found: dict[Path, Path]) -> bool:
    """A path named on the command line that is a file is taken as it is (True); one that
    does not exist is a `PathNotFound`; a directory is the caller's to search (False)."""
    if path.is_file():
        found.setdefault(path.resolve(), path)
        return True
    if not path.is_dir():
        msg = f"no such file or directory: {path}"
        raise PathNotFound(msg)
    return False


def find_given(
    paths: Iterable[Path], common_dir: Path | None = None
) -> tuple[list[Path], list[Path]]:
    """The recordings under paths named on the command line, and the paths holding none.

    A file is taken as it is. A directory gives the recordings inside it whatever it is
    called: every `*.json` of a `recordings` (or the common) directory below it, and every
    file named like a recording (`<hash>.json`, `models-<hash>-<digest>.json`) anywhere
    below it, skipping `SKIP_DIRS`.
    """
    common = common_dir.resolve() if common_dir is not None else None
    found: dict[Path, Path] = {}
    empty: list[Path] = []
    for path in paths:
        before = len(found)
        if _took_file(path, found):
            continue
        for file in _files_below(path, common):
            found.setdefault(file.resolve(), file)
        if len(found) == before and not any(f.is_relative_to(path.resolve()) for f in found):
            empty.append(path)
    return [found[key] for key in sorted(found)], empty


def _files_below(top: Path, common: Path | None) -> Iterator[Path]:
    for current, dirs, _files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        here = Path(current)
        whole = _is_recordings_dir(here, common)
        for file in _json_files(here):
            if whole or hash_of_name(file.name) is not None:
                yield file


def _is_recordings_dir(directory: Path, common: Path | None) -> bool:
    return directory.name == RECORDINGS_DIRNAME or (
        common is not None and directory.resolve() == common
    )


def _recording_dirs(top: Path, common: Path | None) -> Iterator[Path]:
    if _is_recordings_dir(top, common):
        yield top
        return
    for current, dirs, _files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        here = Path(current)
        for name in list(dirs):
            if _is_recordings_dir(here / name, common):
                dirs.remove(name)  # a recordings directory holds files, not more of them
                yield here / name


def _json_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.json") if not p.name.startswith(".") and p.is_file())


def default_paths(config: Config) -> list[Path]:
    """The whole project, plus the common directory when it lies outside it."""
    paths = [config.root]
    if config.common_dir.is_dir():
        paths.append(config.common_dir)
    return paths


@dataclass(frozen=True)
class Loaded:
    """A readable recording file: its bytes, its JSON and its validated model."""

    path: Path
    content: bytes
    raw: dict[str, Any]
    recording: Recording

    @property
    def is_model_list_file(self) -> bool:
        return is_model_list_name(self.path.name)


def outside_problem(path: Path, root: Path) -> str | None:
    """Why a found file is not read, or None: it resolves outside the project root (it is a
    symlink, or a directory on its way is), where replay never reads either."""
    try:
        target = path.resolve()
    except (OSError, RuntimeError) as exc:
        return f"cannot be resolved ({exc}); replace the links on its way with real files"
    if outside_root(target, root.resolve()):
        return (
            f"refused: it resolves to {target}, outside the project root {root.resolve()}, "
            "where replay never reads; move the recordings into the project"
        )
    return None


def load(path: Path, store: Store | None = None) -> Loaded:
    """Read and validate one file; every problem is a `RecordingError` naming the file.
    Blob references are resolved (and checked) through `store`; `raw` keeps them as stored."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise RecordingError(path, f"cannot read the file: {exc.strerror or exc}") from None
    recording = parse_recording(content, path) if store is None else store.parse(content, path)
    raw = orjson.loads(content)
    return Loaded(path, content, raw, recording)


#: How much of an unreadable file is searched for its test id: files are written with
#: sorted keys, so `test_id` is on the last lines.
_TAIL_BYTES = 1 << 16


_TEST_ID = re.compile(rb'"test_id"\s*:\s*("(?:[^"\\]|\\.)*")')


def recorded_test_id(path: Path) -> str | None:
    """The test id a recording file names, read even from a file that does not parse (a
    wrong version, a broken field; a file cut off before its end usually lost it): what to
    re-record it with. None when it names none or cannot be read."""
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - _TAIL_BYTES))
            tail = f.read(_TAIL_BYTES)
    except OSError:
        return None
    found = _TEST_ID.findall(tail)
    if not found:
        return None
    try:
        value = orjson.loads(found[-1])
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) and value else None


class Rules:
    """How the engine redacts, normalises and names requests under one configuration."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.engine = Session(config)
        self.store = self.engine.store
        self.redactor = self.engine.redactor
        self.request_rules = self.engine.keyer.rules

    def is_shared(self, recording: Recording) -> bool:
        return self.engine.keyer.key_of(recording.request, recording.test_id)[1]

    def request_hash(self, recording: Recording, body: Any) -> str:
        """The hash the engine names this recording's request by, with `body` as its body,
        under the file's matching rule (docs/design.md §14)."""
        request = recording.request.replace(body=body)
        return self.engine.keyer.key_of(request, recording.test_id, self.rule_of(recording))[0]

    def rule_of(self, recording: Recording) -> MatchRule | None:
        """The matching rule a file is named by: the one it keeps as its own (`match` from
        a marker or an import, or written before files said where a rule came from), else
        the project's current rule (None: the default), also for a file made under an
        earlier project rule (docs/design.md §14)."""
        rule = file_rule(recording.match)
        if rule is not None and not rule.follows_project:
            return None if rule.is_default else rule
        return self.engine.keyer.rule

    def earlier_project_rule(self, recording: Recording) -> str | None:
        """The problem of a file keyed by a project rule the project no longer has: no test
        finds it by that rule, and `hashreplay rehash` re-keys it to the current one."""
        rule = file_rule(recording.match)
        project = self.engine.keyer.rule or DEFAULT_RULE
        if rule is None or not rule.follows_project or rule == project:
            return None
        if self.is_shared(recording):  # a model list is never narrowed: rehash drops it
            return None
        return (
            f"keyed by an earlier project rule ({rule.describe()}); [tool.hashreplay] now "
            f"says {project.describe()}, so replay no longer finds it by that rule: run "
            "`hashreplay rehash` to re-key it to the current rule"
        )

    def rule_note(self, recording: Recording) -> str | None:
        """What `hashreplay verify` says of a file that keeps its own matching rule where it
        differs from the project's: rehash leaves it so, and replay finds it by it."""
        rule, project = file_rule(recording.match), self.engine.keyer.rule
        if rule is None or rule.follows_project or rule == (project or DEFAULT_RULE):
            return None
        current = "the default" if project is None else project.describe()
        return (
            f"keeps its own matching rule ({rule.describe()}), {rule.described_source()}, "
            f"not the project's ({current}): replay finds it by that rule and `hashreplay "
            "rehash` leaves it so; to key it by the project's rule, re-record the test"
        )

    def file_name(self, recording: Recording, body: Any) -> str:
        """The name the engine gives a file holding this request (with this stored body)."""
        hash_hex = self.request_hash(recording, body)
        if self.is_shared(recording):
            return model_list_filename(hash_hex, model_ids(recording.response.body))
        return recording_name(hash_hex)

    def renormalised_body(self, recording: Recording) -> Any:
        return normalise_request_body(recording.request.body, self.request_rules)


def verify(loaded: Loaded, rules: Rules) -> list[str]:
    """What is wrong with a readable file (empty when nothing is)."""
    recording = loaded.recording
    problems: list[str] = []
    outdated = recording.key_version != KEY_VERSION
    if outdated:
        problems.append(
            f"key_version {recording.key_version}, the current hashing rules are key_version "
            f"{KEY_VERSION}: run `hashreplay rehash` to re-key it"
        )
    if stored_url(recording.request.url) != recording.request.url:
        problems.append(
            f"request.url {recording.request.url} keeps the port of a loopback upstream, so a "
            "re-record on another port rewrites the file: run `hashreplay rehash`"
        )
    redacted = rules.redactor.value(loaded.raw)
    if redacted != loaded.raw:
        difference = first_difference(loaded.raw, redacted)
        where = difference.path if difference is not None else "(somewhere)"
        problems.append(
            f"holds a secret at {where}: replace the value with '[secret removed]' or "
            "re-record the test, and revoke the secret if it is real"
        )
    name = loaded.path.name
    expected = rules.file_name(recording, recording.request.body)
    earlier = rules.earlier_project_rule(recording)
    if earlier is not None:
        problems.append(earlier)
    elif name != expected:
        problems.append(_name_problem(name, expected, recording, outdated))
    elif not outdated:
        current = rules.file_name(recording, rules.renormalised_body(recording))
        if current != name:
            problems.append(
                "the current rules (ignore_body_keys, volatile_patterns) hash its request to "
                f"{current}, so no test finds it: run `hashreplay rehash`"
            )
    if not rules.is_shared(recording):
        places = rules.store.search_dirs(recording.test_id)
        if loaded.path.parent.resolve() not in places:
            where = " or ".join(str(p) for p in places)
            problems.append(
                f"unreachable: test {recording.test_id!r} looks for it in {where}; "
                "move it there or re-record the test"
            )
    problems.extend(incomplete_problems(recording))
    if rules.config.record_failures is RecordFailures.RESPONSES:
        problems.extend(no_response_problems(recording))
    return problems


def no_response_problems(recording: Recording) -> list[str]:
    """Stored calls that got no HTTP response (an older version recorded them): replay hands
    back the transport error, which no later run corrects, so `record-if-missing` records
    them again (docs/design.md, "Only answers are recorded")."""
    problems = []
    for index, response in enumerate(recording.responses):
        if is_no_response(recording.request, response):
            where = "response" if index == 0 else f"later_responses[{index - 1}]"
            exc = response.exception
            error = f" ({exc.type}: {exc.message})" if exc is not None else ""
            command = RECORD_COMMAND.format(nodeid=recording.test_id or "<the test>")
            problems.append(
                f"{where} is a call that got no HTTP response{error}, not an answer: replay "
                f"repeats that error; re-record it with the upstream reachable ({command} "
                "replaces it)"
            )
    return problems


def incomplete_problems(recording: Recording) -> list[str]:
    """Responses the client abandoned while recording: replay never passes them off as
    complete, and `record-if-missing` re-records them."""
    problems = []
    for index, response in enumerate(recording.responses):
        if response.end_state is EndState.ABANDONED:
            where = "response" if index == 0 else f"later_responses[{index - 1}]"
            after = response.ended.after_chunks if response.ended is not None else 0
            test = record_target(recording.test_id) if recording.test_id else "<the test>"
            problems.append(
                f"{where} is incomplete: the client stopped reading after {after} chunk(s) "
                f"when it was recorded; re-record it ({RECORD_COMMAND.format(nodeid=test)} "
                "replaces it)"
            )
    return problems


def _name_problem(name: str, expected: str, recording: Recording, outdated: bool) -> str:
    if outdated:
        fix = "run `hashreplay rehash`"
    elif recording.test_id:
        command = RECORD_COMMAND.format(nodeid=recording.test_id)
        fix = f"re-record it ({command}) or run `hashreplay rehash` to rename it"
    else:
        fix = "re-record it or run `hashreplay rehash` to rename it"
    both_model_lists = is_model_list_name(name) and is_model_list_name(expected)
    if both_model_lists and hash_of_name(name) == hash_of_name(expected):
        return (
            f"named {name} but the models it lists give {expected}: the model list was "
            f"edited after it was recorded; {fix}"
        )
    return (
        f"named {name} but its stored request hashes to {expected}: the request was edited "
        f"after it was recorded, or the rules changed; {fix}"
    )


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _resolve(data: Any, where: str) -> Any:
    """The value at a fact path such as `response.body[0].data.id` (None when absent)."""
    for key, index in _PATH_PART.findall(where):
        if key and isinstance(data, dict):
            data = data.get(key)
        elif index and isinstance(data, list) and int(index) < len(data):
            data = data[int(index)]
        else:
            return None
    return data


def _seed_known_ids(ids: IdRegistry, raw: dict[str, Any]) -> None:
    """A field whose stable id the file records but whose value is no longer that id (edited
    by hand, or written before a rule existed) gets that same stable id back."""
    for stable, where in ids.facts.items():
        value = _resolve(raw, where)
        if isinstance(value, str) and value and value != stable:
            ids.stable.setdefault(value, stable)


def renormalised(loaded: Loaded, rules: Rules) -> dict[str, Any] | None:
    """The file's JSON with the response normaliser applied again; None when unchanged.

    Only `response`, `later_responses` and (when a new stable id was minted) the
    `id_normalization_mapping` change; the request is carried over untouched.
    """
    recording = loaded.recording
    request = recording.request
    base = hash_of_name(loaded.path.name) or rules.request_hash(recording, request.body)
    facts, responses = recording.id_normalization_mapping, recording.responses
    if is_model_object(request) and facts:
        facts, responses = {}, [_model_id_restored(r, facts, request) for r in responses]
    ids = new_id_registry(base, facts)
    _seed_known_ids(ids, loaded.raw)
    before = [r.model_dump(mode="json") for r in recording.responses]
    after = [
        normalise_response(
            response,
            ids,
            model_list=loaded.is_model_list_file,
            where="response.body" if index == 0 else f"later_responses[{index - 1}].body",
            request=request,
        ).model_dump(mode="json")
        for index, response in enumerate(responses)
    ]
    if dumps(after) == dumps(before) and ids.facts == recording.id_normalization_mapping:
        return None
    data = dict(loaded.raw)
    data["response"] = after[0]
    if len(after) > 1:
        data["later_responses"] = after[1:]
    data["id_normalization_mapping"] = dict(ids.facts)
    return data


def _model_id_restored(
    response: RecordedResponse, facts: Mapping[str, str], request: RecordedRequest
) -> RecordedResponse:
    """A model object's answer written before model objects kept their ids: the stable id
    that replaced its id given back the model the URL names (the one id such a body holds)."""
    model = unquote(urlsplit(request.url).path.rstrip("/").rsplit("/", 1)[-1])

    def restored(value: Any) -> Any:
        if isinstance(value, str):
            return model if value in facts else value
        if isinstance(value, dict):
            return {key: restored(item) for key, item in value.items()}
        if isinstance(value, list):
            return [restored(item) for item in value]
        return value

    return response.replace(body=restored(response.body))


def write_json(path: Path, data: dict[str, Any], store: Store) -> None:
    """Write a recording's JSON as `store` stores it (large values as blob references)."""
    write_like(path, store.dump_data(data), path)


def write_like(path: Path, content: bytes, like: Path) -> None:
    """Write atomically, keeping the permissions of `like` (the file being replaced or
    renamed): the atomic writer's temporary file is private (0600) by construction."""
    try:
        mode: int | None = stat.S_IMODE(like.stat().st_mode)
    except OSError:
        mode = None
    write_bytes_atomic(path, content)
    if mode is not None:
        path.chmod(mode)
