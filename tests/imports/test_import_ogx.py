"""`hashreplay import ogx` on the ten real OGX recordings in `ogx_recordings/` (see its
MANIFEST.md for their origin and licence): each imports, and the chat, streamed chat,
embeddings, model-list, error and Ollama ones replay through the SDK call OGX made, built
from the stored request, with the recorded content."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ollama
import openai
import pytest

from hashreplay import Mode, test_context
from hashreplay.adapters import httpx as httpx_adapter
from hashreplay.cli import main
from hashreplay.engine.importing import UnreadableSource, read_ogx, untyped
from tests.conftest import Recorder

FIXTURES = Path(__file__).parent / "ogx_recordings"
CHAT = "0eca8ac9656056d4fd9b1802f01f6ae9f7ff628af04d5ed39f779a78a41a159b.json"
ERROR = "28a43dc80443ccae98eee165c58522090fd6f0637031153b0105399093d39c52.json"
EMBEDDINGS = "8ff1d58683cc480fa42f687e3129692883583d8bd840a1151f09f9a1db183398.json"
STREAMS = (
    "b82395f96e953c09adc130c27bcbfc2c56bb556b73cd681c6916b41c842d4d79.json",
    "912468ad85f5b2a6f9866cc7ebf8ae28854952ecf4c0273c74f8dd258d22acda.json",
)
MODEL_LISTS = (
    "models-2b9bac5da1a03c0b572bc019cc0c50904d49e6193990ca245908f4535bcaab43-fb68f5a6.json",
    "models-3a641f25d65695766fb77e424273f716b852f371e1e87f6e14fd5672b1ab6005-4a65eed3.json",
)
OLLAMA_GENERATE = "e96152610712.json"


def ogx(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    code, out, err = run_cli(capsys, "import", "ogx", "--root", str(tmp_path), str(FIXTURES))
    assert code == 0, err
    assert out.splitlines()[-1] == (
        "Summary: 10 imported from 10 files into 10 recordings (10 new, 0 unchanged, "
        "0 overwritten, 0 kept), 0 blobs, 0 skipped"
    )
    return tmp_path


@pytest.fixture
def replay(imported: Path, recorder: Recorder) -> Path:
    recorder.root = imported
    recorder.start(Mode.REPLAY)
    return imported


def openai_client(url: str, suffix: str) -> openai.OpenAI:
    """The client OGX recorded through: OGX stores its base URL (ending `/v1`) joined with
    the endpoint (`/v1/chat/completions`); the SDK is given the base URL, as a user does."""
    assert url.endswith(suffix)
    base = url.removesuffix(suffix)
    if base.endswith("/v1/v1"):
        base = base.removesuffix("/v1")
    assert base.endswith("/v1") and not base.endswith("/v1/v1")
    return openai.OpenAI(base_url=base, api_key="sk-other", max_retries=0)


def test_all_ten_import_land_by_test_id_verify_and_import_again_without_change(
    imported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = sorted(str(p.relative_to(imported)) for p in imported.rglob("*.json"))
    assert len(files) == 10
    dirs = sorted({f.rsplit("/", 1)[0] for f in files})
    assert dirs == [
        "recordings",  # the legacy file (no test id) and both model lists (shared)
        "tests/integration/inference/recordings",
        "tests/integration/messages/recordings",
        "tests/integration/responses/recordings",
    ]
    assert sum(f.startswith("recordings/models-") for f in files) == 2
    assert run_cli(capsys, "verify", "--root", str(imported))[0] == 0
    before = snapshot(imported)
    code, out, _ = run_cli(capsys, "import", "ogx", "--root", str(imported), str(FIXTURES))
    assert code == 0
    assert "(0 new, 10 unchanged, 0 overwritten, 0 kept)" in out
    assert snapshot(imported) == before


def test_chat_replays_through_the_openai_sdk(replay: Path) -> None:
    data = ogx(CHAT)
    request = data["request"]
    with test_context(data["test_id"]):
        client = openai_client(request["url"], "/chat/completions")
        answer = client.chat.completions.create(**request["body"])
    recorded = untyped(data["response"]["body"])
    assert answer.choices[0].message.content == recorded["choices"][0]["message"]["content"]
    assert answer.model == recorded["model"]


@pytest.mark.parametrize("name", STREAMS)
def test_streamed_chat_replays_through_the_openai_sdk(replay: Path, name: str) -> None:
    data = ogx(name)
    request = data["request"]
    with test_context(data["test_id"]):
        client = openai_client(request["url"], "/chat/completions")
        chunks = list(client.chat.completions.create(**request["body"]))
    recorded = [untyped(c) for c in data["response"]["body"]]
    assert len(chunks) == len(recorded)
    said = [said_by(c.choices[0].delta.model_dump()) for c in chunks if c.choices]
    expected = [said_by(c["choices"][0]["delta"]) for c in recorded if c["choices"]]
    assert said == expected
    assert "".join(said)


def said_by(delta: dict[str, Any]) -> str:
    """The text and tool-call arguments of one streamed delta."""
    calls = delta.get("tool_calls") or []
    args = "".join((call.get("function") or {}).get("arguments") or "" for call in calls)
    return (delta.get("content") or "") + args


def test_embeddings_replay_through_the_openai_sdk(replay: Path) -> None:
    data = ogx(EMBEDDINGS)
    request = data["request"]
    with test_context(data["test_id"]):
        client = openai_client(request["url"], "/embeddings")
        answer = client.embeddings.create(**request["body"])
    recorded = untyped(data["response"]["body"])
    assert answer.data[0].embedding == recorded["data"][0]["embedding"]


@pytest.mark.parametrize("name", MODEL_LISTS)
def test_model_lists_replay_through_the_openai_sdk(replay: Path, name: str) -> None:
    data = ogx(name)
    with test_context(data["test_id"]):
        client = openai_client(data["request"]["url"], "/models")
        ids = [m.id for m in client.models.list()]
    # both lists are `GET /v1/models` once OGX's doubled `/v1/v1/` is undone: replay merges
    # every model list of that endpoint (docs/design.md §3)
    every = [m["__data__"]["id"] for n in MODEL_LISTS for m in ogx(n)["response"]["body"]]
    assert sorted(ids) == sorted(set(every))
    assert {m["__data__"]["id"] for m in data["response"]["body"]} <= set(ids)


def test_a_recorded_provider_error_replays_as_the_sdk_error(replay: Path) -> None:
    data = ogx(ERROR)
    request = data["request"]
    with test_context(data["test_id"]):
        client = openai_client(request["url"], "/chat/completions")
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(**request["body"])
    assert info.value.status_code == 400
    assert "invalid image input" in str(info.value)


def test_doubled_v1_is_imported_as_the_path_the_sdk_sent(
    imported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OGX stores `<base URL ending /v1>` + `/v1/<endpoint>`; the SDK sent one `/v1`."""
    endpoints = set()
    for path in imported.rglob("*.json"):
        request = json.loads(path.read_text())["request"]
        assert "/v1/v1/" not in request["url"] and "/v1/v1/" not in request["endpoint"]
        endpoints.add(request["endpoint"])
    assert {"/v1/chat/completions", "/v1/embeddings", "/v1/models"} <= endpoints
    assert "/openai/v1/chat/completions" in endpoints  # Bedrock's and Azure's base URLs
    # what OGX's api_recorder writes for `completions` becomes the same path
    source = imported / "completions.json"
    raw = ogx(CHAT)
    raw["request"]["url"] = "http://localhost:8000/v1/v1/completions"
    raw["request"]["body"] = {"model": "m", "prompt": "say hi"}
    raw["response"]["body"] = {
        "id": "c",
        "object": "text_completion",
        "model": "m",
        "created": 1,
        "choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
    }
    source.write_text(json.dumps(raw))
    code, _, err = run_cli(capsys, "import", "ogx", "--root", str(imported), str(source))
    assert code == 0, err
    source.unlink()
    recorder = Recorder(imported)
    try:
        recorder.start(Mode.REPLAY)
        with test_context(raw["test_id"]):
            client = openai.OpenAI(
                base_url="http://127.0.0.1:9/v1", api_key="sk-other", max_retries=0
            )
            answer = client.completions.create(model="m", prompt="say hi")
    finally:
        httpx_adapter.uninstall()
    assert answer.choices[0].text == "hi"


