"""A blob file that is not what its reference says is a miss naming the file (docs/design.md
§13): a symlink (to `/dev/zero`, read without bound it would never end), a file larger or
smaller than its reference, bytes that are not UTF-8 text. Real pytest runs through the
openai SDK (the vision suite of `test_blobs_e2e.py`), replayed offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import xxhash

from tests.fakes.upstream import FakeUpstream
from tests.integration.test_blobs_e2e import project

__all__ = ["project"]  # the fixture, shared with test_blobs_e2e.py

FIX = "restore it from version control or re-record the test"


def recorded(project: pytest.Pytester) -> tuple[Path, list[Path]]:
    project.runpytest("-p", "hashreplay", "--inference-mode=record").assert_outcomes(passed=2)
    (blob,) = (project.path / "recordings" / "blobs").iterdir()
    return blob, sorted((project.path / "tests" / "recordings").glob("*.json"))


def replay_fails(project: pytest.Pytester, *expected: str) -> str:
    result = project.runpytest("-p", "hashreplay")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    for text in expected:
        assert text in out, out
    return out


def test_a_blob_that_is_not_what_its_reference_says_is_a_miss_naming_the_file(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    blob, _files = recorded(project)
    upstream.stop()
    size = blob.stat().st_size
    kept = project.path / "kept-blob"
    shutil.copy(blob, kept)

    blob.unlink()
    blob.symlink_to("/dev/zero")
    replay_fails(
        project,
        f"blob {blob} is a symlink to /dev/zero: a blob is read only as a file of the store; "
        f"replace the link with the blob itself ({FIX})",
    )

    blob.unlink()
    blob.write_bytes(kept.read_bytes() + b"x" * 1000)
    replay_fails(
        project, f"blob {blob} is {size + 1000} bytes, its reference says {size} (changed or "
    )

    blob.write_bytes(kept.read_bytes()[:-10])
    replay_fails(project, f"blob {blob} is {size - 10} bytes, its reference says {size}")

    blob.unlink()
    blob.mkdir()
    replay_fails(project, f"blob {blob} is not a regular file; {FIX}")
    blob.rmdir()

    shutil.copy(kept, blob)
    project.runpytest("-p", "hashreplay").assert_outcomes(passed=2)  # restored: replays again


def test_a_blob_that_is_not_utf8_text_is_a_miss_naming_the_file(
    project: pytest.Pytester, upstream: FakeUpstream
) -> None:
    blob, files = recorded(project)
    upstream.stop()
    binary = b"\xff\xfe" + bytes(range(256)) * 400
    digest = xxhash.xxh3_128_hexdigest(binary)
    odd = blob.with_name(digest)
    odd.write_bytes(binary)  # named by its digest: only its text is wrong
    for path in files:
        text = path.read_text().replace(blob.name, digest)
        data = json.loads(text)
        part = data["request"]["body"]["messages"][0]["content"][1]["image_url"]["url"]
        part["size"] = len(binary)
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    out = replay_fails(
        project,
        f"blob {odd} is not UTF-8 text (byte 0 of {len(binary)}), so it cannot be the value "
        f"its reference stands for; {FIX}",
    )
    assert "INTERNALERROR" not in out
