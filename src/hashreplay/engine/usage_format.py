"""The usage log's file, its version and a test's outcome, for its models
(`hashreplay.engine.usage_log`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hashreplay.core.constants import STATE_DIRNAME
from hashreplay.core.mode import Mode
from hashreplay.core.secret_values import SecretValues
from hashreplay.core.temp_files import write_bytes_atomic

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


def scrubbed_json(
    data: dict[str, Any], secrets: SecretValues, redact: Callable[[str], str] | None
) -> dict[str, Any]:
    """The usage log's JSON form with secrets removed from its test ids: `secrets`
    (credential values seen in requests) scrubbed, and `redact` (`Redactor.text`) applied to
    every id and name, so the ids are the ones recordings store (docs/design.md §7, "Test
    ids"), which `prune` compares them with."""
    scrubbed: dict[str, Any] = secrets.value(data)
    return scrubbed if redact is None else _texts(scrubbed, redact)


def _texts(value: Any, redact: Callable[[str], str]) -> Any:
    """`value` with `redact` applied to every string, dict keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {
            (redact(k) if isinstance(k, str) else k): _texts(v, redact) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_texts(v, redact) for v in value]
    return value
