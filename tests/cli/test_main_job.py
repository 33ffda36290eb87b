"""The repository shows the layout it promises, and the README's main job (the example suite
replaying from the repository root, offline) works as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def main_job() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The two commands", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None
    lines = block.group(1).strip().splitlines()
    assert len(lines) == 1, "the main job is one line"
    return lines[0]


def test_the_top_level_layout() -> None:
    for name in ("pyproject.toml", "src/hashreplay", "tests", "recordings", "scripts", "README.md"):
        assert (ROOT / name).exists(), name
    assert not (ROOT / "examples" / "pyproject.toml").exists()  # the root is its project
    assert list((ROOT / "recordings").glob("models-*.json"))
    assert list((ROOT / "examples" / "tests" / "recordings").glob("*.json"))


def test_the_main_job_replays_the_examples_offline() -> None:
    command = main_job().rsplit("&&", 1)[1].strip()  # after creating the venv and installing
    assert command == "INFERENCE_MODE=replay .venv/bin/pytest -p hashreplay examples/"
    command = command.replace(".venv/bin/", f"{Path(sys.executable).parent}/")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "HASHREPLAY_"))}
    done = subprocess.run(
        ["bash", "-c", command + " -p no:cacheprovider"],
        cwd=ROOT,
        env={**env, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},  # nothing listens there
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 recorded, 0 missed (replay)" in done.stdout


@pytest.mark.parametrize(
    "args", [[], ["-p", "hashreplay"]], ids=["plugin-off", "plugin-on-but-no-mode"]
)
def test_run_otherwise_the_examples_say_how_to_run_them(args: list[str]) -> None:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("INFERENCE_MODE", "HASHREPLAY_"))
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "examples/", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "run `INFERENCE_MODE=replay pytest -p hashreplay examples/`" in done.stderr + done.stdout
