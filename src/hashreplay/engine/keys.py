"""Keying (docs/design.md §3): a request as stored and hashed, and the file name it gets, by
the one rule (`Keyer.key_of`) for live requests and, in `hashreplay verify`/`rehash`, stored
ones; `check_name` warns when a file found by its name holds another request.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hashreplay.core.bodies import parse_checked_body
from hashreplay.core.config import Config
from hashreplay.core.constants import (
    CALL_METHOD,
    CONVERSATION_HEADER,
    FAULT_HEADER,
    KEY_VERSION,
    RUN_HEADER,
    TEST_ID_HEADER,
)
from hashreplay.core.context import current_conversation
from hashreplay.core.errors import HashReplayWarning
from hashreplay.core.format import RecordedRequest, Recording
from hashreplay.core.hashing import request_hash
from hashreplay.core.matching import MatchRule
from hashreplay.core.model_lists import MODEL_LIST_SUFFIXES, is_model_list
from hashreplay.core.modes import Mode
from hashreplay.core.normalise import (
    ID_HEADERS,
    KEPT_REQUEST_HEADERS,
    RequestRules,
    compile_patterns,
    filter_headers,
    normalise_request_body,
)
from hashreplay.core.redact import Redactor
from hashreplay.core.secret_values import NO_SECRETS, SecretValues, request_secrets, scrub_request
from hashreplay.core.typed import jsonable_arg
from hashreplay.core.urls import endpoint_of, stored_url
from hashreplay.engine.hooks import HookError, Hooks, hook_problem
from hashreplay.engine.http import IncomingRequest

#: Entries of each keying memo: a suite uses a few dozen URLs or credential sets; a proxy, any.
_MEMO_MAX = 1024

#: Half of a UTF-16 pair, alone
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


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
    #: the request opens a session's server-push stream (`core.streams.opens_server_push`)
    push: bool = False


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
        self._shown_id = memo(self._shown)

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
            headers=filter_headers(headers, self.kept_request_headers, self._header(id_map)),
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

    def _header(self, id_map: Mapping[str, str] | None) -> Callable[[str, str], str]:
        """How a kept request header's value is stored: redacted, and an id a response handed
        out (`ID_HEADERS`: `mcp-session-id`) as its stable form, so a `match_headers` key on
        it is the same in every run (docs/design.md §5, "Ids handed out in headers")."""
        header = self.redactor.header
        if not id_map:
            return header

        def stored(name: str, value: str) -> str:
            return header(name, id_map.get(value, value) if name in ID_HEADERS else value)

        return stored

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

    def _shown(self, test_id: str) -> str:
        """`test_id` with its secret shapes removed and each lone surrogate (half an emoji,
        which no UTF-8 file or hash input holds) written as its `\\uXXXX` escape, as
        pytest's own id escaping writes it: `test_x[\\ud83d]`."""
        if not test_id.isascii():
            test_id = _LONE_SURROGATE.sub(_escaped, test_id)
        return self.redactor.text(test_id)

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
    other rules): replay still uses it, and `hashreplay verify` lists every such file. What
    has to agree is what the name hashes: under a narrower matching `rule` only what it keys
    on, and always the conversation."""
    stored, live = recording.request, prep.request
    current = recording.key_version == KEY_VERSION
    same_id = recording.test_id == prep.shown_test_id
    narrowed = rule is not None and not rule.is_default and not prep.shared
    if narrowed:
        assert rule is not None
        keyed = rule.project(stored.method, stored.endpoint, stored.body)
        wanted = rule.project(live.method, live.endpoint, live.body)
    else:  # the common case, compared at C speed: no field-by-field walk
        keyed = (stored.method, stored.endpoint, stored.body)
        wanted = (live.method, live.endpoint, live.body)
    same_conversation = stored.conversation == live.conversation
    if current and same_id and same_conversation and keyed == wanted:
        return
    if not current:
        problem = (
            f"it was named by key_version {recording.key_version}, this hashreplay uses "
            f"{KEY_VERSION}; run `hashreplay rehash` to re-key the store"
        )
    elif not same_id:
        problem = f"it stores test id {recording.test_id!r}, not {prep.shown_test_id!r}"
    elif not same_conversation:
        problem = (
            f"it stores conversation {stored.conversation!r}, not {live.conversation!r}: "
            "was it edited by hand?"
        )
    else:
        from hashreplay.core.diff import Difference, first_difference  # only a mismatch

        fields = zip(("method", "endpoint"), keyed[:2], wanted[:2], strict=True)
        diff = next((Difference(f, a, b, "value") for f, a, b in fields if a != b), None)
        if diff is None:
            diff = first_difference(keyed[2], wanted[2], "body")
        if diff is None:
            return
        problem = f"its stored request differs ({diff.describe()}): was it edited by hand?"
    msg = (
        f"recording {path} no longer matches its name: {problem}. It is still replayed; "
        "`hashreplay verify` lists every such file"
    )
    warnings.warn(HashReplayWarning(msg), stacklevel=2)
