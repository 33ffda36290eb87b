"""Keying (docs/design.md §3): a request as stored and hashed, and the file name it gets, by
the one rule (`Keyer.key_of`) for live requests and, in `hashreplay verify`/`rehash`, stored
ones. Shared model lists: one file per model set in the common directory, merged on replay.

The user's say over what is keyed and written (docs/design.md §14): request hooks, record
hooks and `scrub` patterns. The engine never imports pytest: a front end hands it plain
callables (the dicts each hook gets: the hookspecs in `plugin/markers.py`).
"""

from __future__ import annotations

import copy
import functools
import operator
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import ValidationError

from hashreplay.core.bodies import parse_checked_body
from hashreplay.core.config import Config
from hashreplay.core.constants import (
    CALL_METHOD,
    CONVERSATION_HEADER,
    FAULT_HEADER,
    KEY_VERSION,
    RECORD_HOOK,
    REQUEST_HOOK,
    RUN_HEADER,
    TEST_ID_HEADER,
)
from hashreplay.core.errors import HashReplayError, HashReplayWarning
from hashreplay.core.format import RecordedRequest, RecordedResponse, Recording
from hashreplay.core.keys import (
    MODEL_LIST_KEYS,
    MODEL_LIST_SUFFIXES,
    current_conversation,
    endpoint_of,
    is_model_list,
    model_id,
    model_ids,
    model_list_filename,
    request_hash,
    stored_url,
)
from hashreplay.core.matching import MatchRule
from hashreplay.core.modes import Mode
from hashreplay.core.normalise import (
    KEPT_REQUEST_HEADERS,
    RequestRules,
    compile_patterns,
    filter_headers,
    normalise_request_body,
)
from hashreplay.core.redact import Redactor
from hashreplay.core.secret_values import NO_SECRETS, SecretValues, request_secrets, scrub_request
from hashreplay.core.store import Store
from hashreplay.core.typed import jsonable_arg
from hashreplay.engine.http import IncomingRequest

#: What a front end hands the engine: the implementations to run now, as (label, function).
HookImpls = Callable[[], Sequence[tuple[str, Callable[..., object]]]]

#: What turns a file's redacted JSON dict into what is written (`Hooks.written`).
Finish = Callable[[dict[str, Any]], dict[str, Any]]


def _none() -> Sequence[tuple[str, Callable[..., object]]]:
    return ()


class HookError(HashReplayError):
    """A user hook raised, or returned something that is not the changed dict."""


