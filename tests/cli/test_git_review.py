"""Recordings reviewed in git as conversations (`hashreplay git-setup`, `textconv`, `diff`).

A temporary project records a conversation through the openai SDK against the fake upstream
and commits it; one prompt changes and the suite is re-recorded (pruning the file the old
prompt named); after `hashreplay git-setup`, `git diff` and `git log -p` show the changed
message as text, with none of the JSON around it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hashreplay.cli import main
from tests.cli.conftest import CHAT, CLAUDE, STREAM, TOOLS, Cli, Project
from tests.fakes.upstream import FakeUpstream

SUITE = """
import os
import openai

PROMPT = "Weather in Paris?"


def test_conversation():
    c = openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key="sk-review-0123456789abcdef", max_retries=0)
    answer = c.chat.completions.create(
        model="gpt-fake-1",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}],
    )
    assert answer.choices[0].message.content.startswith("echo:")
"""

PYPROJECT = """
[tool.pytest.ini_options]
testpaths = ["suite"]
addopts = "-p no:hypothesispytest -p no:asyncio"

[tool.hashreplay]
"""

# Lines a JSON diff would show: keys, braces, brackets.
JSON_NOISE = re.compile(r'^[+-]\s*("[^"]*"\s*:|[{}\[\]],?$)')


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


def init_repo(root: Path) -> None:
    git(root, "init", "-q")
    git(root, "config", "user.name", "hashreplay tests")
    git(root, "config", "user.email", "tests@hashreplay.invalid")
    git(root, "config", "commit.gpgsign", "false")


@pytest.fixture
def suite(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("FAKE_URL", upstream.url)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "test_chat.py").write_text(SUITE)
    (pytester.path / ".gitignore").write_text(".pytest_cache/\n__pycache__/\n")
    return pytester


def test_a_changed_prompt_diffs_as_the_changed_message(
    suite: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    root = suite.path
    suite.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    init_repo(root)
    assert main(["git-setup", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert ".gitattributes: added **/recordings/*.json diff=hashreplay" in out
    assert "diff.hashreplay.textconv" in git(root, "config", "--local", "--list")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "recordings")

    test_file = root / "suite" / "test_chat.py"
    test_file.write_text(SUITE.replace("Weather in Paris?", "Weather in Lyon?"))
    suite.runpytest("--inference-mode=record", "--hashreplay-prune").assert_outcomes(passed=1)
    git(root, "add", "-A")
    shown = git(root, "diff", "--cached", "-M", "--", "suite/recordings")

    changed = [
        line
        for line in shown.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert "-user: Weather in Paris?" in changed
    assert "+user: Weather in Lyon?" in changed
    assert "-assistant: echo: Weather in Paris?" in changed
    assert "+assistant: echo: Weather in Lyon?" in changed
    assert not [line for line in changed if JSON_NOISE.match(line)], shown
    assert "system: Be brief." in shown  # unchanged context, as text

    git(root, "commit", "-q", "-m", "new prompt")
    history = git(root, "log", "-p", "-1", "-M")
    assert "+user: Weather in Lyon?" in history


def test_git_setup_twice_adds_nothing_and_keeps_other_attributes(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    init_repo(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".gitattributes").write_text("*.png binary")  # no final newline
    first = cli("git-setup", "--root", str(tmp_path))
    assert first.code == 0, first.err
    again = cli("git-setup", "--root", str(tmp_path))
    assert again.code == 0
    assert "already sends recordings" in again.out
    assert (tmp_path / ".gitattributes").read_text() == (
        "*.png binary\n**/recordings/*.json diff=hashreplay\n"
    )


def test_git_setup_names_a_common_directory_with_another_name(tmp_path: Path, cli: Cli) -> None:
    init_repo(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.hashreplay]\nrecordings_dir = "cassettes"\n')
    result = cli("git-setup", "--root", str(tmp_path), "--textconv", "my-textconv")
    assert result.code == 0, result.err
    lines = (tmp_path / ".gitattributes").read_text().splitlines()
    assert lines == ["**/recordings/*.json diff=hashreplay", "/cassettes/*.json diff=hashreplay"]
    assert git(tmp_path, "config", "--local", "diff.hashreplay.textconv").strip() == "my-textconv"


def test_git_setup_outside_a_repository_says_so(tmp_path: Path, cli: Cli) -> None:
    result = cli("git-setup", "--root", str(tmp_path))
    assert result.code == 1
    assert "git rev-parse --git-dir" in result.err
    assert "inside the project's git repository" in result.err
    assert not (tmp_path / ".gitattributes").exists()


def test_textconv_as_git_runs_it(project: Project, tmp_path: Path) -> None:
    """The configured command works in a child process, from any directory."""
    done = subprocess.run(
        [sys.executable, "-m", "hashreplay", "textconv", str(project.one(CHAT))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["POST /v1/chat/completions", "model: gpt-fake-1"]
    assert "user: hello there" in done.stdout


# --- textconv of anything git hands it --------------------------------------------------------


def test_textconv_of_each_provider_shape(project: Project, cli: Cli) -> None:
    views = {test: cli("textconv", str(project.one(test))).out for test in (STREAM, CLAUDE)}
    assert "assistant: echo: tell me a short story" in views[STREAM]  # chunks joined
    assert "(stream: sse," in views[STREAM]
    assert "user: bonjour tout le monde" in views[CLAUDE]
    for view in views.values():
        assert "end: complete" in view
        assert "rec-" not in view  # stable ids are noise in a review
        assert not any(line.strip() in "{}[]" and line.strip() for line in view.splitlines())


def test_textconv_prints_a_non_recording_unchanged(tmp_path: Path, cli: Cli) -> None:
    for name, content in {
        "package.json": '{"name": "app"}\n',
        "notes.json": "not json at all",
        "empty.json": "",
    }.items():
        path = tmp_path / name
        path.write_text(content)
        result = cli("textconv", str(path))
        assert (result.code, result.out, result.err) == (0, content, "")


def test_textconv_of_a_corrupt_recording_prints_the_error_and_the_raw_text(
    project: Project, cli: Cli
) -> None:
    path = project.one(CHAT)
    raw = path.read_text()
    path.write_text(raw[: len(raw) // 2])  # a truncated write
    result = cli("textconv", str(path))
    assert result.code == 0
    first, _, rest = result.out.partition("\n\n")
    assert first.startswith("hashreplay: this recording cannot be read: the file looks truncated")
    assert rest == raw[: len(raw) // 2]

    path.write_text(raw.replace('"format_version": 1', '"format_version": 99'))
    result = cli("textconv", str(path))
    assert "format_version 99, this hashreplay reads format_version 1" in result.out
    assert result.code == 0


def test_textconv_of_a_missing_file_still_exits_0(tmp_path: Path, cli: Cli) -> None:
    result = cli("textconv", str(tmp_path / "gone.json"))
    assert result.code == 0
    assert "cannot read" in result.err and "gone.json" in result.err


# --- hashreplay diff --------------------------------------------------------------------------


def test_diff_of_two_recordings(project: Project, cli: Cli) -> None:
    a, b = project.one(STREAM), project.one(CLAUDE)
    result = cli("diff", str(a), str(b))
    assert result.code == 1
    assert f"--- {a}" in result.lines and f"+++ {b}" in result.lines
    assert "-user: tell me a short story" in result.lines
    assert "+user: bonjour tout le monde" in result.lines
    same = cli("diff", str(a), str(a))
    assert (same.code, same.out) == (0, "")


def test_diff_against_the_committed_version(project: Project, cli: Cli) -> None:
    init_repo(project.root)
    git(project.root, "add", "-A")
    git(project.root, "commit", "-q", "-m", "recordings")
    path = project.one(STREAM)
    assert cli("diff", "--rev", "HEAD", str(path)).code == 0
    path.write_text(path.read_text().replace("tell me a short story", "tell me a long story"))
    result = cli("diff", "--rev", "HEAD", str(path))
    assert result.code == 1
    assert "-user: tell me a short story" in result.lines
    assert "+user: tell me a long story" in result.lines


def test_diff_usage_and_git_errors(project: Project, cli: Cli, tmp_path: Path) -> None:
    path = project.one(STREAM)
    assert cli("diff", str(path)).code == 2
    assert cli("diff", "--rev", "HEAD", str(path), str(path)).code == 2
    outside = cli("diff", "--rev", "HEAD", str(path))  # no repository here
    assert outside.code == 1
    assert "is " in outside.err and "committed at HEAD" in outside.err
    missing = cli("diff", str(path), str(tmp_path / "gone.json"))
    assert missing.code == 1
    assert "gone.json" in missing.err


def diff_driver(root: Path, path: str) -> str:
    """The `diff` attribute git gives `path` (NUL-separated output: no quoting to undo)."""
    _path, _attribute, value = git(root, "check-attr", "-z", "diff", "--", path).split("\0")[:3]
    return value


@pytest.mark.parametrize(
    "directory", ["llm cassettes", "data/my recordings", "rec [v2]* x?", 'say "hi"\tthere']
)
def test_git_setup_quotes_a_common_directory_git_would_split(
    tmp_path: Path, cli: Cli, directory: str
) -> None:
    """git splits an attribute line at whitespace: `/llm cassettes/*.json diff=hashreplay`
    would give the pattern `/llm` the attribute `cassettes/*.json`."""
    init_repo(tmp_path)
    escaped = directory.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t")
    (tmp_path / "pyproject.toml").write_text(f'[tool.hashreplay]\nrecordings_dir = "{escaped}"\n')
    (tmp_path / directory).mkdir(parents=True)
    result = cli("git-setup", "--root", str(tmp_path), "--textconv", "my-textconv")
    assert result.code == 0, result.err
    assert diff_driver(tmp_path, f"{directory}/0123.json") == "hashreplay"
    assert diff_driver(tmp_path, f"{directory}/blobs/0123") == "unspecified"
    assert (
        diff_driver(tmp_path, f"{directory.split(' ', maxsplit=1)[0]}/0123.json") == "unspecified"
    )
    assert diff_driver(tmp_path, "tests/recordings/0123.json") == "hashreplay"
    again = cli("git-setup", "--root", str(tmp_path), "--textconv", "my-textconv")
    assert "already sends recordings" in again.out
    assert len((tmp_path / ".gitattributes").read_text().splitlines()) == 2


def test_textconv_leaves_stable_tool_call_ids_out(project: Project, cli: Cli) -> None:
    """A stable id is made from the request hash: it changes with every prompt, so a review
    showing it would have a noise line per tool result. The tool's name, arguments and output
    stay; an id the test chose itself stays too."""
    second = max(project.of_test(TOOLS), key=lambda p: len(p.read_bytes()))
    data = json.loads(second.read_text())
    tool_message = data["request"]["body"]["messages"][-1]
    assert tool_message["tool_call_id"].startswith("rec-")  # what the recording holds
    view = cli("textconv", str(second)).out
    assert "rec-" not in view
    assert 'assistant: call lookup_weather({"query": "Paris"})' in view.splitlines()
    assert "tool: sunny, 21 C" in view.splitlines()

    placeholder, chosen = "<id:1>", "call_weather"
    for call_id, shown in ((placeholder, "tool:"), (chosen, f"tool {chosen}:")):
        tool_message["tool_call_id"] = call_id
        second.write_text(json.dumps(data))
        lines = cli("textconv", str(second)).out.splitlines()
        assert f"{shown} sunny, 21 C" in lines, call_id
        assert placeholder not in "\n".join(lines)


def test_textconv_leaves_stable_ids_out_of_every_provider_shape(project: Project, cli: Cli) -> None:
    """Anthropic's `tool_result` blocks and the Responses API's `function_call_output` items
    name their call by id too: a stable one is left out there as well."""
    path = project.one(CHAT)
    data = json.loads(path.read_text())
    anthropic_messages = [
        {"role": "user", "content": "Rome?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "rec-0a1b2c3d4e5f-1",
                    "name": "lookup",
                    "input": {"q": "Rome"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "rec-0a1b2c3d4e5f-1", "content": "warm"}
            ],
        },
    ]
    responses_input = [
        {"type": "function_call", "name": "lookup", "arguments": "{}", "call_id": "<id:2>"},
        {"type": "function_call_output", "call_id": "<id:2>", "output": "cool"},
    ]
    for endpoint, body, said in (
        ("/v1/messages", {"model": "m", "messages": anthropic_messages}, "tool: warm"),
        ("/v1/responses", {"model": "m", "input": responses_input}, "tool: cool"),
    ):
        data["request"]["endpoint"] = endpoint
        data["request"]["body"] = body
        path.write_text(json.dumps(data))
        view = cli("textconv", str(path)).out
        assert said in view.splitlines(), view
        assert "rec-" not in view and "<id:" not in view, view
