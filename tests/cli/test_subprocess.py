"""Every command as users run it: `python -m hashreplay …` in a child process."""

from __future__ import annotations

import json
import subprocess
import sys

from hashreplay import __version__
from tests.cli.conftest import CHAT, TOOLS, Project, run_subprocess


def test_version_help_and_unknown_command(project: Project) -> None:
    version = run_subprocess("--version", cwd=project.root)
    assert (version.code, version.out.strip()) == (0, f"hashreplay {__version__}")
    bare = run_subprocess(cwd=project.root)
    assert bare.code == 0
    for command in ("status", "list", "show", "verify", "rehash", "normalize", "prune"):
        assert command in bare.out
    unknown = run_subprocess("frobnicate", cwd=project.root)
    assert unknown.code == 2
    assert "invalid choice: 'frobnicate'" in unknown.err
    bad_option = run_subprocess("list", "--bogus", cwd=project.root)
    assert bad_option.code == 2
    assert "unrecognized arguments: --bogus" in bad_option.err


def test_status_list_show(project: Project) -> None:
    status = run_subprocess("status", cwd=project.root, env={"INFERENCE_MODE": "record"})
    assert status.code == 0, status.err
    assert status.lines[:2] == ["mode: record", "mode source: env (INFERENCE_MODE)"]
    listing = run_subprocess("list", "--test", "test_chat", cwd=project.root)
    assert listing.code == 0
    chat = project.one(CHAT)
    assert listing.lines == [
        f"{CHAT}\tPOST\t/v1/chat/completions\tgpt-fake-1\t200\t{chat.stat().st_size}"
        f"\ttests/recordings/{chat.name}"
    ]
    shown = run_subprocess("show", chat.stem, cwd=project.root)
    assert shown.code == 0
    assert "reply:     echo: hello there" in shown.lines
    missing = run_subprocess("show", "tests/recordings/missing.json", cwd=project.root)
    assert missing.code == 1
    assert missing.err.strip() == "error: no such recording file: tests/recordings/missing.json"


def test_unreadable_recording_makes_every_reader_fail(project: Project) -> None:
    broken = project.one(CHAT)
    broken.write_text('{"format_version": 1')
    for args in (["status"], ["list"], ["normalize", "--dry-run"], ["rehash", "--dry-run"]):
        result = run_subprocess(*args, cwd=project.root)
        assert result.code == 1, args
        assert (
            f"error: tests/recordings/{broken.name}: unreadable: the file looks truncated"
            in result.err
        )
    verify = run_subprocess("verify", cwd=project.root)
    assert verify.code == 1
    assert verify.lines[-1] == "Summary: 1/9 files with problems"
    assert broken.read_text() == '{"format_version": 1'


def test_verify_rehash_normalize_prune(project: Project) -> None:
    assert run_subprocess("verify", cwd=project.root).code == 0
    assert run_subprocess("normalize", "--dry-run", cwd=project.root).lines == [
        "Summary: 0/9 files modified"
    ]
    first = project.of_test(TOOLS)[0]
    data = json.loads(first.read_text())
    data["request"]["body"]["messages"][1]["content"] = "Lyon"
    first.write_text(json.dumps(data))
    problems = run_subprocess("verify", cwd=project.root)
    assert problems.code == 1
    assert problems.lines[0].startswith(f"tests/recordings/{first.name}: named {first.name} but")

    (project.root / "pyproject.toml").write_text(
        '[tool.hashreplay]\nignore_body_keys = ["messages"]\n'
    )
    collision = run_subprocess("rehash", cwd=project.root)
    assert collision.code == 1
    assert "error: collision: cannot rename tests/recordings/" in collision.err

    prune = run_subprocess("prune", "--dry-run", cwd=project.root)
    assert prune.code == 1
    assert "no usage log at" in prune.err
    assert "run the test suite first" in prune.err


def test_start_up_imports_no_client_or_server(project: Project) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hashreplay", "status"],
        cwd=project.root,
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "hashreplay.cli.usage" in imported  # the command really ran (its last-run line)
    heavy = {"httpx", "httpx2", "openai", "anthropic", "uvicorn", "starlette", "pytest"}
    assert {name.split(".")[0] for name in imported} & heavy == set()
