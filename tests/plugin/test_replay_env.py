"""Keyless replay (docs/design.md §2): placeholders for unset provider keys in replay mode
only, in real pytest sessions, and the rules behind them."""

from __future__ import annotations

import os

import pytest

from hashreplay import Mode
from hashreplay.core.config import load_config
from hashreplay.core.network import DEFAULT_REPLAY_ENV, PLACEHOLDER, missing, replay_env_values
from hashreplay.engine.placeholders import Placeholders
from tests.sdks import sdk

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


# --- every test gets its placeholders; one Google key --------------------------------------------

CHURN = """
import os

def test_deletes_a_key_and_sets_another():
    del os.environ["OPENAI_API_KEY"]
    os.environ["SOMETHING_ELSE"] = "x"  # the environment keeps its size

def test_next_test_has_its_placeholder():
    assert os.environ["OPENAI_API_KEY"] == "hashreplay-replay-placeholder"

def test_replaces_a_key():
    del os.environ["ANTHROPIC_API_KEY"]
    os.environ["OPENAI_API_KEY"] = "changed-by-the-test"

def test_after_it():
    assert os.environ["ANTHROPIC_API_KEY"] == "hashreplay-replay-placeholder"
    assert os.environ["OPENAI_API_KEY"] == "changed-by-the-test"  # a change is left alone
"""


def test_every_test_gets_its_placeholders(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOMETHING_ELSE", raising=False)
    project.makepyfile(test_app=CHURN)
    project.runpytest("-p", "no:randomly").assert_outcomes(passed=4)


GENAI = """
import logging, os
import pytest
from google import genai

@pytest.mark.parametrize("n", [1, 2, 3])
def test_client_without_a_key(caplog, n):
    with caplog.at_level(logging.WARNING):
        genai.Client()  # raises without GOOGLE_API_KEY or GEMINI_API_KEY
    assert "Both GOOGLE_API_KEY and GEMINI_API_KEY" not in caplog.text, caplog.text
    # what Google's quick start has user code read
    assert os.environ.get("GEMINI_API_KEY") or os.environ["GOOGLE_API_KEY"]
    print("GOOGLE:", os.environ.get("GOOGLE_API_KEY"), "GEMINI:", os.environ.get("GEMINI_API_KEY"))
"""


@pytest.mark.parametrize(
    ("env", "table", "expected"),
    [
        ({}, "", "GOOGLE: None GEMINI: hashreplay-replay-placeholder"),
        ({"GEMINI_API_KEY": "AIza-the-users-own"}, "", "GOOGLE: None GEMINI: AIza-the-users-own"),
        ({"GOOGLE_API_KEY": "AIza-the-users-own"}, "", "GOOGLE: AIza-the-users-own GEMINI: None"),
        ({}, 'replay_env = { GEMINI_API_KEY = "mine" }', "GOOGLE: None GEMINI: mine"),
        ({}, 'replay_env = { GOOGLE_API_KEY = "mine" }', "GOOGLE: mine GEMINI: None"),
    ],
    ids=["neither-set", "gemini-set", "google-set", "gemini-in-table", "google-in-table"],
)
def test_google_genai_gets_one_key_and_warns_no_test(
    project: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    table: str,
    expected: str,
) -> None:
    sdk("google.genai")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    project.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:asyncio"\n'
        f"[tool.hashreplay]\n{table}\n"
    )
    project.makepyfile(test_app=GENAI)
    run = project.runpytest("-s")
    run.assert_outcomes(passed=3)
    assert run.stdout.str().count(expected) == 3


def test_alternatives_get_one_placeholder() -> None:
    values = replay_env_values(True)
    # the name Google's quick start uses: what user code reads, and google-genai takes alone
    assert missing(values, {}).keys() >= {"GEMINI_API_KEY"}
    assert "GOOGLE_API_KEY" not in missing(values, {})
    assert "GOOGLE_API_KEY" not in missing(values, {"GEMINI_API_KEY": "real"})
    assert "GEMINI_API_KEY" not in missing(values, {"GOOGLE_API_KEY": "real"})
    # a table entry comes first, so it wins over the default it stands in for
    mine = replay_env_values({"GOOGLE_API_KEY": "mine"})
    assert missing(mine, {})["GOOGLE_API_KEY"] == "mine"
    assert "GEMINI_API_KEY" not in missing(mine, {})
    # leaving the Gemini default out lets the other one have the placeholder
    assert missing(replay_env_values({"GEMINI_API_KEY": ""}), {})["GOOGLE_API_KEY"]
