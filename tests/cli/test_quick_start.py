"""The README's quick start, run literally (each line through bash) in a new git project of
one's own: `hashreplay init`, recording against the fake upstream, the commit; then plain
`pytest` replays with the fake gone and no key."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.upstream import FakeUpstream

README = Path(__file__).resolve().parents[2] / "README.md"

TEST_CHAT = """
import os
import openai


def client():
    # a real key when recording; none is needed to replay
    return openai.OpenAI(api_key=os.environ.get("OPENAI_API_KEY", "sk-none"), max_retries=0)


def test_chat():
    reply = client().chat.completions.create(
        model="gpt-fake-1", messages=[{"role": "user", "content": "hello"}]
    )
    assert reply.choices[0].message.content == "echo: hello"


def test_models():
    assert "gpt-fake-1" in [m.id for m in client().models.list()]
"""


def quick_start() -> list[str]:
    """The command lines of the README's quick-start block, as written."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the quick start has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def bash(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_quick_start_works_as_written(tmp_path: Path) -> None:
    lines = quick_start()
    assert len(lines) == 4
    init, record, commit, replay = lines
    project = tmp_path / "my-app"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_chat.py").write_text(TEST_CHAT)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "config", "commit.gpgsign", "false"], cwd=project, check=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("INFERENCE_MODE", "HASHREPLAY_", "PYTEST_", "OPENAI_"))
    }
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        GIT_AUTHOR_NAME="me",
        GIT_AUTHOR_EMAIL="me@example.invalid",
        GIT_COMMITTER_NAME="me",
        GIT_COMMITTER_EMAIL="me@example.invalid",
        NO_COLOR="1",
    )

    done = bash(init, project, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[tool.hashreplay]" in (project / "pyproject.toml").read_text()

    with FakeUpstream() as fake:
        live = {**env, "OPENAI_BASE_URL": f"{fake.url}/v1", "OPENAI_API_KEY": "sk-real-0123456789"}
        done = bash(record, project, live)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 recorded" in done.stdout
        assert "run `hashreplay init`" not in done.stdout  # the project has the table
    done = bash(commit, project, env)
    assert done.returncode == 0, done.stdout + done.stderr
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=project, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert [f for f in tracked if f.startswith("recordings/models-")], tracked
    assert [f for f in tracked if f.startswith("tests/recordings/")], tracked
    assert {"pyproject.toml", ".gitattributes"} <= set(tracked)

    # CI: the fake is gone (its port refuses) and there is no key
    offline = {**env, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    done = bash(replay, project, offline)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    pytest.LineMatcher(done.stdout.splitlines()).fnmatch_lines(["*2 replayed, 0 recorded*"])