class Hooks:
    """What a front end plugged in, and the project's compiled `scrub` patterns (in order)."""

    def __init__(self, scrub: Sequence[tuple[str, str]] = ()) -> None:
        self.scrub = tuple((re.compile(pattern), replace) for pattern, replace in scrub)
        self.request: HookImpls = _none
        self.before_record: HookImpls = _none

    def run(self, name: str, impls: HookImpls, value: dict[str, Any]) -> dict[str, Any]:
        """Every implementation of hook `name` on `value`, each seeing the last one's result;
        one that raises or returns neither a dict nor None is a `HookError` naming it."""
        for label, function in impls():
            try:
                result = function(value)
            except Exception as exc:
                msg = f"{name} ({label}) raised {type(exc).__name__}: {exc}"
                raise HookError(msg) from exc
            if isinstance(result, dict):
                value = result
            elif result is not None:
                msg = (
                    f"{name} ({label}) returned {type(result).__name__} {_short(result)}; it "
                    "must change the dict it is given in place (and return None) or return "
                    "the changed dict"
                )
                raise HookError(msg)
        return value

    def request_parts(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: Any
    ) -> tuple[str, str, list[tuple[str, str]], Any] | None:
        """A request after the request hooks and the scrub patterns: method, URL, headers,
        body; None when there is nothing to do (no hook, no pattern)."""
        # the common case (no hook, no pattern) without a call: every request comes here
        impls = () if self.request is _none else self.request()
        if not impls and not self.scrub:
            return None
        parts = urlsplit(url)
        request: dict[str, Any] = {
            "method": method,
            "endpoint": parts.path or "/",
            "query": dict(parse_qsl(parts.query, keep_blank_values=True)),
            "headers": {name.lower(): value for name, value in headers},
            "body": copy.deepcopy(body),
        }
        if impls:
            request = self.run(REQUEST_HOOK, lambda: impls, request)
            _check_request(request)
        if self.scrub:  # not the method: it is no value to scrub
            scrubbed = ("endpoint", "query", "headers", "body")
            request = {**request, **self._scrubbed({k: request[k] for k in scrubbed})}
        query = urlencode([(str(k), str(v)) for k, v in request["query"].items()])
        new_url = urlunsplit((parts.scheme, parts.netloc, request["endpoint"], query, ""))
        new_headers = [(str(k), str(v)) for k, v in request["headers"].items()]
        return str(request["method"]).upper(), new_url, new_headers, request["body"]

    def finish(self, redact: Callable[[Any], Any]) -> Finish | None:
        """`written` with `redact`, or None when there is no record hook and no pattern."""
        if not self.scrub and not self.before_record():
            return None
        return functools.partial(self.written, redact=redact)

    def written(self, data: dict[str, Any], redact: Callable[[Any], Any]) -> dict[str, Any]:
        """A file's JSON dict (redacted already) as it is written: the record hooks, the
        scrub patterns, and redaction again after a hook."""
        impls = self.before_record()
        if impls:
            data = redact(self.run(RECORD_HOOK, lambda: impls, data))
        if self.scrub:
            data = self._scrubbed(data)
        if impls:
            try:
                Recording.model_validate(data)
            except ValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(str(p) for p in error["loc"])
                msg = (
                    f"{RECORD_HOOK} left a dict that is no recording: {where}: {error['msg']}"
                    f" ({exc.error_count()} problem(s))"
                )
                raise HookError(msg) from None
        return data

    def _scrubbed(self, value: Any) -> Any:
        """`value` with every match of the scrub patterns in its strings replaced (keys stay)."""
        if isinstance(value, str):
            for pattern, replace in self.scrub:
                value = pattern.sub(replace, value)
            return value
        if isinstance(value, dict):
            return {key: self._scrubbed(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._scrubbed(item) for item in value]
        return value


def _check_request(request: dict[str, Any]) -> None:
    """The request dict a hook left still has its parts, of their types."""
    for key, kind in (("method", str), ("endpoint", str), ("query", dict), ("headers", dict)):
        if not isinstance(request.get(key), kind):
            msg = (
                f"{REQUEST_HOOK} left request[{key!r}] as {_short(request.get(key))}; it must "
                f"stay a {kind.__name__}"
            )
            raise HookError(msg)
    if "body" not in request:
        msg = f"{REQUEST_HOOK} removed request['body']; set it to None for no body"
        raise HookError(msg)


def hook_problem(error: HookError, *, sent: bool = False) -> str:
    """What a test that met a failing hook fails with: the error and where to fix it."""
    what = "the live answer was not recorded" if sent else "nothing was sent or recorded"
    return (
        f'{error}; {what}. Fix the hook (in your conftest.py; docs/usage.md, "Hooks") '
        "and run the test again"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


#: Entries of each keying memo: a suite uses a few dozen URLs or credential sets; a proxy, any.
_MEMO_MAX = 1024

#: What `check_name` compares under the default matching rule, besides the test id
_COMPARED = operator.attrgetter("body", "endpoint", "method", "conversation")


class Prepared(NamedTuple):
    """A request after redaction and normalisation, with its hash and where it belongs."""

    test_id: str | None
    mode: Mode
    hash: str
    shared: bool
    request: RecordedRequest
    #: the request's credential values, scrubbed from all it writes or prints (docs/design.md §7)
    secrets: SecretValues = NO_SECRETS
    #: `test_id` as hashed, written and printed, secrets removed; `test_id` keys the test's state
    shown_test_id: str | None = None
    #: the matching rule the hash was made under (docs/design.md §14); None: the default
    rule: MatchRule | None = None
    #: why the user's request hook failed (the test fails with it; docs/design.md §14)
    hook_failed: str | None = None


class Keyer:
    """How requests are redacted, normalised and named under one configuration."""

    def __init__(self, config: Config) -> None:
        self.redactor = Redactor(config.redact_keys)
        self.rules = RequestRules(
            ignore_body_keys=config.ignore_body_keys,
            volatile=compile_patterns(config.volatile_patterns),
        )
        self.hooks = Hooks(config.scrub)
        self.match_headers = tuple(config.match_headers)
        #: the project's matching rule (docs/design.md §14); None: the default
        self.rule: MatchRule | None = None if config.match_rule.is_default else config.match_rule
        self.model_list_suffixes = (*MODEL_LIST_SUFFIXES, *config.model_list_endpoints)
        # hashreplay's own headers are never stored (nor hashed through match_headers)
        self.kept_request_headers = (
            KEPT_REQUEST_HEADERS | frozenset(config.match_headers) | self.redactor.keys
        ) - {h.lower() for h in (TEST_ID_HEADER, RUN_HEADER, CONVERSATION_HEADER, FAULT_HEADER)}
        # memoised as the redactor memoises long texts: a suite calls a handful of URLs,
        # with the same key on nearly every request; a test id's secret shapes are removed
        # once per test id, not once per request
        memo = functools.lru_cache(maxsize=_MEMO_MAX)
        self._url = memo(self._url_forms)
        self._secrets = memo(functools.partial(request_secrets, self.redactor))
        self._shown_id = memo(self.redactor.text)

    def request(
        self, incoming: IncomingRequest, id_map: Mapping[str, str] | None
    ) -> tuple[RecordedRequest, SecretValues, str | None]:
        """An HTTP request as stored and hashed (docs/design.md §3, §7), and the credential
        values it carried. Redacted by key and shape, then by those values (a key that also
        appears in the body or URL path leaves before hashing, so a recording made with one
        key replays with another); a body nested too deep is a `RequestTooDeep`. The user's
        hooks and scrub patterns run first (docs/design.md §14): a failing one leaves the
        request as it came, and the third value says why (its test fails with it)."""
        redactor = self.redactor
        method = incoming.method.upper()
        endpoint, url = self._url(incoming.url)
        raw_body, encoding = parse_checked_body(incoming, f"{method} {endpoint}")
        headers = incoming.headers
        failed = None
        try:
            changed = self.hooks.request_parts(method, incoming.url, headers, raw_body)
        except HookError as exc:
            changed, failed = None, hook_problem(exc)
        if changed is not None:
            method, new_url, headers, raw_body = changed
            endpoint, url = self._url(new_url)
        # redacted and normalised in one walk
        body = normalise_request_body(
            redactor.multipart_parts(raw_body, encoding), self.rules, id_map, redactor
        )
        model = body.get("model") if type(body) is dict else None
        request = RecordedRequest(
            method=method,
            url=url,
            endpoint=endpoint,
            headers=filter_headers(headers, self.kept_request_headers, redactor.header),
            body=body,
            body_encoding=encoding,
            model=model if isinstance(model, str) else None,
            conversation=incoming.header(CONVERSATION_HEADER) or current_conversation(),
        )
        secret_headers, other_headers = redactor.split_headers(incoming.headers)
        secrets = self._secrets(incoming.url, tuple(secret_headers))
        if secrets:
            # only a value found where redaction by key leaves it (the URL, the body, a header
            # not itself secret) needs the scrub: most requests carry a key only in its header
            others = "\n".join([incoming.url, *[v for _, v in other_headers]]).encode()
            if secrets.mentioned_in(b"\n".join([others, incoming.content])):
                request = scrub_request(request, secrets)
        return request, secrets, failed

    def _url_forms(self, url: str) -> tuple[str, str]:
        """A URL's endpoint (hashed) and stored form (redacted, loopback host generic)."""
        return endpoint_of(url, self.redactor.is_query_secret), stored_url(self.redactor.url(url))

    def call(
        self,
        name: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        id_map: Mapping[str, str] | None,
    ) -> RecordedRequest:
        """A call-layer call as a request: `CALL <name>` with its arguments (pydantic models
        and dataclasses dumped, `self` already excluded) redacted and normalised like a body
        (the ids this test received earlier mapped to their stable form)."""
        raw = {"args": [jsonable_arg(a) for a in args], "kwargs": jsonable_arg(dict(kwargs))}
        body = normalise_request_body(raw, self.rules, id_map, self.redactor)
        model = body["kwargs"].get("model")
        return RecordedRequest(
            method=CALL_METHOD,
            url=f"call:{name}",
            endpoint=name,
            body=body,
            model=model if isinstance(model, str) else None,
            conversation=current_conversation(),
        )

    def test_id(self, test_id: str | None, secrets: SecretValues = NO_SECRETS) -> str | None:
        """A test id as it is hashed and written (docs/design.md §7, "Test ids"): the request's
        own credential values and every secret shape removed (`test_x[sk-…]` →
        `test_x[[secret removed]]`). The file name hashes this id, so `hashreplay verify`
        recomputes it from the file, and replay, removing the same, finds what record wrote."""
        if test_id is None:
            return None
        return self._shown_id(secrets.text(test_id))

    def key_of(
        self, request: RecordedRequest, test_id: str | None, rule: MatchRule | None = None
    ) -> tuple[str, bool]:
        """The hash that names the file of `request` made by `test_id` under `rule` (None:
        the default), and whether it is a shared model list (never narrowed)."""
        method, endpoint, body, narrowed = request.method, request.endpoint, request.body, None
        is_call = method == CALL_METHOD
        shared = not is_call and is_model_list(method, endpoint, self.model_list_suffixes)
        match = None
        if self.match_headers and not is_call:
            match = {name: request.headers.get(name) for name in self.match_headers}
        if rule is not None and not shared and not rule.is_default:
            method, endpoint, body = rule.project(method, endpoint, body)
            narrowed = rule.as_json()
        hash_hex = request_hash(
            method,
            endpoint,
            body,
            test_id,
            headers=match,
            shared=shared,
            conversation=request.conversation,
            match=narrowed,
        )
        return hash_hex, shared


def check_name(
    path: Path, recording: Recording, prep: Prepared, rule: MatchRule | None = None
) -> None:
    """Warn when a file found by its name holds another request (edited by hand, or named by
    other rules): replay still uses it, and `hashreplay verify` lists every such file. Under
    a narrower matching `rule` only what it keys on has to agree."""
    stored, live = recording.request, prep.request
    current = recording.key_version == KEY_VERSION
    same_id = recording.test_id == prep.shown_test_id
    if current and same_id and rule is not None:
        keyed = rule.project(stored.method, stored.endpoint, stored.body)
        if keyed == rule.project(live.method, live.endpoint, live.body):
            return
    elif current and same_id and _COMPARED(stored) == _COMPARED(live):
        return  # the common case, at C speed: no field-by-field walk
    if not current:
        problem = (
            f"it was named by key_version {recording.key_version}, this hashreplay uses "
            f"{KEY_VERSION}; run `hashreplay rehash` to re-key the store"
        )
    elif not same_id:
        problem = f"it stores test id {recording.test_id!r}, not {prep.shown_test_id!r}"
    else:
        from hashreplay.core.diff import request_difference  # only a mismatch needs it

        diff = request_difference(stored, live)
        if diff is None:
            return
        problem = f"its stored request differs ({diff.describe()}): was it edited by hand?"
    msg = (
        f"recording {path} no longer matches its name: {problem}. It is still replayed; "
        "`hashreplay verify` lists every such file"
    )
    warnings.warn(HashReplayWarning(msg), stacklevel=2)


def model_list_path(store: Store, hash_hex: str, response: RecordedResponse) -> Path:
    """Where a model-list response of this request hash is stored."""
    return store.common_dir / model_list_filename(hash_hex, model_ids(response.body))


def merge_model_lists(responses: Sequence[RecordedResponse]) -> RecordedResponse:
    """One model-list response holding every model of all of them (union by model id)."""
    first = responses[0]
    if len(responses) == 1 or not isinstance(first.body, dict):
        return first
    body = dict(first.body)
    for key in MODEL_LIST_KEYS:
        if isinstance(body.get(key), list):
            seen: dict[str, Any] = {}
            for response in responses:
                items = response.body.get(key) if isinstance(response.body, dict) else None
                for item in items or []:
                    if (ident := model_id(item)) is not None:
                        seen.setdefault(ident, item)
            body[key] = list(seen.values())
    return first.replace(body=body)


def newest_model_list(files: Sequence[tuple[Path, RecordedResponse]]) -> int:
    """Which of a request's model-list files dates the list (docs/recordings.md, "Age"): the
    one recorded last, when the endpoint last answered live (the files of the union differ only
    in the models listed), so renewing one file makes the whole list fresh. Files without a day
    count only when none has one (ISO days compare as text)."""
    days = [response.recorded_on or "" for _, response in files]
    return max(range(len(days)), key=lambda i: (days[i], -i))
