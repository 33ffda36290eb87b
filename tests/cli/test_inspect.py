"""`hashreplay status`, `list` and `show` on a store recorded through the real SDKs."""

from __future__ import annotations

import io
import json

import anthropic
import httpx2
import openai
import pytest

from hashreplay import Mode, test_context
from hashreplay.core.format import RecordedResponse
from hashreplay.core.store import parse_recording
from hashreplay.core.transcript import conversation, reply, response_tokens
from tests.cli.conftest import (
    CHAT,
    CLAUDE,
    OLLAMA_CHAT,
    OLLAMA_GENERATE,
    RESPONSES,
    STREAM,
    TOOLS,
    Cli,
    Project,
)
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream

#: (input, output) tokens per test, from the fake upstream's documented rules: prompt = the
#: words of all messages, completion = the words of the reply ("echo: <last user text>").
TOKENS = {
    CHAT: [(2, 3)],
    STREAM: [(5, 6)],
    TOOLS: [(4, 2), (7, 5)],  # the tool call's arguments are 2 words; then "tool said: …"
    RESPONSES: [(2, 3)],
    CLAUDE: [(4, 5)],  # message_start says output 1, message_delta the final 5: not 6
    OLLAMA_CHAT: [(2, 3)],
    OLLAMA_GENERATE: [(5, 6)],
}


def test_status_reports_mode_directories_and_tokens(project: Project, cli: Cli) -> None:
    result = cli("status")
    assert result.code == 0, result.err
    assert "mode: replay" in result.lines
    assert "mode source: default" in result.lines
    sizes = {
        d: sum(p.stat().st_size for p in (project.root / d).glob("*.json"))
        for d in ("recordings", "tests/recordings", "tests/llm/recordings")
    }
    assert f"recordings: recordings\t1 files\t{sizes['recordings']} bytes" in result.lines
    assert (
        f"recordings: tests/recordings\t5 files\t{sizes['tests/recordings']} bytes" in result.lines
    )
    assert (
        f"recordings: tests/llm/recordings\t3 files\t{sizes['tests/llm/recordings']} bytes"
        in result.lines
    )
    assert f"total: 9 files\t{sum(sizes.values())} bytes" in result.lines
    pairs = [pair for per_test in TOKENS.values() for pair in per_test]
    inputs, outputs = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    assert (
        f"tokens: {inputs} input + {outputs} output = {inputs + outputs} total in {len(pairs)} "
        "responses (what every replayed run saves)"
    ) in result.lines
    assert "last run: none recorded" in result.out


