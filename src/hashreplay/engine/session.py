"""The engine: mode, test context, the record/replay decision, per-test state, stats.

Sans-I/O towards clients: adapters turn their request into an `IncomingRequest`, ask
`prepare` + `replay` for a decision, and hand a finished live exchange to `record`. The
engine reads and writes the store; it never imports an HTTP client.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hashreplay.core.bodies import encode_request_body
from hashreplay.core.config import Config
from hashreplay.core.constants import CALL_METHOD, MODEL_LIST_PREFIX, RUN_HEADER, TEST_ID_HEADER
from hashreplay.core.context import current_test_id
from hashreplay.core.errors import RecordingError, ReplayMiss
from hashreplay.core.key import (
    MODEL_LIST_SUFFIXES,
    endpoint_of,
    is_model_list,
    model_ids,
    model_list_filename,
)
from hashreplay.core.key import request_hash as compute_hash
from hashreplay.core.mode import Mode
from hashreplay.core.normalise import (
    KEPT_REQUEST_HEADERS,
    KEPT_RESPONSE_HEADERS,
    IdRegistry,
    RequestRules,
    filter_headers,
    new_id_registry,
    normalise_request_body,
)
from hashreplay.core.recording import RecordedRequest, RecordedResponse, Recording, new_recording
from hashreplay.core.redact import Redactor
from hashreplay.core.store import Store, dump_recording, parse_recording
from hashreplay.core.typed import jsonable_arg
from hashreplay.core.urls import stored_url
from hashreplay.core.volatile import compile_patterns
from hashreplay.core.writer import BackgroundWriter
from hashreplay.engine.http import (
    IncomingRequest,
    LiveExchange,
    ReplayPlan,
    miss_plan,
    plan_for,
    recorded_response,
)
from hashreplay.engine.miss_report import miss_report
from hashreplay.engine.responses import check_name, merge_model_lists, normalise_response

__all__ = [
    "IncomingRequest",
    "LiveExchange",
    "Prepared",
    "ReplayPlan",
    "Session",
    "Stats",
    "merge_model_lists",
    "normalise_response",
]


@dataclass(frozen=True)
class Prepared:
    """A request after redaction and normalisation, with its hash and where it belongs."""

    test_id: str | None
    mode: Mode
    hash: str
    shared: bool
    request: RecordedRequest


@dataclass
class Stats:
    replayed: int = 0
    recorded: int = 0
    missed: int = 0
    passed_through: int = 0

    def merge(self, other: Stats) -> None:
        self.replayed += other.replayed
        self.recorded += other.recorded
        self.missed += other.missed
        self.passed_through += other.passed_through

    def as_dict(self) -> dict[str, int]:
        return {
            "replayed": self.replayed,
            "recorded": self.recorded,
            "missed": self.missed,
            "passed_through": self.passed_through,
        }


@dataclass
class _Sequence:
    """The responses of one hash within one test run, and their id registry."""

    responses: list[RecordedResponse]
    ids: IdRegistry
    path: Path
    calls: int = 0


@dataclass
class _TestState:
    mode: Mode | None = None
    #: identifies this execution of the test (sent to servers under test, DESIGN.md §8)
    run_id: str | None = None  # made on first use: most tests never call a server
    sequences: dict[str, _Sequence] = field(default_factory=dict)
    #: original → stable ids this test received while recording (never written).
    id_map: dict[str, str] = field(default_factory=dict)
    misses: list[ReplayMiss] = field(default_factory=list)


class Session:
    """One record/replay session (a pytest run, a server process, a proxy)."""

    def __init__(
        self, config: Config, *, store: Store | None = None, write_behind: bool = False
    ) -> None:
        """`write_behind`: write recordings on a background thread (the pytest plugin does),
        so recording costs the caller no disk latency; call `flush()` before reading files."""
        self.config = config
        self.store = store or Store(config.root, config.common_dir)
        self.writer = BackgroundWriter() if write_behind else None
        self.redactor = Redactor(config.redact_keys)
        self.rules = RequestRules(
            ignore_body_keys=config.ignore_body_keys,
            volatile=compile_patterns(config.volatile_patterns),
        )
        self.model_list_suffixes = (*MODEL_LIST_SUFFIXES, *config.model_list_endpoints)
        # hashreplay's own headers are never stored (nor hashed through match_headers)
        self.kept_request_headers = (
            KEPT_REQUEST_HEADERS | frozenset(config.match_headers) | self.redactor.keys
        ) - {TEST_ID_HEADER.lower(), RUN_HEADER.lower()}
        self.kept_response_headers = KEPT_RESPONSE_HEADERS | frozenset(config.keep_response_headers)
        self.stats = Stats()
        #: recording files each test id used (replayed or wrote), for `hashreplay prune`
        self.usage: dict[str | None, set[Path]] = {}
        self._tests: dict[str | None, _TestState] = {}
        self._lock = threading.RLock()

    # --- tests ----------------------------------------------------------------------------

    def begin_test(self, test_id: str | None, mode: Mode | None = None) -> None:
        with self._lock:
            self._tests[test_id] = _TestState(mode=mode)

    def set_test_mode(self, test_id: str | None, mode: Mode) -> None:
        """Run one test in another mode (the `hashreplay` marker), keeping its state."""
        with self._lock:
            self._state(test_id).mode = mode

    def run_id_for(self, test_id: str | None) -> str:
        with self._lock:
            state = self._state(test_id)
            if state.run_id is None:
                state.run_id = uuid.uuid4().hex
            return state.run_id

    def enter_run(self, test_id: str | None, run_id: str | None) -> None:
        """Called by servers for each request: a new run id of a test starts it afresh
        (its identical-request counters and id mappings), as `begin_test` does in-process."""
        if run_id is None:
            return
        with self._lock:
            state = self._tests.get(test_id)
            if state is None or state.run_id != run_id:
                self._tests[test_id] = _TestState(run_id=run_id)

    def _use(self, test_id: str | None, *paths: Path) -> None:
        self.usage.setdefault(test_id, set()).update(paths)

    @property
    def used_files(self) -> set[Path]:
        with self._lock:
            return set().union(*self.usage.values()) if self.usage else set()

    def end_test(self, test_id: str | None) -> list[ReplayMiss]:
        """Forget a test's state; returns the misses it had (the plugin fails the test)."""
        with self._lock:
            state = self._tests.pop(test_id, None)
        return state.misses if state else []

    def take_misses(self, test_id: str | None) -> list[ReplayMiss]:
        with self._lock:
            state = self._tests.get(test_id)
            if state is None or not state.misses:
                return []
            misses, state.misses = state.misses, []
            return misses

    def _state(self, test_id: str | None) -> _TestState:
        state = self._tests.get(test_id)
        if state is None:
            state = self._tests[test_id] = _TestState()
        return state

    def mode_for(self, test_id: str | None) -> Mode:
        state = self._tests.get(test_id)
        if state is not None and state.mode is not None:
            return state.mode
        return self.config.mode

    def is_passthrough(self, url: str) -> bool:
        """Whether `url` is under a `passthrough` prefix. A prefix ends at a boundary:
        `http://127.0.0.1:80` covers `http://127.0.0.1:80/x`, not `http://127.0.0.1:8000`."""
        for prefix in self.config.passthrough:
            if url.startswith(prefix) and (
                len(url) == len(prefix) or prefix[-1] in "/?#" or url[len(prefix)] in "/?#"
            ):
                return True
        return False

    def intercepts(self, url: str) -> bool:
        """Whether an adapter should hand this request to the engine at all."""
        if self.is_passthrough(url):
            return False
        return self.mode_for(current_test_id()).intercepts

    # --- requests ---------------------------------------------------------------------------

    def prepare(self, incoming: IncomingRequest, test_id: str | None = None) -> Prepared:
        """Redact, normalise and hash a request (DESIGN.md §3, §7)."""
        if test_id is None:
            test_id = current_test_id()
        method = incoming.method.upper()
        redactor = self.redactor
        url = stored_url(redactor.url(incoming.url))
        endpoint = endpoint_of(incoming.url, redactor.is_query_secret)
        raw_body, encoding = encode_request_body(incoming.content, incoming.header("content-type"))
        body = self._hashed_body(raw_body, test_id)
        model = body.get("model") if isinstance(body, dict) else None
        request = RecordedRequest(
            method=method,
            url=url,
            endpoint=endpoint,
            headers=filter_headers(incoming.headers, self.kept_request_headers, redactor.header),
            body=body,
            body_encoding=encoding,
            model=model if isinstance(model, str) else None,
        )
        hash_hex, shared = self.key_of(request, test_id)
        return Prepared(test_id, self.mode_for(test_id), hash_hex, shared, request)

    def prepare_call(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Prepared:
        """A call-layer call (DESIGN.md §2) as a request: `CALL <name>` with its arguments
        (pydantic models and dataclasses dumped, `self` already excluded by the adapter)
        redacted, normalised and hashed like a body."""
        test_id = current_test_id()
        raw = {"args": [jsonable_arg(a) for a in args], "kwargs": jsonable_arg(dict(kwargs))}
        body = self._hashed_body(raw, test_id)
        model = body["kwargs"].get("model")
        request = RecordedRequest(
            method=CALL_METHOD,
            url=f"call:{name}",
            endpoint=name,
            body=body,
            model=model if isinstance(model, str) else None,
        )
        hash_hex, shared = self.key_of(request, test_id)
        return Prepared(test_id, self.mode_for(test_id), hash_hex, shared, request)

    def _hashed_body(self, raw: Any, test_id: str | None) -> Any:
        """A body as hashed and stored: redacted, then normalised with the ids this test
        received earlier mapped to their stable form."""
        state = self._tests.get(test_id)
        id_map = dict(state.id_map) if state is not None and state.id_map else None
        return normalise_request_body(self.redactor.value(raw), self.rules, id_map)

    def key_of(self, request: RecordedRequest, test_id: str | None) -> tuple[str, bool]:
        """The hash that names the file of `request` made by `test_id`, and whether it is a
        shared model list (DESIGN.md §3). The one place the naming rule is applied: to live
        requests here, and to stored ones by `hashreplay verify` and `rehash`."""
        is_call = request.method == CALL_METHOD
        shared = not is_call and is_model_list(
            request.method, request.endpoint, self.model_list_suffixes
        )
        match = (
            {name: request.headers.get(name) for name in self.config.match_headers}
            if self.config.match_headers and not is_call
            else None
        )
        hash_hex = compute_hash(
            request.method, request.endpoint, request.body, test_id, headers=match, shared=shared
        )
        return hash_hex, shared

    # --- replay -----------------------------------------------------------------------------

    def replay(self, prep: Prepared) -> ReplayPlan | None:
        """The recorded answer to this request as bytes for an HTTP client, or None."""
        found = self.replay_response(prep)
        return None if found is None else self.plan(*found)

    def replay_response(self, prep: Prepared) -> tuple[RecordedResponse, Path] | None:
        """The recorded response to this call and its file, or None when there is none.

        Identical requests within a test are answered in recorded order. Raises
        RecordingError for a file that exists but cannot be used.
        """
        if prep.shared:
            return self._replay_model_list(prep)
        with self._lock:
            seq = self._sequence(prep)
            index = seq.calls
            if index >= len(seq.responses):
                return None
            seq.calls += 1
            self.stats.replayed += 1
            self._use(prep.test_id, seq.path)
        return seq.responses[index], seq.path

    def _sequence(self, prep: Prepared) -> _Sequence:
        state = self._state(prep.test_id)
        seq = state.sequences.get(prep.hash)
        if seq is not None:
            return seq
        found = None if prep.mode is Mode.RECORD else self._read_first(prep.test_id, prep.hash)
        if found is None:
            seq = _Sequence(
                [], new_id_registry(prep.hash), self.store.path_for(prep.test_id, prep.hash)
            )
        else:
            path, recording = found
            check_name(path, recording, prep)
            seq = _Sequence(
                recording.responses,
                new_id_registry(prep.hash, recording.id_normalization_mapping),
                path,
            )
        state.sequences[prep.hash] = seq
        return seq

    def _replay_model_list(self, prep: Prepared) -> tuple[RecordedResponse, Path] | None:
        paths = self._model_list_paths(prep)
        if not paths:
            return None
        recordings = [self._read_any(p) for p in paths]
        merged = merge_model_lists([r.response for r in recordings])
        with self._lock:
            self.stats.replayed += 1
            self._use(prep.test_id, *paths)
        return merged, paths[0]

    def plan(self, response: RecordedResponse, path: Path | None = None) -> ReplayPlan:
        """Bytes and headers that reproduce a recorded response for a client."""
        return plan_for(response, path)

    def miss_plan(self, miss: ReplayMiss) -> ReplayPlan:
        """A prompt, non-retryable error response that carries the miss report."""
        return miss_plan(miss)

    def miss(self, prep: Prepared, problem: RecordingError | None = None) -> ReplayMiss:
        """Note a replay miss (the test will fail) and return it; never raises it."""
        with self._lock:
            state = self._tests.get(prep.test_id)
            seq = state.sequences.get(prep.hash) if state else None
            recorded_count = len(seq.responses) if seq else 0
        report = miss_report(self, prep, problem=problem, recorded_count=recorded_count)
        miss = ReplayMiss(self.redactor.text(report), test_id=prep.test_id, request_hash=prep.hash)
        with self._lock:
            self.stats.missed += 1
            self._state(prep.test_id).misses.append(miss)
        return miss

    # --- record -----------------------------------------------------------------------------

    def note_passthrough(self) -> None:
        with self._lock:
            self.stats.passed_through += 1

    def recorded_response(self, prep: Prepared, exchange: LiveExchange) -> RecordedResponse:
        """A live exchange as it will be stored: redacted, headers reduced, streams parsed."""
        return recorded_response(exchange, self.redactor, self.kept_response_headers)

    def record(self, prep: Prepared, exchange: LiveExchange) -> Path:
        """Normalise and write one live exchange; returns the file written."""
        return self.record_response(prep, self.recorded_response(prep, exchange))

    async def arecord(self, prep: Prepared, exchange: LiveExchange) -> Path:
        return await self.arecord_response(prep, self.recorded_response(prep, exchange))

    def record_response(self, prep: Prepared, response: RecordedResponse) -> Path:
        """Normalise (ids, times) and write a response built by an adapter; redact it first."""
        path, recording = self._stage(prep, response)
        if recording is not None:
            if self.writer is not None:
                self.writer.submit(path, dump_recording(recording))
            else:
                self.store.write(path, recording)
        return path

    async def arecord_response(self, prep: Prepared, response: RecordedResponse) -> Path:
        path, recording = self._stage(prep, response)
        if recording is not None:
            if self.writer is not None:
                self.writer.submit(path, dump_recording(recording))
            else:
                await self.store.awrite(path, recording)
        return path

    def flush(self) -> None:
        """Wait until every recording written so far is on disk (write-behind sessions);
        raises a RecordingError for a write that failed."""
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def _read_first(self, test_id: str | None, hash_hex: str) -> tuple[Path, Recording] | None:
        """Like `Store.read_first`, but sees writes still queued behind."""
        if self.writer is not None and self.writer.pending:
            for directory in self.store.search_dirs(test_id):
                path = directory / f"{hash_hex}.json"
                content = self.writer.pending.get(path)
                if content is not None:
                    return path, parse_recording(content, path)
        return self.store.read_first(test_id, hash_hex)

    def _model_list_paths(self, prep: Prepared) -> list[Path]:
        paths = set(self.store.model_list_paths(prep.hash, prep.test_id))
        if self.writer is not None:
            prefix = f"{MODEL_LIST_PREFIX}{prep.hash}-"
            paths.update(p for p in list(self.writer.pending) if p.name.startswith(prefix))
        return sorted(paths, key=lambda p: p.name)

    def _read_any(self, path: Path) -> Recording:
        content = self.writer.pending.get(path) if self.writer is not None else None
        return parse_recording(content, path) if content is not None else self.store.read(path)

    def _stage(self, prep: Prepared, response: RecordedResponse) -> tuple[Path, Recording | None]:
        if prep.shared:
            return self._stage_model_list(prep, response)
        with self._lock:
            seq = self._sequence(prep)
            if seq.calls < len(seq.responses):
                # record mode re-records from the first call; record-if-missing only
                # reaches here past the end of the recorded sequence.
                del seq.responses[seq.calls :]
            index = len(seq.responses)
            where = "response.body" if index == 0 else f"later_responses[{index - 1}].body"
            state = self._state(prep.test_id)
            normalised = normalise_response(response, seq.ids, where=where, known_ids=state.id_map)
            seq.responses.append(normalised)
            seq.calls += 1
            state.id_map.update(seq.ids.stable)
            recording = new_recording(
                test_id=prep.test_id,
                request=prep.request,
                responses=list(seq.responses),
                id_mapping=seq.ids.facts,
            )
            self.stats.recorded += 1
            self._use(prep.test_id, seq.path)
            return seq.path, recording

    def _stage_model_list(
        self, prep: Prepared, response: RecordedResponse
    ) -> tuple[Path, Recording | None]:
        ids = model_ids(response.body)
        path = self.store.common_dir / model_list_filename(prep.hash, ids)
        with self._lock:
            self.stats.recorded += 1
            self._use(prep.test_id, path)
        if path.exists() or (self.writer is not None and path in self.writer.pending):
            return path, None  # the same model set is stored already
        registry = new_id_registry(prep.hash)
        normalised = normalise_response(response, registry, model_list=True)
        return path, new_recording(test_id=None, request=prep.request, responses=[normalised])
