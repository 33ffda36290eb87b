"""Every error hashreplay raises, under one root; every one says what happened, where, and
what to do next. Also the one JSON error body that HTTP clients receive from hashreplay (a
replay miss, a proxy error, a malformed request)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, NoReturn

import orjson

from hashreplay.core.constants import RERECORD_COMMAND


class HashReplayError(Exception):
    """Root of every error hashreplay raises."""


class ConfigError(HashReplayError):
    """Invalid configuration: an unknown key, a wrong type, an invalid mode."""


class RecordingError(HashReplayError):
    """A recording file that cannot be used: unreadable, truncated, wrong version, unsafe type."""

    def __init__(self, path: Path | str | None, problem: str) -> None:
        self.path = None if path is None else Path(path)
        self.problem = problem
        where = f"recording {self.path}" if self.path is not None else "recording"
        super().__init__(f"{where}: {problem}")


def unreadable_fix(path: str, rerun: str | None) -> str:
    """The next step for a recording file that cannot be read (`path` as the user should
    type it). `rerun` is what to give pytest to re-record the test that made it (None: not
    known). Never the command that just refused the file: record-if-missing and `verify`
    meet the same file again, while `record` overwrites it."""
    quoted = shlex.quote(path)
    restore = f"restore it with git (git checkout -- {quoted}) or delete it (rm {quoted})"
    if rerun is None:
        return f"{restore}, then re-record the test that made it"
    command = RERECORD_COMMAND.format(nodeid=shlex.quote(rerun))
    return f"re-record it with {command} (it replaces the file), or {restore}"


class BodyTooLarge(HashReplayError):
    """A body over `max_body_bytes` was not recorded (docs/design.md §13)."""

    def __init__(
        self,
        *,
        test_id: str | None,
        url: str,
        where: str,
        size: int,
        limit: int,
        binary: int | None = None,
        arriving: bool = False,
    ) -> None:
        self.test_id = test_id
        self.url = url
        self.size = size
        self.limit = limit
        test = test_id or "(no test)"
        if arriving:  # a live body stopped as it passed the limit (it may never have ended)
            msg = (
                f"hashreplay: not recorded: the {where} of {url} in test {test} passed "
                f"max_body_bytes ({limit}) while it arrived ({size} bytes so far), so "
                "hashreplay stopped reading it and failed the call; if it is meant to be "
                "this large, raise it in [tool.hashreplay] of pyproject.toml "
                f"(max_body_bytes = {_next_power(size + 1)}), else fix the upstream that "
                "does not end it"
            )
        else:
            #: a binary body: the bytes that came, then the size its base64 text is stored at
            stored = f"{size} bytes" if binary is None else f"{binary} bytes ({size} as base64)"
            msg = (
                f"hashreplay: not recorded: the {where} of {url} in test {test} is {stored}, "
                f"over max_body_bytes ({limit}); raise it in [tool.hashreplay] of "
                f"pyproject.toml (max_body_bytes = {_next_power(size)}) or send a smaller body"
            )
        super().__init__(msg)


def _next_power(size: int) -> int:
    limit = 1
    while limit < size:
        limit *= 2
    return limit


class RecordingWriteError(RecordingError):
    """Recordings that could not be written (disk full, no permission): every one is kept
    in `failures`, the message lists the first `shown` and counts the rest."""

    def __init__(self, failures: list[RecordingError], shown: int = 10) -> None:
        self.failures = failures
        lines = [f"  {failure}" for failure in failures[:shown]]
        if len(failures) > shown:
            lines.append(f"  … and {len(failures) - shown} more")
        count = len(failures)
        problem = (
            f"{count} recording{'s' if count != 1 else ''} could not be written "
            "(nothing was stored for them; free space or fix permissions and re-record):\n"
            + "\n".join(lines)
        )
        super().__init__(failures[0].path if failures else None, problem)


class ReplayFailure(HashReplayError):
    """Something a replay-mode test needed could not be served offline; the test fails with
    `report`, even when the code under test caught the error."""

    def __init__(self, report: str, *, test_id: str | None) -> None:
        self.report = report
        self.test_id = test_id
        super().__init__(report)


class ReplayMiss(ReplayFailure):
    """A request had no recording in replay mode. Its message is the full miss report."""

    def __init__(self, report: str, *, test_id: str | None, request_hash: str) -> None:
        self.request_hash = request_hash
        super().__init__(report, test_id=test_id)


class NetworkBlocked(ReplayFailure):
    """A replay-mode test opened a connection that no adapter handled (the network guard)."""


class SettingsError(HashReplayError, ValueError):
    """An invalid `hashreplay serve` option; the message names the option and the value."""


class UnknownUpstream(HashReplayError, LookupError):
    """A request path that matches no `--upstream NAME=URL` prefix and there is no default."""

    def __init__(self, path: str, prefixes: list[str]) -> None:
        self.path = path
        super().__init__(
            f"no upstream for path {path!r}: it starts with none of the configured prefixes "
            f"({', '.join(prefixes)}) and there is no default upstream; call one of those "
            "prefixes, or start hashreplay serve with a bare --upstream URL as the default"
        )


class ProxyError(HashReplayError):
    """A request the proxy answers with a JSON error of its own (never a crash)."""

    def __init__(
        self, status: int, code: str, message: str, *, retry: bool = False, close: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry = retry
        #: the connection closes after the answer (the rest of the request is not read)
        self.close = close or status == 413

    def body(self) -> bytes:
        return error_body(self.message, f"hashreplay_{self.code}", self.code)


class PathNotFound(HashReplayError):
    """A path named on the command line does not exist."""


class UsageError(HashReplayError):
    """The usage log is missing, unreadable or from another project."""


def error_body(message: str, kind: str, code: str, **extra: Any) -> bytes:
    """`{"error": {"message", "type", "code", ...}}`: the shape OpenAI-style SDKs read, so
    they surface the message to the user."""
    return orjson.dumps({"error": {"message": message, "type": kind, "code": code, **extra}})


class HashReplayWarning(UserWarning):
    """Something works but deserves attention (a recording whose name no longer matches it)."""


def assert_never(value: NoReturn) -> NoReturn:
    """Exhaustive handling of a closed set (`typing.assert_never`, which Python 3.10 lacks):
    mypy rejects a call reached with a member not handled above it."""
    raise AssertionError(f"unhandled value: {value!r}")
