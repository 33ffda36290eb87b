"""Keyless replay with the real SDKs (docs/design.md §2): a suite recorded with keys in the environment
replays, through the pytest plugin, with every provider key unset and the upstream gone; the
SDK constructors that demand a key get hashreplay's placeholders."""

from __future__ import annotations

import os

import pytest

from hashreplay.core.network import DEFAULT_REPLAY_ENV
from tests.fakes.upstream import FakeUpstream
from tests.sdks import sdk

# Imported here so pytester's in-process runs find them already loaded (see tests/conftest.py).
openai = sdk("openai")
anthropic = sdk("anthropic")
cohere = sdk("cohere")
groq = sdk("groq")
mistral_client = sdk("mistralai.client")

pytest_plugins = ["pytester"]

KEYS = {
    "OPENAI_API_KEY": "sk-proj-realkeyrealkeyrealkey0001",
    "ANTHROPIC_API_KEY": "sk-ant-api03-realkeyrealkeyrealkey0002",
    "CO_API_KEY": "co-realkeyrealkeyrealkey0003",
    "GROQ_API_KEY": "gsk_realkeyrealkeyrealkey0004",
    "MISTRAL_API_KEY": "mistral-realkeyrealkeyrealkey0005",
}

APP = """
import os

URL = os.environ["FAKE_URL"]
ASK = [{"role": "user", "content": "no key needed"}]


def test_openai():
    import openai

    client = openai.OpenAI(base_url=f"{URL}/v1", max_retries=0)  # OPENAI_API_KEY or raise
    reply = client.chat.completions.create(model="gpt-fake-1", messages=ASK)
    assert reply.choices[0].message.content == "echo: no key needed"


def test_anthropic():
    import anthropic

    client = anthropic.Anthropic(base_url=URL, max_retries=0)
    reply = client.messages.create(model="claude-fake", max_tokens=16, messages=ASK)
    assert reply.content[0].text == "echo: no key needed"


def test_cohere():
    import cohere

    client = cohere.ClientV2(base_url=URL)  # CO_API_KEY or raise
    reply = client.chat(model="command-fake", messages=ASK)
    assert reply.message.content[0].text == "echo: no key needed"


def test_groq():
    import groq

    client = groq.Groq(base_url=URL, max_retries=0)  # GROQ_API_KEY or raise
    reply = client.chat.completions.create(model="llama-fake", messages=ASK)
    assert reply.choices[0].message.content == "echo: no key needed"


def test_mistral():
    from mistralai.client import Mistral

    client = Mistral(server_url=f"{URL}/mistral")  # MISTRAL_API_KEY, or no Authorization
    reply = client.chat.complete(model="mistral-fake", messages=ASK)
    assert reply.choices[0].message.content == "echo: no key needed"
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in (*DEFAULT_REPLAY_ENV, "INFERENCE_MODE"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:asyncio"\n'
        "[tool.hashreplay]\n"
    )
    pytester.makepyfile(test_app=APP)
    return pytester


def test_recorded_with_keys_replays_with_none(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeUpstream() as fake:
        monkeypatch.setenv("FAKE_URL", fake.url)
        for name, value in KEYS.items():
            monkeypatch.setenv(name, value)
        project.runpytest("--inference-mode=record").assert_outcomes(passed=5)
        assert len(fake.calls) == 5
        assert all(
            call.headers.get("authorization", "").strip()
            for call in fake.calls
            if not call.path.startswith("/v1/messages")
        )
    files = sorted((project.path / "recordings").glob("*.json"))
    assert len(files) == 5
    stored = "".join(p.read_text() for p in files)
    for value in KEYS.values():
        assert value not in stored

    for name in KEYS:
        monkeypatch.delenv(name)
    run = project.runpytest()  # replay, the default; the fake upstream is stopped
    run.assert_outcomes(passed=5)
    run.stdout.fnmatch_lines(["*hashreplay: 5 replayed, 0 recorded, 0 missed (replay)*"])
    assert not any(name in os.environ for name in KEYS)  # placeholders taken away again

    with FakeUpstream() as fresh:  # reachable now, on another port: still nothing reaches it
        monkeypatch.setenv("FAKE_URL", fresh.url)
        project.runpytest().assert_outcomes(passed=5)
        assert fresh.calls == []


def test_without_placeholders_the_sdks_refuse_to_start(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: with `replay_env = false` the same replay fails where SDKs demand a key."""
    project.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:asyncio"\n'
        "[tool.hashreplay]\nreplay_env = false\n"
    )
    monkeypatch.setenv("FAKE_URL", "http://127.0.0.1:9")
    run = project.runpytest("-k", "openai or cohere or groq")
    run.assert_outcomes(failed=3, deselected=2)
