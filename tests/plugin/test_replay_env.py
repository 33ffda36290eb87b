"""Keyless replay (docs/design.md §12): placeholders for unset provider keys in replay mode
only, in real pytest sessions, and the rules behind them."""

from __future__ import annotations

import os

import pytest

from hashreplay import Mode
from hashreplay.core.config import load_config
from hashreplay.core.replay_env import DEFAULT_REPLAY_ENV, PLACEHOLDER, missing, replay_env_values
from hashreplay.engine.keyless import Placeholders

pytest_plugins = ["pytester"]

APP = """
import os
import openai
import pytest

def test_sdk_needs_no_key():
    openai.OpenAI()  # raises without OPENAI_API_KEY
    assert os.environ["OPENAI_API_KEY"] == "hashreplay-replay-placeholder"
    print("AWS:", os.environ.get("AWS_DEFAULT_REGION"), "MINE:", os.environ.get("MY_KEY"))

@pytest.mark.hashreplay(mode="record")
def test_marked_record_sees_no_placeholder():
    assert "OPENAI_API_KEY" not in os.environ

def test_after_a_marked_test_placeholders_are_back():
    assert os.environ["OPENAI_API_KEY"] == "hashreplay-replay-placeholder"
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in (*DEFAULT_REPLAY_ENV, "MY_KEY", "INFERENCE_MODE"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:asyncio"\n'
        "[tool.hashreplay]\n"
    )
    pytester.makepyfile(test_app=APP)
    return pytester


def test_replay_sets_placeholders_for_unset_keys(project: pytest.Pytester) -> None:
    run = project.runpytest("-s")
    run.assert_outcomes(passed=3)
    run.stdout.fnmatch_lines(["*AWS: us-east-1 MINE: None*"])
    assert "OPENAI_API_KEY" not in os.environ  # taken away again when the run ends


@pytest.mark.parametrize("mode", ["record", "record-if-missing", "live"])
def test_no_placeholders_outside_replay(project: pytest.Pytester, mode: str) -> None:
    run = project.runpytest(f"--inference-mode={mode}", "-k", "needs_no_key")
    run.assert_outcomes(failed=1, deselected=2)
    run.stdout.fnmatch_lines(["*OpenAIError*api_key*"])


def test_replay_env_false_switches_it_off(project: pytest.Pytester) -> None:
    project.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:asyncio"\n'
        "[tool.hashreplay]\nreplay_env = false\n"
    )
    project.runpytest("-k", "needs_no_key").assert_outcomes(failed=1, deselected=2)


def test_replay_env_table_extends_the_defaults(project: pytest.Pytester) -> None:
    project.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:asyncio"\n'
        '[tool.hashreplay]\nreplay_env = { MY_KEY = "mine", AWS_DEFAULT_REGION = "" }\n'
    )
    run = project.runpytest("-s", "-k", "needs_no_key")
    run.assert_outcomes(passed=1, deselected=2)
    run.stdout.fnmatch_lines(["*AWS: None MINE: mine*"])


def test_a_key_that_is_set_is_never_touched(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-users-own")
    run = project.runpytest("-k", "needs_no_key")
    run.assert_outcomes(failed=1, deselected=2)  # the test asserts the placeholder
    assert os.environ["OPENAI_API_KEY"] == "sk-the-users-own"


# --- the rules ----------------------------------------------------------------------------------


def test_values() -> None:
    assert replay_env_values(False) == {}
    assert replay_env_values(True)["ANTHROPIC_API_KEY"] == PLACEHOLDER
    extended = replay_env_values({"X_KEY": "x", "OPENAI_API_KEY": ""})
    assert extended["X_KEY"] == "x"
    assert "OPENAI_API_KEY" not in extended
    assert missing({"A": "1", "B": "2"}, {"A": "set", "B": ""}) == {"B": "2"}


def test_placeholders_set_and_remove_only_their_own(tmp_path: object) -> None:
    environ: dict[str, str] = {"ANTHROPIC_API_KEY": "real"}
    placeholders = Placeholders(load_config(tmp_path, env={}), environ)  # type: ignore[arg-type]
    placeholders.apply(Mode.REPLAY)
    assert environ["OPENAI_API_KEY"] == PLACEHOLDER
    assert environ["ANTHROPIC_API_KEY"] == "real"
    environ["GROQ_API_KEY"] = "changed-by-the-test"
    placeholders.apply(Mode.RECORD)
    assert "OPENAI_API_KEY" not in environ
    assert environ == {"ANTHROPIC_API_KEY": "real", "GROQ_API_KEY": "changed-by-the-test"}


def test_a_placeholder_a_test_deleted_is_back_for_the_next_test(tmp_path: object) -> None:
    environ: dict[str, str] = {}
    placeholders = Placeholders(load_config(tmp_path, env={}), environ)  # type: ignore[arg-type]
    placeholders.apply(Mode.REPLAY)
    placeholders.apply(Mode.REPLAY)  # the end of a test that changed nothing
    assert environ["OPENAI_API_KEY"] == PLACEHOLDER
    del environ["OPENAI_API_KEY"]  # a test that removes a key and does not put it back
    placeholders.apply(Mode.REPLAY)
    assert environ["OPENAI_API_KEY"] == PLACEHOLDER
    placeholders.apply(Mode.RECORD)  # a test marked record: all of them away, then back
    assert "OPENAI_API_KEY" not in environ
    placeholders.apply(Mode.REPLAY)
    assert environ["OPENAI_API_KEY"] == PLACEHOLDER