def test_legacy_ollama_generate_replays_through_the_ollama_sdk(replay: Path) -> None:
    data = ogx(OLLAMA_GENERATE)
    request = data["request"]
    client = ollama.Client(host=request["url"].removesuffix("/api/generate"))
    with test_context(None):
        answer = client.generate(**request["body"])
    assert answer.response == "unsafe\nS2"
    assert answer.eval_count == 5


def test_tool_calls_become_call_layer_recordings(imported: Path) -> None:
    directory = imported / "tests/integration/responses/recordings"
    (stored,) = [
        data
        for data in (json.loads(p.read_text()) for p in directory.glob("*.json"))
        if data["request"]["method"] == "CALL"
    ]
    assert stored["request"]["method"] == "CALL"
    assert stored["request"]["endpoint"] == "ogx.tools:tavily.web_search"
    assert stored["request"]["body"] == {
        "args": [],
        "kwargs": {"query": "latest Python version 2023"},
    }
    assert stored["response"]["body"]["__type__"] == "ogx_api.tools.ToolInvocationResult"


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "unknown shape: expected a JSON object, found list"),
        (b'{"request": {}}', "unknown shape: no `request` and `response` objects"),
        (b'{"request": {"method": "POST"}, "response": {}}', "unknown shape: KeyError: 'url'"),
        (b'{"test_id": 3, "request": {}, "response": {}}', "test_id is int, not a string"),
    ],
)
def test_unreadable_files_are_refused_with_the_reason(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(UnreadableSource, match=reason.replace("(", r"\(").replace("[", r"\[")):
        read_ogx(path)


def test_a_bad_file_is_skipped_named_and_fails_the_import_writing_only_good_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / CHAT).write_bytes((FIXTURES / CHAT).read_bytes())
    (sources / "broken.json").write_text('{"request": {"url": "http://x/v1/chat')
    root = tmp_path / "project"
    root.mkdir()
    code, out, err = run_cli(capsys, "import", "ogx", "--root", str(root), str(sources))
    assert code == 1
    assert f"skipped: {sources / 'broken.json'}: not JSON" in err
    assert "1 imported from 2 files" in out
    assert "1 skipped" in out
    assert len(list(root.rglob("*.json"))) == 1


