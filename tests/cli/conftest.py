"""A recorded sample project for the CLI tests, and ways to run the CLI on it.

The store is recorded once per session through the real engine and SDKs against the fake
upstream (fresh ids, timestamps and durations on every call), then copied for each test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import openai
import orjson
import pytest

from hashreplay import Mode, test_context
from hashreplay.adapters import httpx as httpx_adapter
from hashreplay.cli import main
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream

CHAT = "tests/test_app.py::test_chat"
STREAM = "tests/test_app.py::test_stream"
TOOLS = "tests/test_app.py::test_tools"
RESPONSES = "tests/test_app.py::test_responses_stream"
CLAUDE = "tests/llm/test_claude.py::test_claude_stream"
OLLAMA_CHAT = "tests/llm/test_ollama.py::test_ollama_chat"
OLLAMA_GENERATE = "tests/llm/test_ollama.py::test_ollama_generate"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_weather",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{url}/v1", api_key="sk-test-key-0123456789abcdef", max_retries=0
    )


def _record_sample(url: str) -> None:
    client = _openai(url)
    with test_context(CHAT):
        client.chat.completions.create(
            model="gpt-fake-1", messages=[{"role": "user", "content": "hello there"}]
        )
        client.models.list()
    with test_context(STREAM):
        stream = client.chat.completions.create(
            model="gpt-fake-1",
            messages=[{"role": "user", "content": "tell me a short story"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        for _ in stream:
            pass
    with test_context(TOOLS):
        messages: list[dict[str, object]] = [
            {"role": "system", "content": "Use the tools."},
            {"role": "user", "content": "Paris"},
        ]
        first = client.chat.completions.create(
            model="gpt-fake-1",
            messages=messages,  # type: ignore[arg-type]
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
        )
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"})
        client.chat.completions.create(
            model="gpt-fake-1",
            messages=messages,  # type: ignore[arg-type]
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
        )
    with test_context(RESPONSES):
        for _ in client.responses.create(model="gpt-fake-1", input="stream me", stream=True):
            pass
    with test_context(CLAUDE):
        claude = anthropic.Anthropic(base_url=url, api_key="sk-ant-test-0123456789", max_retries=0)
        with claude.messages.stream(
            model="claude-fake",
            max_tokens=50,
            messages=[{"role": "user", "content": "bonjour tout le monde"}],
        ) as events:
            for _ in events:
                pass
    with test_context(OLLAMA_CHAT):
        body = {"model": "llama-fake:1b", "messages": [{"role": "user", "content": "hi ollama"}]}
        httpx.post(f"{url}/api/chat", json=body).raise_for_status()
    with test_context(OLLAMA_GENERATE):
        body = {"model": "llama-fake:1b", "prompt": "why is the sky blue"}
        httpx.post(f"{url}/api/generate", json=body).raise_for_status()


@pytest.fixture(scope="session")
def sample_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    recorder = Recorder(root)
    with FakeUpstream() as fake:
        try:
            session = recorder.start(Mode.RECORD)
            _record_sample(fake.url)
            session.close()  # write-behind: every file is on disk before the copies are made
        finally:
            httpx_adapter.uninstall()
    return root


@dataclass
class Project:
    root: Path

    def files(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*.json") if ".hashreplay" not in p.parts)

    def of_test(self, test_id: str) -> list[Path]:
        return [p for p in self.files() if self.data(p).get("test_id") == test_id]

    def one(self, test_id: str) -> Path:
        found = self.of_test(test_id)
        assert len(found) == 1, found
        return found[0]

    @staticmethod
    def data(path: Path) -> dict[str, object]:
        """The file's JSON; {} for a file a test has broken on purpose."""
        try:
            loaded = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError:
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def snapshot(self) -> dict[str, bytes]:
        return {str(p.relative_to(self.root)): p.read_bytes() for p in self.files()}


@pytest.fixture
def project(sample_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    root = tmp_path / "project"
    shutil.copytree(sample_template, root)
    monkeypatch.chdir(root)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    return Project(root)


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


Cli = Callable[..., Result]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """`cli("verify")` runs `main()` in-process and returns its exit code and output."""

    def run(*args: str) -> Result:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def run_subprocess(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """`python -m hashreplay …` in a child process, as users run it."""
    full_env = {
        k: v for k, v in os.environ.items() if k not in ("HASHREPLAY_ROOT", "INFERENCE_MODE")
    }
    full_env.update({"NO_COLOR": "1", **(env or {})})
    done = subprocess.run(
        [sys.executable, "-m", "hashreplay", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)