@pytest.mark.parametrize(
    ("env", "pyproject", "expected"),
    [
        ({"INFERENCE_MODE": "record"}, "", ["mode: record", "mode source: env (INFERENCE_MODE)"]),
        ({}, 'mode = "record-if-missing"', ["mode: record-if-missing", "mode source: config (*)"]),
        ({"INFERENCE_MODE": "live"}, 'mode = "record"', ["mode: live", "mode source: env*"]),
    ],
    ids=["env", "config", "env-wins"],
)
def test_status_names_where_the_mode_came_from(
    project: Project,
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    pyproject: str,
    expected: list[str],
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if pyproject:
        (project.root / "pyproject.toml").write_text(f"[tool.hashreplay]\n{pyproject}\n")
    result = cli("status")
    assert result.code == 0
    pytest.LineMatcher(result.lines).fnmatch_lines(expected)


def test_status_with_an_invalid_config_is_a_usage_error(project: Project, cli: Cli) -> None:
    (project.root / "pyproject.toml").write_text('[tool.hashreplay]\nmode = "sometimes"\n')
    result = cli("status")
    assert result.code == 2
    assert "'sometimes': expected one of replay, record-if-missing, record, live" in result.err
    assert result.out == ""


def test_list_one_line_per_recording_and_filters(project: Project, cli: Cli) -> None:
    result = cli("list")
    assert result.code == 0
    assert len(result.lines) == 9
    rows = [line.split("\t") for line in result.lines]
    assert all(len(row) == 7 for row in rows)
    chat = project.one(CHAT)
    assert [
        CHAT,
        "POST",
        "/v1/chat/completions",
        "gpt-fake-1",
        "200",
        str(chat.stat().st_size),
        f"tests/recordings/{chat.name}",
    ] in rows
    models = next(p for p in project.files() if p.name.startswith("models-"))
    assert [
        "(shared)",
        "GET",
        "/v1/models",
        "-",
        "200",
        str(models.stat().st_size),
        f"recordings/{models.name}",
    ] in rows

    tools = cli("list", "--test", "test_tools")
    assert [line.split("\t")[0] for line in tools.lines] == [TOOLS, TOOLS]
    ollama = cli("list", "--endpoint", "/api/*")
    assert sorted(line.split("\t")[0] for line in ollama.lines) == [OLLAMA_CHAT, OLLAMA_GENERATE]
    glob = cli("list", "--test", "tests/llm/*[[]*", "--endpoint", "/v1/messages")
    assert glob.lines == []  # '[' is literal in patterns: no parametrised llm test exists
    both = cli("list", "--test", "llm", "--endpoint", "messages")
    assert [line.split("\t")[0] for line in both.lines] == [CLAUDE]
    only_dir = cli("list", "tests/llm/recordings")
    assert len(only_dir.lines) == 3


def test_list_reports_an_unreadable_file_and_lists_the_rest(project: Project, cli: Cli) -> None:
    broken = project.one(STREAM)
    broken.write_text('{"format_version": 1, "key_version": 1, "test_id": "x", "req')
    result = cli("list")
    assert result.code == 1
    assert len(result.lines) == 8
    assert (
        f"error: tests/recordings/{broken.name}: unreadable: the file looks truncated" in result.err
    )
    assert "skipped, left unchanged" in result.err
    assert broken.read_text().endswith('"req')


def _field(lines: list[str], name: str) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith(f"{name}:")]


@pytest.mark.parametrize(
    ("test_id", "user", "reply_text"),
    [
        (CHAT, "hello there", "echo: hello there"),
        (STREAM, "tell me a short story", "echo: tell me a short story"),
        (RESPONSES, "stream me", "echo: stream me"),
        (CLAUDE, "bonjour tout le monde", "echo: bonjour tout le monde"),
        (OLLAMA_CHAT, "hi ollama", "echo: hi ollama"),
        (OLLAMA_GENERATE, "why is the sky blue", "echo: why is the sky blue"),
    ],
    ids=[
        "openai",
        "openai-stream",
        "responses-stream",
        "anthropic-stream",
        "ollama-chat",
        "ollama-generate",
    ],
)
def test_show_assembles_the_conversation_and_the_reply(
    project: Project, cli: Cli, test_id: str, user: str, reply_text: str
) -> None:
    path = project.one(test_id)
    result = cli("show", path.stem[:8])
    assert result.code == 0, result.err
    assert _field(result.lines, "test") == [test_id]
    assert f"  [user] {user}" in result.lines
    assert _field(result.lines, "reply") == [reply_text]
    ((tokens_in, tokens_out),) = TOKENS[test_id]
    assert _field(result.lines, "tokens") == [
        f"input {tokens_in}, output {tokens_out}, total {tokens_in + tokens_out}"
    ]
    assert _field(result.lines, "request")[0].startswith("POST http://localhost/")
    assert "sk-test" not in result.out and "sk-ant" not in result.out


def test_show_a_tool_calling_turn_by_path(project: Project, cli: Cli) -> None:
    first, second = sorted(project.of_test(TOOLS), key=lambda p: len(p.read_bytes()))
    asked = cli("show", str(first))
    assert _field(asked.lines, "tool call") == ['lookup_weather({"query": "Paris"})']
    assert _field(asked.lines, "reply") == []
    answered = cli("show", str(second))
    stable_call_id = json.loads(first.read_text())["response"]["body"]["choices"][0]["message"][
        "tool_calls"
    ][0]["id"]
    assert answered.lines[answered.lines.index("conversation:") + 1 :][:4] == [
        "  [system] Use the tools.",
        "  [user] Paris",
        '  [assistant] call lookup_weather({"query": "Paris"})',
        f"  [tool {stable_call_id}] sunny, 21 C",
    ]
    assert _field(answered.lines, "reply") == ["tool said: sunny, 21 C"]


