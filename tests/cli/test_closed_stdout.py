"""`hashreplay … | head`: a reader that leaves before the output ends. Every command that
prints stops quietly (no traceback, no "Exception ignored" at exit): with its own exit status
when it had done its work before it met the closed pipe (buffered output, flushed at the end),
with 1 when it was cut short (unbuffered, its first line fails), as Python's convention is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import CHAT, STREAM, Project


@pytest.fixture(params=["buffered", "unbuffered"])
def buffering(request: pytest.FixtureRequest) -> str:
    """Buffered, stdout fails when Python flushes it (at the latest at exit, where an error
    would otherwise print "Exception ignored"); unbuffered, at the first write."""
    return str(request.param)


def run_into_closed_pipe(
    *args: str, cwd: Path, buffering: str = "buffered"
) -> subprocess.CompletedProcess[str]:
    """`python -m hashreplay ARGS` writing to a pipe nobody reads any more: every write to
    stdout fails with EPIPE, as when `head` has exited."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    unset = ("HASHREPLAY_ROOT", "INFERENCE_MODE", "PYTHONUNBUFFERED")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    if buffering == "unbuffered":
        env["PYTHONUNBUFFERED"] = "1"
    try:
        return subprocess.run(
            [sys.executable, "-m", "hashreplay", *args],
            cwd=cwd,
            env={**env, "NO_COLOR": "1"},
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)


def cut_short(buffering: str, own: int) -> int:
    """The exit status: the command's own when it finished, 1 when its first write failed."""
    return 1 if buffering == "unbuffered" else own


COMMANDS = [
    ("status",),
    ("status", "--paths"),
    ("list",),
    ("verify",),
    ("normalize", "--dry-run"),
    ("rehash", "--dry-run"),
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_command_printing_to_a_closed_pipe_exits_quietly(
    project: Project, args: tuple[str, ...], buffering: str
) -> None:
    done = run_into_closed_pipe(*args, cwd=project.root, buffering=buffering)
    assert (done.returncode, done.stderr) == (cut_short(buffering, 0), "")


def test_show_textconv_and_diff_into_a_closed_pipe(project: Project, buffering: str) -> None:
    chat, stream = str(project.one(CHAT)), str(project.one(STREAM))
    for args in (("show", chat), ("textconv", chat), ("diff", chat, stream)):
        done = run_into_closed_pipe(*args, cwd=project.root, buffering=buffering)
        own = 1 if args[0] == "diff" else 0  # diff: 1 for files that differ
        # textconv writes the whole view and flushes it at once: always cut short here
        cut = cut_short("unbuffered" if args[0] == "textconv" else buffering, own)
        assert (done.returncode, done.stderr) == (cut, ""), args


@pytest.mark.parametrize("args", [("--help",), ("list", "--help"), ("--version",)], ids=" ".join)
def test_help_into_a_closed_pipe_exits_0(project: Project, args: tuple[str, ...]) -> None:
    """argparse prints help and the version itself, ignoring a failed write: exit 0."""
    for buffering in ("buffered", "unbuffered"):
        done = run_into_closed_pipe(*args, cwd=project.root, buffering=buffering)
        assert (done.returncode, done.stderr) == (0, ""), buffering


def test_init_into_a_closed_pipe_writes_the_table_and_exits_quietly(
    tmp_path: Path, buffering: str
) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "app"\n')
    done = run_into_closed_pipe("init", cwd=tmp_path, buffering=buffering)
    assert (done.returncode, done.stderr) == (cut_short(buffering, 0), "")
    assert "[tool.hashreplay]" in (tmp_path / "pyproject.toml").read_text()


def test_an_error_is_still_reported_when_stdout_is_closed(tmp_path: Path, buffering: str) -> None:
    """What went wrong goes to stderr, which is still open: it is not lost with stdout."""
    (tmp_path / "pyproject.toml").write_text("[tool.hashreplay]\nmode = 3\n")
    done = run_into_closed_pipe("list", cwd=tmp_path, buffering=buffering)
    assert done.returncode == 2
    assert done.stderr.startswith("error: invalid [tool.hashreplay]")
    assert "Traceback" not in done.stderr
