"""One exception root; every error says what happened, where, and what to do next."""

from __future__ import annotations

from pathlib import Path


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


class BodyTooLarge(HashReplayError):
    """A body over `max_body_bytes` was not recorded (DESIGN.md §13)."""

    def __init__(self, *, test_id: str | None, url: str, where: str, size: int, limit: int) -> None:
        self.test_id = test_id
        self.url = url
        self.size = size
        self.limit = limit
        test = test_id or "(no test)"
        msg = (
            f"hashreplay: not recorded: the {where} of {url} in test {test} is {size} bytes, "
            f"over max_body_bytes ({limit}); raise it in [tool.hashreplay] of pyproject.toml "
            f"(max_body_bytes = {_next_power(size)}) or send a smaller body"
        )
        super().__init__(msg)


def _next_power(size: int) -> int:
    limit = 1
    while limit < size:
        limit *= 2
    return limit


class ReplayMiss(HashReplayError):
    """A request had no recording in replay mode. Its message is the full miss report."""

    def __init__(self, report: str, *, test_id: str | None, request_hash: str) -> None:
        self.report = report
        self.test_id = test_id
        self.request_hash = request_hash
        super().__init__(report)


class HashReplayWarning(UserWarning):
    """Something works but deserves attention (a recording whose name no longer matches it)."""