def test_show_a_model_list_prints_the_body_and_raw_prints_the_file(
    project: Project, cli: Cli
) -> None:
    models = next(p for p in project.files() if p.name.startswith("models-"))
    result = cli("show", "models-")
    assert result.code == 0
    assert _field(result.lines, "test") == ["(none: shared or made outside a test)"]
    assert '        "id": "gpt-fake-1",' in result.lines  # the body, indented under "body:"
    raw = cli("show", "--raw", str(models))
    assert raw.out == models.read_text()


def test_show_errors_name_what_to_do(project: Project, cli: Cli) -> None:
    missing = cli("show", "tests/recordings/nope.json")
    assert missing.code == 1
    assert "error: no such recording file: tests/recordings/nope.json" in missing.err
    unknown = cli("show", "ffffffff")
    assert unknown.code == 1
    assert (
        f"no recording matches 'ffffffff' among the project's {len(project.files())}: give"
        in unknown.err
    )
    hashes = sorted(p.stem for p in project.files() if not p.name.startswith("models-"))
    shared = next(a[:1] for a in hashes if sum(h.startswith(a[:1]) for h in hashes) > 1)
    ambiguous = cli("show", shared)
    assert ambiguous.code == 1
    assert f"{shared!r} matches" in ambiguous.err
    assert "give more of the hash" in ambiguous.err
    broken = project.one(CHAT)
    broken.write_text("not json")
    unreadable = cli("show", str(broken))
    assert unreadable.code == 1
    assert "unreadable: the file is not valid JSON" in unreadable.err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_output_is_a_table_with_colour(
    project: Project, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "xterm")
    terminal = _Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    from hashreplay.cli import main

    assert main(["list"]) == 0
    lines = terminal.getvalue().splitlines()
    assert lines[0].startswith("\x1b[1mtest")  # a bold header
    assert "\t" not in terminal.getvalue()
    assert any(line.endswith(" KiB  tests/recordings/" + project.one(CHAT).name) for line in lines)
    widths = {line.index("POST") for line in lines if "POST" in line}
    assert len(widths) == 1  # aligned columns


def test_progress_bar_is_drawn_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from hashreplay.cli.output import PROGRESS_MIN, Console

    assert PROGRESS_MIN == 1000
    items = list(range(PROGRESS_MIN))
    terminal, out = _Terminal(), io.StringIO()
    assert list(Console(out, terminal).progress(items, "reading")) == items
    drawn = terminal.getvalue()
    assert f"reading [{'-' * 30}] 0/{PROGRESS_MIN}" in drawn
    assert drawn.endswith("\r\x1b[K")  # cleared when done
    assert drawn.count("\r\x1b[K") <= 102  # at most once per percent, however long the work
    assert out.getvalue() == ""  # stdout keeps only the output, even on a terminal
    piped = io.StringIO()
    assert list(Console(_Terminal(), piped).progress(items, "reading")) == items
    assert piped.getvalue() == ""  # stderr piped: no bar
    few = _Terminal()
    assert list(Console(io.StringIO(), few).progress(items[:999], "reading")) == items[:999]
    assert few.getvalue() == ""  # short work: no bar


# --- replies of other shapes, recorded through the SDKs -----------------------------------------


def _recorded(recorder: Recorder, test_id: str) -> RecordedResponse:
    files = [p for p in recorder.files() if parse_recording(p.read_bytes(), p).test_id == test_id]
    assert len(files) == 1
    return parse_recording(files[0].read_bytes(), files[0]).response