def test_dry_run_writes_nothing_and_existing_recordings_are_kept_unless_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(tmp_path)
    code, out, _ = run_cli(capsys, "import", "ogx", "--dry-run", "--root", root, str(FIXTURES))
    assert code == 0
    assert "Would import: " in out
    assert out.rstrip().endswith("dry run: nothing written")
    assert not list(tmp_path.rglob("*"))
    run_cli(capsys, "import", "ogx", "--root", root, str(FIXTURES / CHAT))
    (path,) = tmp_path.rglob("*.json")
    edited = path.read_text().replace("Earth", "Mars")
    path.write_text(edited)
    code, _, err = run_cli(capsys, "import", "ogx", "--root", root, str(FIXTURES / CHAT))
    assert code == 1
    assert "exists and differs from the import; use --overwrite to replace it" in err
    assert path.read_text() == edited
    code, out, _ = run_cli(
        capsys, "import", "ogx", "--overwrite", "--root", root, str(FIXTURES / CHAT)
    )
    assert code == 0
    assert "1 overwritten" in out
    assert "Earth" in path.read_text()


@pytest.mark.parametrize(
    ("provider", "name", "dotted"),
    [
        ("builtins", "KeyboardInterrupt", "builtins.KeyboardInterrupt"),
        ("openai", "SystemExit", "builtins.SystemExit"),
        ("_pytest.outcomes", "Exit", "_pytest.outcomes.Exit"),
        ("_pytest.outcomes", "Skipped", "_pytest.outcomes.Skipped"),
        ("_pytest.outcomes", "XFailed", "_pytest.outcomes.XFailed"),
    ],
)
def test_a_recorded_base_exception_is_not_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], provider: str, name: str, dotted: str
) -> None:
    """Replay never raises a BaseException that is not an Exception (docs/design.md §2), so
    an OGX file that recorded one (no status: the call raised it) is refused by name."""
    raw = ogx(ERROR)
    raw["response"]["exception_data"] = {"provider": provider, "type": name, "message": "bye"}
    source = tmp_path / "interrupted.json"
    source.write_text(json.dumps(raw))
    root = tmp_path / "project"
    root.mkdir()
    code, out, err = run_cli(capsys, "import", "ogx", "--root", str(root), str(source))
    assert code == 1
    assert (
        f"skipped: {source}: exception_data.type {name!r} (provider {provider!r}): the recorded "
        f"exception {dotted} is a BaseException that is not an Exception" in err
    )
    assert "replay never raises it; not imported" in err
    assert "0 imported from 1 files" in out
    assert not list(root.rglob("*.json"))


def test_ogx_recordings_carry_no_day_since_ogx_keeps_none(imported: Path) -> None:
    """OGX stores no date (its `created_at` values are normalised to the epoch): imported
    answers have no age (docs/recordings.md, "Age"), rather than the day of the import."""
    for path in imported.rglob("*.json"):
        data = json.loads(path.read_text())
        for response in [data["response"], *data.get("later_responses", [])]:
            assert "recorded_on" not in response, path
