"""`scripts/normalize_recordings.py` (contract) and `hashreplay normalize`: response bodies only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hashreplay.core.store import dumps
from tests.cli.conftest import CHAT, OLLAMA_CHAT, STREAM, Cli, Project, Result

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "normalize_recordings.py"


def script(*args: str, cwd: Path) -> Result:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_bytes(dumps(data))


def request_part(path: Path) -> bytes:
    return dumps(json.loads(path.read_text())["request"])


def test_a_hand_edited_response_is_the_only_change(project: Project) -> None:
    chat = project.one(CHAT)
    original = chat.read_bytes()
    stable_id = json.loads(original)["response"]["body"]["id"]

    def relive(data: dict[str, Any]) -> None:  # as if pasted from a live response
        data["response"]["body"]["id"] = "chatcmpl-xyz"
        data["response"]["body"]["created"] = 1732950000

    edit(chat, relive)
    edited = project.snapshot()
    requests = {p: request_part(p) for p in project.files()}

    dry = script("--dry-run", cwd=project.root)
    assert dry.code == 0, dry.err
    assert dry.lines == [
        f"Would normalize: tests/recordings/{chat.name}",
        "Summary: 1/9 files modified",
    ]
    assert project.snapshot() == edited  # a dry run writes nothing

    done = script(cwd=project.root)
    assert done.code == 0, done.err
    assert done.lines == [
        f"Normalized: tests/recordings/{chat.name}",
        "Summary: 1/9 files modified",
    ]
    after = project.snapshot()
    changed = [name for name in after if after[name] != edited[name]]
    assert changed == [f"tests/recordings/{chat.name}"]
    assert {p: request_part(p) for p in project.files()} == requests  # requests byte-identical
    data = json.loads(chat.read_text())
    assert data["response"]["body"]["id"] == stable_id  # the field's recorded stable id, again
    assert data["response"]["body"]["created"] == 0
    assert chat.read_bytes() == original
    again = script(cwd=project.root)
    assert again.lines == ["Summary: 0/9 files modified"]


def test_stream_chunks_and_later_responses_are_normalised(project: Project, cli: Cli) -> None:
    stream = project.one(STREAM)
    original = stream.read_bytes()

    def drift(data: dict[str, Any]) -> None:
        chunk = data["response"]["body"][2]["data"]
        chunk["created"] = 1732950001
        chunk["system_fingerprint"] = "fp_0123456789"
        chunk["obfuscation"] = "xYz12"
        data["later_responses"] = [json.loads(json.dumps(data["response"]))]
        data["later_responses"][0]["body"][0]["data"]["created"] = 1732950002

    edit(stream, drift)
    requests = request_part(stream)
    result = cli("normalize", str(stream))
    assert result.code == 0
    assert result.lines == [
        f"Normalized: tests/recordings/{stream.name}",
        "Summary: 1/1 files modified",
    ]
    data = json.loads(stream.read_text())
    assert data["response"] == json.loads(original)["response"]
    assert data["later_responses"][0] == json.loads(original)["response"]
    assert request_part(stream) == requests


def test_a_new_volatile_id_gets_a_stable_id_and_a_mapping_entry(project: Project, cli: Cli) -> None:
    ollama = project.one(OLLAMA_CHAT)
    name_hash = ollama.stem

    def add_id(data: dict[str, Any]) -> None:
        data["response"]["body"][0]["id"] = "msg_01ABCdefGHIjkl"
        data["response"]["body"][1]["echo"] = "in reply to msg_01ABCdefGHIjkl"

    edit(ollama, add_id)
    requests = request_part(ollama)
    assert cli("normalize", "--dry-run").lines == [
        f"Would normalize: tests/llm/recordings/{ollama.name}",
        "Summary: 1/9 files modified",
    ]
    assert cli("normalize").code == 0
    data = json.loads(ollama.read_text())
    stable = data["response"]["body"][0]["id"]
    assert stable.startswith(f"rec-{name_hash[:12]}")
    assert data["response"]["body"][1]["echo"] == f"in reply to {stable}"
    assert data["id_normalization_mapping"][stable] == "response.body[0].id"
    assert "msg_01ABC" not in ollama.read_text()
    assert request_part(ollama) == requests


def test_model_lists_keep_their_facts(project: Project) -> None:
    models = next(p for p in project.files() if p.name.startswith("models-"))
    edit(models, lambda d: d["response"]["body"]["data"][0].update(created=1690000000))
    before = models.read_bytes()
    result = script("recordings", cwd=project.root)
    assert result.lines == ["Summary: 0/1 files modified"]  # a model's creation date is a fact
    assert models.read_bytes() == before


def test_unreadable_files_are_reported_and_left_alone(project: Project) -> None:
    broken = project.one(CHAT)
    broken.write_bytes(b'{"format_version": 1, "key_version": 1, "test_id": null, "requ')
    stream = project.one(STREAM)
    edit(stream, lambda d: d["response"]["body"][0]["data"].update(created=1732950003))
    for args in (["--dry-run"], []):
        result = script(*args, cwd=project.root)
        assert result.code == 1
        assert (
            f"error: tests/recordings/{broken.name}: unreadable: the file looks truncated"
            in result.err
        )
        assert "skipped, left unchanged" in result.err
        assert result.lines[-1] == "Summary: 1/9 files modified"
        assert broken.read_bytes().endswith(b'"requ')
    assert json.loads(stream.read_text())["response"]["body"][0]["data"]["created"] == 0


def test_defaults_paths_and_errors(project: Project) -> None:
    (project.root / "elsewhere" / "recordings").mkdir(parents=True)
    stray = project.root / "elsewhere" / "recordings" / project.one(CHAT).name
    stray.write_bytes(project.one(CHAT).read_bytes())
    edit(stray, lambda d: d["response"]["body"].update(created=1))
    # the script looks under tests/ and the common directory only; the CLI everywhere
    assert script("--dry-run", cwd=project.root).lines == ["Summary: 0/9 files modified"]
    cli_run = subprocess.run(
        [sys.executable, "-m", "hashreplay", "normalize", "--dry-run"],
        cwd=project.root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert cli_run.stdout.splitlines() == [
        "Would normalize: elsewhere/recordings/" + stray.name,
        "Summary: 1/10 files modified",
    ]
    missing = script("nowhere", cwd=project.root)
    assert missing.code == 2
    assert "error: no such file or directory: nowhere" in missing.err
    assert script("--bogus", cwd=project.root).code == 2


def test_permissions_are_kept(project: Project, cli: Cli) -> None:
    chat = project.one(CHAT)
    chat.chmod(0o644)
    edit(chat, lambda d: d["response"]["body"].update(created=5))
    chat.chmod(0o644)
    assert cli("normalize").code == 0
    assert chat.stat().st_mode & 0o777 == 0o644