def test_streamed_tool_calls_are_assembled(upstream: FakeUpstream, recorder: Recorder) -> None:
    recorder.start(Mode.RECORD)
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    with test_context("t::openai"):
        client = openai.OpenAI(base_url=f"{upstream.url}/v1", api_key="sk-x", max_retries=0)
        for _ in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Oslo"}], tools=[tool], stream=True
        ):
            pass
    with test_context("t::anthropic"):
        claude = anthropic.Anthropic(base_url=upstream.url, api_key="sk-x", max_retries=0)
        with claude.messages.stream(
            model="c",
            max_tokens=20,
            messages=[{"role": "user", "content": "Rome"}],
            tools=[{"name": "lookup", "input_schema": {"type": "object"}}],
        ) as events:
            for _ in events:
                pass
    with test_context("t::responses"):
        for _ in client.responses.create(
            model="m",
            input="Lima",
            stream=True,
            tools=[{"type": "function", "name": "lookup", "parameters": {}}],
        ):
            pass
    assert reply(_recorded(recorder, "t::openai")).tool_calls == ['lookup({"query": "Oslo"})']
    assert reply(_recorded(recorder, "t::anthropic")).tool_calls == ['lookup({"query": "Rome"})']
    assert reply(_recorded(recorder, "t::responses")).tool_calls == ['lookup({"query": "Lima"})']
    claude_tokens = response_tokens(_recorded(recorder, "t::anthropic"))
    assert (claude_tokens.input, claude_tokens.output) == (1, 2)


def test_conversation_of_anthropic_and_responses_items() -> None:
    anthropic_body = {
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {"role": "user", "content": "Rome?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "Rome"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "warm"}],
            },
        ],
    }
    assert [(t.role, t.text) for t in conversation(anthropic_body, "/v1/messages")] == [
        ("system", "be brief"),
        ("user", "Rome?"),
        ("assistant", 'call lookup({"q":"Rome"})'),
        ("tool toolu_1", "warm"),
    ]
    responses_body = {
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Lima?"}]},
            {
                "type": "function_call",
                "name": "lookup",
                "arguments": '{"q": "Lima"}',
                "call_id": "c1",
            },
            {"type": "function_call_output", "call_id": "c1", "output": "cool"},
        ],
    }
    assert [(t.role, t.text) for t in conversation(responses_body, "/v1/responses")] == [
        ("system", "be brief"),
        ("user", "Lima?"),
        ("assistant", 'call lookup({"q": "Lima"})'),
        ("tool c1", "cool"),
    ]
    assert conversation({"input": ["a", "b"], "model": "e"}, "/v1/embeddings") == []


def test_tokens_are_not_counted_from_responses_without_usage() -> None:
    plain = RecordedResponse(status=200, body={"object": "list", "data": []})
    assert response_tokens(plain).responses == 0
    error = RecordedResponse(status=None, is_exception=True)
    assert response_tokens(error).total == 0


def test_paths_are_shown_relative_to_the_working_directory(
    project: Project, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project.root / "tests")
    result = cli("list", "--root", str(project.root), "--test", "test_chat")
    assert result.lines[0].endswith("\trecordings/" + project.one(CHAT).name)
    elsewhere = project.root.parent / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    outside = cli("list", "--root", str(project.root), "--test", "test_chat")
    assert outside.lines[0].endswith("\t" + str(project.one(CHAT)))


def test_a_recorded_failure_shows_as_an_exception(
    recorder: Recorder, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeUpstream() as fake:
        dead = fake.url  # nothing listens here any more
    recorder.start(Mode.RECORD, record_failures="all")  # else a refusal is not recorded
    with test_context("tests/test_x.py::test_down"), pytest.raises(httpx2.ConnectError):
        httpx2.post(f"{dead}/v1/chat/completions", json={"model": "m", "messages": []})
    monkeypatch.chdir(recorder.root)
    (path,) = recorder.files()
    listing = cli("list")
    assert listing.lines[0].split("\t")[4] == "exception"
    shown = cli("show", str(path))
    assert _field(shown.lines, "response") == ["exception"]
    assert _field(shown.lines, "exception")[0].startswith("httpx2.ConnectError: ")
