"""The user's say over what is keyed and written (docs/design.md §14): request hooks, record
hooks and `scrub` patterns. The engine never imports pytest: a front end hands it plain
callables (the dicts each hook gets: the hookspecs in `plugin/markers.py`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import ValidationError

from hashreplay.core.constants import RECORD_HOOK, REQUEST_HOOK
from hashreplay.core.errors import HashReplayError
from hashreplay.core.format import Recording

if TYPE_CHECKING:
    from hashreplay.core.scrub import ScrubPattern

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
        self.scrub: tuple[ScrubPattern, ...] = ()
        if scrub:  # RE2 loads only for a project that has patterns
            from hashreplay.core.scrub import compile_scrub

            self.scrub = compile_scrub(scrub)
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
            for pattern in self.scrub:
                value = pattern.sub(value)
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
