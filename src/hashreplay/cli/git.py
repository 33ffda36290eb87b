"""Running git for the commands that need it (`git-setup`, `init`, `diff --rev`): one call,
a timeout, and an error that says which git command failed and why.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: How long a git command may take before the command gives up on it.
GIT_TIMEOUT = 60


class GitError(Exception):
    """A git command failed; the message says which and why."""


def git(args: list[str], cwd: Path) -> bytes:
    if shutil.which("git") is None:
        msg = "git is not installed (or not on PATH)"
        raise GitError(msg)
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        msg = f"git {' '.join(args)} failed: {exc}"
        raise GitError(msg) from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", errors="replace").strip() or f"exit {done.returncode}"
        msg = f"git {' '.join(args)} (in {cwd}) failed: {why}"
        raise GitError(msg)
    return done.stdout
