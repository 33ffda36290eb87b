"""`hashreplay verify` and `hashreplay rehash`: a file's name is the hash of its stored request."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from hashreplay import Mode, test_context
from hashreplay.adapters import httpx as httpx_adapter
from hashreplay.core.config import load_config
from hashreplay.core.constants import KEY_VERSION
from hashreplay.core.format import RecordedResponse
from hashreplay.core.hashing import request_hash
from hashreplay.core.names import model_list_filename
from hashreplay.core.store import dumps
from hashreplay.engine.http import IncomingRequest
from hashreplay.engine.rehash import Rekey, apply_rekeys
from hashreplay.engine.session import Session
from tests.cli.conftest import CHAT, STREAM, TOOLS, Cli, Project
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream


def edit(path: Path, change: Any) -> dict[str, Any]:
    """Change a recording as a person would (load, modify, write back nicely)."""
    data = json.loads(path.read_text())
    change(data)
    path.write_bytes(dumps(data))
    return data


def test_verify_passes_on_a_fresh_store(project: Project, cli: Cli) -> None:
    result = cli("verify")
    assert result.code == 0, result.out
    assert result.lines == ["Summary: 0/9 files with problems"]


def test_verify_catches_a_hand_edited_request(project: Project, cli: Cli) -> None:
    path = project.one(CHAT)

    def reword(data: dict[str, Any]) -> None:
        data["request"]["body"]["messages"][0]["content"] = "hello here"

    data = edit(path, reword)
    request = data["request"]
    expected = request_hash(request["method"], request["endpoint"], request["body"], CHAT)
    result = cli("verify")
    assert result.code == 1
    assert result.lines == [
        f"tests/recordings/{path.name}: named {path.name} but its stored request hashes to "
        f"{expected}.json: the request was edited after it was recorded, or the rules changed; "
        "re-record it (INFERENCE_MODE=record-if-missing pytest tests/test_app.py::test_chat) "
        "or run `hashreplay rehash` to rename it",
        "Summary: 1/9 files with problems",
    ]


def test_verify_finds_old_keys_secrets_and_misplaced_files(project: Project, cli: Cli) -> None:
    old = project.one(STREAM)
    edit(old, lambda d: d.update(key_version=KEY_VERSION - 1))
    leaky = project.one(CHAT)
    secret = "Bearer abcdefghijklmnopqrstuvwxyz012345"
    edit(leaky, lambda d: d["request"]["headers"].update({"x-trace": secret}))
    tools = project.of_test(TOOLS)[0]
    moved = project.root / "tests" / "llm" / "recordings" / tools.name
    shutil.move(tools, moved)

    result = cli("verify")
    assert result.code == 1
    assert secret not in result.out  # a report about a secret must not repeat it
    lines = result.lines
    assert (
        f"tests/recordings/{old.name}: key_version {KEY_VERSION - 1}, the current hashing rules "
        f"are key_version {KEY_VERSION}: run `hashreplay rehash` to re-key it"
    ) in lines
    assert (
        f"tests/recordings/{leaky.name}: holds a secret at request.headers.x-trace: replace the "
        "value with '[secret removed]' or re-record the test, and revoke the secret if it is real"
    ) in lines
    assert (
        f"tests/llm/recordings/{tools.name}: unreachable: test '{TOOLS}' looks for it in "
        f"{project.root / 'tests' / 'recordings'} or {project.root / 'recordings'}; move it there "
        "or re-record the test"
    ) in lines
    assert lines[-1] == "Summary: 3/9 files with problems"


def test_verify_checks_both_parts_of_a_model_list_name(project: Project, cli: Cli) -> None:
    models = next(p for p in project.files() if p.name.startswith("models-"))
    data = edit(models, lambda d: d["response"]["body"]["data"].pop())
    hash_part = models.name.split("-")[1]
    expected = model_list_filename(hash_part, [m["id"] for m in data["response"]["body"]["data"]])
    assert expected != models.name
    result = cli("verify", "recordings")
    assert result.code == 1
    assert result.lines[0] == (
        f"recordings/{models.name}: named {models.name} but the models it lists give {expected}: "
        "the model list was edited after it was recorded; re-record it or run `hashreplay "
        "rehash` to rename it"
    )
    renamed = models.with_name(f"models-{'0' * 32}-{expected.rsplit('-', 1)[1]}")
    models.rename(renamed)
    wrong_hash = cli("verify", str(renamed))
    assert "but its stored request hashes to" in wrong_hash.out


def test_verify_reports_unreadable_files(project: Project, cli: Cli) -> None:
    truncated = project.one(CHAT)
    truncated.write_bytes(truncated.read_bytes()[:100])
    future = project.one(STREAM)
    edit(future, lambda d: d.update(format_version=2))
    before = (truncated.read_bytes(), future.read_bytes())
    result = cli("verify")
    assert result.code == 1
    assert f"tests/recordings/{truncated.name}: unreadable: the file looks truncated" in result.out
    assert (
        f"tests/recordings/{future.name}: unreadable: format_version 2, this hashreplay reads "
        "format_version 1; re-record it or upgrade hashreplay; to fix it: re-record it with "
        f"INFERENCE_MODE=record pytest {STREAM} (it replaces the file), or restore it with git "
        f"(git checkout -- tests/recordings/{future.name}) or delete it "
        f"(rm tests/recordings/{future.name})"
    ) in result.lines
    assert result.lines[-1] == "Summary: 2/9 files with problems"
    assert (truncated.read_bytes(), future.read_bytes()) == before


@pytest.mark.parametrize(
    ("match", "problem"),
    [
        ("method", "match: expected an object, found 'method'"),
        (
            {"ignore": [], "match_on": ["method", "bogus"]},
            "match.match_on: unknown request part 'bogus'; the parts are \"method\", "
            '"endpoint", "path", "query", "body"',
        ),
        ({"ignore": [], "match_on": "method"}, "match.match_on: 'method' must be a list"),
        ({"ignore": ["body.[["], "match_on": ["method"]}, "match.ignore: cannot parse 'body.[['"),
        ({"ignore": [3]}, "match.ignore[0]: expected a string, found an integer"),
        (
            {"from": "conftest", "match_on": ["method"]},
            'match.from: \'conftest\' is not valid; use one of "project", "marker", "import"',
        ),
        (
            {"match_on": ["method"], "strict": ["body"]},
            "match: unknown key 'strict'; the keys are `ignore`, `match_on` and `from`",
        ),
    ],
)
def test_verify_names_a_match_field_it_cannot_read(
    project: Project, cli: Cli, match: object, problem: str
) -> None:
    """A recording's `match` (the rule that named it, docs/design.md §14) that cannot be read
    is a problem naming the file and the field; rehash leaves the file as it is."""
    path = project.one(CHAT)
    edit(path, lambda d: d.update(match=match))
    before = path.read_bytes()
    result = cli("verify")
    assert result.code == 1
    assert f"tests/recordings/{path.name}: unreadable: invalid recording: {problem}" in result.out
    assert "hashes to" not in result.out  # not mistaken for an edited request
    assert result.lines[-1] == "Summary: 1/9 files with problems"
    rehashed = cli("rehash")
    assert rehashed.code == 1
    assert f"tests/recordings/{path.name}: unreadable: invalid recording: {problem}" in rehashed.err
    assert path.read_bytes() == before


def test_verify_of_a_missing_path_is_a_usage_error(project: Project, cli: Cli) -> None:
    result = cli("verify", "tests/nowhere")
    assert result.code == 2
    assert (
        "error: no such file or directory: tests/nowhere; give an existing recording" in result.err
    )


# --- rehash ---------------------------------------------------------------------------------


def incoming_hash(root: Path, path: Path) -> str:
    """The hash the engine gives the request a file holds, as a client would send it again."""
    data = json.loads(path.read_text())
    request = data["request"]
    session = Session(load_config(root, env={}))
    incoming = IncomingRequest(
        request["method"],
        request["url"],
        [("content-type", "application/json")],
        orjson.dumps(request["body"]),
    )
    return session.prepare(incoming, test_id=data["test_id"]).hash


def test_rehash_without_rule_changes_touches_nothing(project: Project, cli: Cli) -> None:
    before = project.snapshot()
    result = cli("rehash")
    assert result.code == 0
    assert result.lines == ["Summary: 0/9 files re-keyed"]
    assert project.snapshot() == before


def test_rehash_renames_files_after_a_rule_change(project: Project, cli: Cli) -> None:
    stream = project.one(STREAM)
    assert "stream_options" in json.loads(stream.read_text())["request"]["body"]
    (project.root / "pyproject.toml").write_text(
        '[tool.hashreplay]\nignore_body_keys = ["stream_options"]\n'
    )
    before = project.snapshot()
    new_name = incoming_hash(project.root, stream) + ".json"
    assert new_name != stream.name

    dry = cli("rehash", "--dry-run")
    assert dry.code == 0
    assert dry.lines == [
        f"Would rename: tests/recordings/{stream.name} -> {new_name}",
        "Summary: 1/9 files re-keyed",
    ]
    assert project.snapshot() == before
    stale = cli("verify")  # the stored request still matches its name, but not the new rules
    assert stale.code == 1
    assert stale.lines[0] == (
        f"tests/recordings/{stream.name}: the current rules (ignore_body_keys, "
        f"volatile_patterns) hash its request to {new_name}, so no test finds it: run "
        "`hashreplay rehash`"
    )

    done = cli("rehash")
    assert done.lines == [
        f"Renamed: tests/recordings/{stream.name} -> {new_name}",
        "Summary: 1/9 files re-keyed",
    ]
    assert not stream.exists()
    renamed = json.loads((stream.parent / new_name).read_text())
    assert "stream_options" not in renamed["request"]["body"]  # stored as normalised and hashed
    old = json.loads(before[f"tests/recordings/{stream.name}"])
    assert renamed["response"] == old["response"]
    assert renamed["key_version"] == KEY_VERSION
    assert cli("verify").lines == ["Summary: 0/9 files with problems"]
    # the engine finds it again: the request a client sends hashes to the new name
    assert incoming_hash(project.root, stream.parent / new_name) + ".json" == new_name


def test_rehash_rekeys_every_file_when_match_headers_change(project: Project, cli: Cli) -> None:
    (project.root / "pyproject.toml").write_text(
        '[tool.hashreplay]\nmatch_headers = ["x-tenant"]\n'
    )
    result = cli("rehash")
    assert result.code == 0
    assert result.lines[-1] == "Summary: 9/9 files re-keyed"
    assert cli("verify").code == 0
    chat = project.one(CHAT)
    assert incoming_hash(project.root, chat) + ".json" == chat.name


def test_rehash_updates_an_old_key_version_in_place(project: Project, cli: Cli) -> None:
    path = project.one(CHAT)
    edit(path, lambda d: d.update(key_version=KEY_VERSION - 1))
    result = cli("rehash")
    assert result.lines == [f"Updated: tests/recordings/{path.name}", "Summary: 1/9 files re-keyed"]
    assert json.loads(path.read_text())["key_version"] == KEY_VERSION


def test_rehash_never_overwrites_a_different_file(project: Project, cli: Cli) -> None:
    # Ignoring `messages` makes the two turns of the tool test the same request.
    first, second = project.of_test(TOOLS)
    (project.root / "pyproject.toml").write_text(
        '[tool.hashreplay]\nignore_body_keys = ["messages"]\n'
    )
    target = incoming_hash(project.root, first) + ".json"
    assert target == incoming_hash(project.root, second) + ".json"
    before = project.snapshot()
    result = cli("rehash")
    assert result.code == 1
    collided = [line for line in result.err.splitlines() if "collision" in line]
    assert len(collided) == 1, result.err
    assert f"to {target}: it exists and holds a different recording; compare the two" in collided[0]
    assert "then run hashreplay rehash again" in collided[0]
    # one tool turn, and the other bodies with `messages` (chat, stream, Anthropic, Ollama)
    assert len([line for line in result.lines if line.startswith("Renamed: ")]) == 5
    assert result.lines[-1] == "Summary: 5/9 files re-keyed"
    survivor = next(p for p in (first, second) if p.exists())  # the one that lost, untouched
    assert survivor.read_bytes() == before[str(survivor.relative_to(project.root))]
    assert (first.parent / target).exists()
    assert {first.exists(), second.exists()} == {True, False}


def test_rehash_drops_an_exact_duplicate(project: Project, cli: Cli) -> None:
    chat = project.one(CHAT)
    copy = chat.with_name("0" * 32 + ".json")
    shutil.copy(chat, copy)
    dry = cli("rehash", "--dry-run")
    assert dry.lines[0] == (
        f"Would remove duplicate: tests/recordings/{copy.name} (the same recording is {chat.name})"
    )
    assert copy.exists()
    done = cli("rehash")
    assert done.code == 0
    assert done.lines == [
        f"Removed duplicate: tests/recordings/{copy.name} (the same recording is {chat.name})",
        "Summary: 1/10 files re-keyed",
    ]
    assert not copy.exists()
    assert chat.exists()


def test_rehash_skips_unreadable_files(project: Project, cli: Cli) -> None:
    path = project.one(CHAT)
    path.write_text("{")
    edit(project.one(STREAM), lambda d: d.update(key_version=KEY_VERSION - 1))
    result = cli("rehash")
    assert result.code == 1
    assert f"tests/recordings/{path.name}: unreadable" in result.err
    assert path.read_text() == "{"
    assert result.lines[-1] == "Summary: 1/9 files re-keyed"


def test_renames_wait_for_their_target_to_move_and_refuse_cycles(tmp_path: Path) -> None:
    a, b, c = (tmp_path / n for n in ("a.json", "b.json", "c.json"))
    a.write_bytes(b"A")
    b.write_bytes(b"B")
    chain = [Rekey(a, b, b"A2"), Rekey(b, c, b"B2")]  # a -> b must wait for b -> c
    planned = apply_rekeys(chain, dry_run=True)
    assert [p.source for p in planned.done] == [b, a]
    assert (a.read_bytes(), b.read_bytes(), c.exists()) == (b"A", b"B", False)
    result = apply_rekeys(chain, dry_run=False)
    assert result.collisions == []
    assert (a.exists(), b.read_bytes(), c.read_bytes()) == (False, b"A2", b"B2")

    x, y = tmp_path / "x.json", tmp_path / "y.json"
    x.write_bytes(b"X")
    y.write_bytes(b"Y")
    cycle = apply_rekeys([Rekey(x, y, b"X2"), Rekey(y, x, b"Y2")], dry_run=False)
    assert len(cycle.collisions) == 2
    assert all("in a cycle of renames" in why for _, why in cycle.collisions)
    assert (x.read_bytes(), y.read_bytes()) == (b"X", b"Y")


def test_call_layer_recordings_are_named_without_match_headers(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.hashreplay]\nmatch_headers = ["x-tenant"]\n')
    session = Session(load_config(tmp_path, env={}, mode="record"))
    with test_context("tests/test_tools.py::test_search"):
        prep = session.prepare_call("app.search:lookup", ["Paris"], {"limit": 3})
        path = session.record(prep, RecordedResponse(status=None, body=["a", "b"]))
    assert path.name == f"{prep.hash}.json"
    result = cli("verify", "--root", str(tmp_path))
    assert result.lines == ["Summary: 0/1 files with problems"], result.out
    assert cli("rehash", "--root", str(tmp_path)).lines == ["Summary: 0/1 files re-keyed"]


def test_rehash_drops_the_port_of_a_loopback_url_and_keeps_the_name(
    project: Project, cli: Cli
) -> None:
    """A file written before the stored URL lost its port: verify says so, rehash updates the
    URL in place (the URL is not hashed, so the name stays), normalize leaves requests alone."""
    path = project.one(STREAM)
    data = edit(
        path, lambda d: d["request"].update(url="http://127.0.0.1:8765/v1/chat/completions")
    )
    found = cli("verify", str(path))
    assert found.code == 1
    assert "keeps the port of a loopback upstream" in found.out
    assert "run `hashreplay rehash`" in found.out
    assert cli("normalize", str(path)).lines[-1] == "Summary: 0/1 files modified"

    result = cli("rehash")
    assert result.lines == [f"Updated: tests/recordings/{path.name}", "Summary: 1/9 files re-keyed"]
    after = json.loads(path.read_text())
    assert after["request"]["url"] == "http://localhost/v1/chat/completions"
    assert after["request"]["body"] == data["request"]["body"]
    assert cli("verify").code == 0


def test_rehash_follows_the_project_rule_there_and_back(project: Project, cli: Cli) -> None:
    """`ignore` added, `rehash`ed, removed again: the files the project's rule named are
    re-keyed strict again, byte for byte as they were, and until then `verify` says why."""
    pyproject = project.root / "pyproject.toml"
    before = project.snapshot()
    pyproject.write_text('[tool.hashreplay]\nignore = ["body.max_tokens"]\n')
    narrowed = cli("rehash")
    assert narrowed.code == 0, narrowed.out
    assert narrowed.lines[-1] == "Summary: 8/9 files re-keyed"  # a model list: never narrowed
    path = project.one(CHAT)
    assert Project.data(path)["match"] == {
        "from": "project",
        "ignore": ["body.max_tokens"],
        "match_on": ["method", "endpoint", "body"],
    }
    assert cli("verify").lines == ["Summary: 0/9 files with problems"]

    pyproject.write_text("[tool.hashreplay]\n")
    stale = cli("verify")
    assert stale.code == 1
    assert (
        f"tests/recordings/{path.name}: keyed by an earlier project rule (ignore = "
        "['body.max_tokens'], match_on = ['method', 'endpoint', 'body']); [tool.hashreplay] "
        "now says match_on = ['method', 'endpoint', 'body'], so replay no longer finds it by "
        "that rule: run `hashreplay rehash` to re-key it to the current rule"
    ) in stale.lines
    assert stale.lines[-1] == "Summary: 8/9 files with problems"
    strict = cli("rehash")
    assert strict.lines[-1] == "Summary: 8/9 files re-keyed"
    after = project.snapshot()
    pyproject.unlink()
    assert after == before
    assert cli("verify").lines == ["Summary: 0/9 files with problems"]


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("marker", "a @pytest.mark.hashreplay rule"),
        ("import", "the rule `hashreplay import` kept from its source"),
        (None, "a rule the file keeps as its own (written before files said where it came from)"),
    ],
)
def test_a_file_that_keeps_its_own_rule_says_so_and_rehash_leaves_it(
    project: Project, cli: Cli, source: str | None, said: str
) -> None:
    (project.root / "pyproject.toml").write_text('[tool.hashreplay]\nignore = ["body.seed"]\n')
    path = project.one(CHAT)
    match: dict[str, Any] = {"ignore": [], "match_on": ["method", "endpoint"]}
    if source is not None:
        match["from"] = source
    edit(path, lambda d: d.update(match=match))
    renamed = cli("rehash")  # each file named by its rule: the project's, or its own
    assert renamed.lines[-1] == "Summary: 8/9 files re-keyed"
    (path,) = project.of_test(CHAT)
    assert Project.data(path)["match"] == match
    kept = project.snapshot()
    result = cli("verify")
    assert result.code == 0, result.out
    assert result.lines == [
        f"tests/recordings/{path.name}: note: keeps its own matching rule (match_on = "
        f"['method', 'endpoint']), {said}, not the project's (ignore = ['body.seed'], match_on "
        "= ['method', 'endpoint', 'body']): replay finds it by that rule and `hashreplay "
        "rehash` leaves it so; to key it by the project's rule, re-record the test",
        "Summary: 0/9 files with problems",
    ]
    cli("rehash")
    assert project.snapshot() == kept


def test_a_lone_surrogate_in_a_test_id_records_replays_and_verifies(
    tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    """Half an emoji in a test id (`hashreplay.test_context`, or pytest with its id escaping
    turned off) is keyed and written as its `\\uXXXX` escape, as pytest's own escaping
    writes it; `verify` recomputes the name replay looks up."""
    (tmp_path / "pyproject.toml").write_text("[tool.hashreplay]\n")
    test_id = "tests/test_a.py::test_x[\ud83d]"
    recorder = Recorder(tmp_path)
    try:
        for mode in (Mode.RECORD, Mode.REPLAY):
            session = recorder.start(mode)
            with test_context(test_id):
                response = httpx.post(f"{upstream.url}/echo", json={"q": "hi"})
            assert response.status_code == 200, response.text
            session.close()
    finally:
        httpx_adapter.uninstall()
    (path,) = sorted((tmp_path / "tests" / "recordings").glob("*.json"))
    assert orjson.loads(path.read_bytes())["test_id"] == "tests/test_a.py::test_x[\\ud83d]"
    monkeypatch.chdir(tmp_path)
    result = cli("verify")
    assert result.code == 0, result.out + result.err
