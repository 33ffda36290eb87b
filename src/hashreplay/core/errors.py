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


class ReplayMiss(HashReplayError):
    """A request had no recording in replay mode. Its message is the full miss report."""

    def __init__(self, report: str, *, test_id: str | None, request_hash: str) -> None:
        self.report = report
        self.test_id = test_id
        self.request_hash = request_hash
        super().__init__(report)


class HashReplayWarning(UserWarning):
    """Something works but deserves attention (a recording whose name no longer matches it)."""
