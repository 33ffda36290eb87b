"""The usage log's file, its version and a test's outcome, for its models
(`hashreplay.engine.usage_log`)."""

from __future__ import annotations

from pathlib import Path

from hashreplay.core.constants import STATE_DIRNAME
from hashreplay.core.mode import Mode
from hashreplay.core.store import write_bytes_atomic

USAGE_VERSION = 1
USAGE_FILENAME = "usage.json"
#: `.hashreplay/.gitignore`: nothing hashreplay writes for itself ever shows in `git status`.
GITIGNORE_CONTENT = b"*\n"
INTERCEPTING = frozenset(m.value for m in Mode if m.intercepts)
PHASES = ("setup", "call", "teardown")


def completed(setup: str | None, call: str | None, teardown: str | None) -> bool:
    """Setup and call passed and teardown did not fail."""
    return setup == "passed" and call == "passed" and teardown in ("passed", "skipped")


def outcome(setup: str | None, call: str | None, teardown: str | None) -> str:
    if "failed" in (setup, call, teardown):
        return "failed" if call == "failed" else "error"
    if "skipped" in (setup, call):
        return "skipped"
    return "passed" if completed(setup, call, teardown) else "incomplete"


def relative(path: Path, root: Path) -> str:
    """`path` relative to the project root in POSIX form (absolute when outside it)."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


# --- the log file ---------------------------------------------------------------------------


def usage_path(root: Path) -> Path:
    return root / STATE_DIRNAME / USAGE_FILENAME


def ensure_state_dir(root: Path) -> Path:
    """`.hashreplay/` with its own `.gitignore` (`*`), so git never shows what is in it."""
    state = root / STATE_DIRNAME
    gitignore = state / ".gitignore"
    try:
        current = gitignore.read_bytes()
    except OSError:
        current = None
    if current != GITIGNORE_CONTENT:
        write_bytes_atomic(gitignore, GITIGNORE_CONTENT)
    return state
