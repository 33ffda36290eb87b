"""The age of a recording (docs/recordings.md, "Age"), through real pytest runs against a fake
upstream that answers every call with fresh random ids and timestamps: each response carries
the UTC day it was recorded (`recorded_on`); a re-record of unchanged behaviour on another day
changes zero bytes; `hashreplay status --older-than` lists old recordings; `max_age` with
`stale = "warn" | "fail" | "refresh"` (config and marker) reports, fails or re-records them.
`HASHREPLAY_TODAY` stands in for the clock, so nothing here depends on the real date."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hashreplay.cli import main
from hashreplay.core.format import FormatError, recording_from_json
from tests.fakes.upstream import FakeUpstream, Scripted

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.pytest.ini_options]
addopts = "-p no:hypothesispytest -p no:randomly"

[tool.hashreplay]
{extra}
"""

SUITE = """
import os
import httpx2
import pytest

URL = os.environ["FAKE_URL"] + "/v1/chat/completions"


def ask(text):
    body = {"model": "gpt-fake-1", "messages": [{"role": "user", "content": text}]}
    with httpx2.Client() as c:
        r = c.post(URL, json=body)
        assert r.status_code == 200
        return r.json()


def test_one():
    ask("first question")


{marked}
def test_two():
    ask("second question")
"""

DAY1 = "2025-01-10"


def make(pytester: pytest.Pytester, extra: str = "", marked: str = "") -> Path:
    pytester.makepyprojecttoml(PYPROJECT.format(extra=extra))
    (pytester.path / "suite").mkdir(exist_ok=True)
    (pytester.path / "suite" / "test_app.py").write_text(SUITE.replace("{marked}", marked))
    return pytester.path


def files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.glob("suite/recordings/*.json"))}


def days(root: Path) -> dict[str, str | None]:
    found = {}
    for content in files(root).values():
        data = json.loads(content)
        found[data["test_id"].rsplit("::", 1)[1]] = data["response"].get("recorded_on")
    return found


def record(pytester: pytest.Pytester, mp: pytest.MonkeyPatch, today: str, *args: str) -> object:
    mp.setenv("HASHREPLAY_TODAY", today)
    return pytester.runpytest(*args)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.delenv("HASHREPLAY_TODAY", raising=False)


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> FakeUpstream:
    with FakeUpstream() as fake:
        monkeypatch.setenv("FAKE_URL", fake.url)
        yield fake


def recorded(pytester: pytest.Pytester, mp: pytest.MonkeyPatch, extra: str = "") -> Path:
    root = make(pytester, extra)
    mp.setenv("HASHREPLAY_TODAY", DAY1)
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    assert days(root) == {"test_one": DAY1, "test_two": DAY1}
    return root


def test_a_rerecord_of_unchanged_answers_on_another_day_changes_zero_bytes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream
) -> None:
    root = recorded(pytester, monkeypatch)
    before = files(root)
    # fresh random ids and timestamps on every call, half a year later: the same bytes
    monkeypatch.setenv("HASHREPLAY_TODAY", "2025-07-01")
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    assert files(root) == before

    # an answer whose content changed gets the day it changed; the other keeps its own
    upstream.script(
        "POST", "/v1/chat/completions", Scripted(json={"id": "x", "choices": [], "object": "n"})
    )
    pytester.runpytest("--inference-mode=record", "-k", "test_one").assert_outcomes(passed=1)
    assert days(root) == {"test_one": "2025-07-01", "test_two": DAY1}
    # replay reads both and writes nothing
    after = files(root)
    pytester.runpytest().assert_outcomes(passed=2)
    assert files(root) == after


def test_status_older_than_lists_old_recordings_with_age_and_test_id(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    upstream: FakeUpstream,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = recorded(pytester, monkeypatch)
    monkeypatch.setenv("HASHREPLAY_TODAY", "2025-04-30")  # 110 days later
    capsys.readouterr()
    assert main(["status", "--root", str(root), "--older-than", "90d"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    for line in out[:2]:
        age, day, test, path = line.split("\t")
        assert (age, day) == ("110d", DAY1)
        assert test.startswith("suite/test_app.py::test_")
        assert path.startswith("suite/recordings/") and path.endswith(".json")
    assert out[2] == "2 of 2 recording(s) older than 90d (today 2025-04-30)"

    assert main(["status", "--root", str(root), "--older-than", "16w"]) == 0  # 112 days
    assert capsys.readouterr().out == "0 of 2 recording(s) older than 112d (today 2025-04-30)\n"

    assert main(["status", "--root", str(root), "--older-than", "3 months"]) == 2
    err = capsys.readouterr().err
    assert "--older-than: '3 months' is not an age" in err
    assert '"<days>d" or "<weeks>w" (e.g. "180d", "26w")' in err


def test_stale_warn_lists_each_old_recording_in_the_summary(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream
) -> None:
    root = recorded(pytester, monkeypatch, 'max_age = "180d"')
    before = files(root)
    monkeypatch.setenv("HASHREPLAY_TODAY", "2025-07-08")  # 179 days: not stale yet
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)
    assert "older than max_age" not in result.stdout.str()

    monkeypatch.setenv("HASHREPLAY_TODAY", "2025-07-10")  # 181 days
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["hashreplay: 2 recording(s) older than max_age used:"])
    for test in ("test_one", "test_two"):  # a line each, in file order
        result.stdout.fnmatch_lines(
            [
                "  suite/recordings/*.json: recorded on 2025-01-10, 181 days ago (max_age "
                f"180d), used by suite/test_app.py::{test}"
            ]
        )
    assert files(root) == before


def run_marked(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    settings: str,
    marked: str,
    *,
    today: str,
) -> tuple[Path, pytest.RunResult]:
    """Record under `settings`, mark test_two with `marked`, replay on `today`."""
    root = recorded(pytester, monkeypatch, settings)
    (root / "suite" / "test_app.py").write_text(SUITE.replace("{marked}", marked))
    monkeypatch.setenv("HASHREPLAY_TODAY", today)
    return root, pytester.runpytest()


def test_stale_fail_fails_each_test_naming_the_file_and_its_age(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream
) -> None:
    # the marker wins: test_two allows a year
    settings, marked = 'max_age = "26w"\nstale = "fail"', '@pytest.mark.hashreplay(max_age="365d")'
    root, result = run_marked(pytester, monkeypatch, settings, marked, today="2025-08-01")
    result.assert_outcomes(passed=1, failed=1)  # 203 days old
    result.stdout.fnmatch_lines(
        [
            "*hashreplay: suite/test_app.py::test_one used 1 recording(s) older than max_age "
            '182d (stale = "fail")',
            "*  suite/recordings/*.json: recorded on 2025-01-10, 203 days ago (max_age 182d), "
            "used by suite/test_app.py::test_one",
            "*  to renew them: INFERENCE_MODE=record-if-missing pytest suite/test_app.py::test_one"
            ' with stale = "refresh"*',
        ]
    )
    # a plain re-record of unchanged answers keeps the day: still stale (the zero diff)
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=2)
    assert days(root) == {"test_one": DAY1, "test_two": DAY1}
    pytester.runpytest().assert_outcomes(passed=1, failed=1)


def test_stale_refresh_rerecords_old_answers_and_renews_only_their_day(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream
) -> None:
    root = recorded(pytester, monkeypatch, 'max_age = "90d"\nstale = "refresh"')
    before = files(root)
    # replay mode cannot record: a stale answer is replayed and listed, as with "warn"
    monkeypatch.setenv("HASHREPLAY_TODAY", "2025-06-01")
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["hashreplay: 2 recording(s) older than max_age used:"])
    assert files(root) == before

    calls = len(upstream.calls)
    result = pytester.runpytest("--inference-mode=record-if-missing")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["hashreplay: 0 replayed, 2 recorded, 0 missed *"])
    assert len(upstream.calls) == calls + 2
    assert days(root) == {"test_one": "2025-06-01", "test_two": "2025-06-01"}
    # the one intended change: the day; the content is the same
    for name, content in files(root).items():
        old = before[name].decode().replace(DAY1, "2025-06-01")
        assert content.decode() == old
    # fresh now: replayed, nothing recorded, nothing listed
    result = pytester.runpytest("--inference-mode=record-if-missing")
    result.stdout.fnmatch_lines(["hashreplay: 2 replayed, 0 recorded, 0 missed *"])
    assert "older than max_age" not in result.stdout.str()


def test_a_recording_without_a_day_replays_unchanged_and_has_no_age(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    upstream: FakeUpstream,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = recorded(pytester, monkeypatch, 'max_age = "1d"\nstale = "fail"')
    for path in root.glob("suite/recordings/*.json"):  # as an older version wrote them
        text = path.read_text()
        path.write_text(text.replace(f'    "recorded_on": "{DAY1}",\n', ""))
    before = files(root)
    assert all(b"recorded_on" not in content for content in before.values())
    monkeypatch.setenv("HASHREPLAY_TODAY", "2030-01-01")
    pytester.runpytest().assert_outcomes(passed=2)
    assert files(root) == before
    assert main(["verify", "--root", str(root)]) == 0
    capsys.readouterr()
    assert main(["status", "--root", str(root), "--older-than", "1d"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "0 of 2 recording(s) older than 1d (today 2030-01-01); 2 response(s) have no "
        "recorded day (recorded before days were kept)"
    )


@pytest.mark.parametrize(
    ("extra", "marked", "expected"),
    [
        (
            'max_age = "3 months"',
            "",
            '`max_age`: \'3 months\' is not an age; use "<days>d" or "<weeks>w" '
            '(e.g. "180d", "26w") (got "3 months")',
        ),
        (
            'stale = "never"',
            "",
            '`stale`: \'never\' is not valid; use one of "warn", "fail", "refresh" (got "never")',
        ),
        (
            "",
            "@pytest.mark.hashreplay(max_age=90)",
            '@pytest.mark.hashreplay max_age: 90 is not an age; use "<days>d" or "<weeks>w"*',
        ),
        (
            "",
            '@pytest.mark.hashreplay(stale="ignore")',
            "@pytest.mark.hashreplay stale: 'ignore' is not valid; use one of \"warn\", "
            '"fail", "refresh"',
        ),
    ],
)
def test_bad_age_settings_are_usage_errors_naming_the_setting_and_the_valid_forms(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    upstream: FakeUpstream,
    extra: str,
    marked: str,
    expected: str,
) -> None:
    make(pytester, extra, marked)
    result = pytester.runpytest()
    if marked:  # the marked test errors at its setup, naming the marker
        result.assert_outcomes(errors=1, failed=1)  # the other test: no recording
        result.stdout.fnmatch_lines([f"E * hashreplay: suite/test_app.py::test_two: {expected}"])
    else:  # the run does not start
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*{expected}"])


def test_a_bad_today_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream
) -> None:
    make(pytester)
    monkeypatch.setenv("HASHREPLAY_TODAY", "10/01/2025")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*HASHREPLAY_TODAY: expected a day written YYYY-MM-DD, found '10/01/2025'; set it "
            "to a day such as 2025-06-01, or unset it to use today's UTC date"
        ]
    )


def test_a_damaged_day_in_a_file_is_named_by_its_field() -> None:
    data = {
        "format_version": 1,
        "key_version": 1,
        "test_id": "t",
        "request": {"method": "GET", "url": "http://x/", "endpoint": "/"},
        "response": {"status": 200, "recorded_on": "2025-13-01"},
    }
    with pytest.raises(FormatError) as caught:
        recording_from_json(data)
    assert str(caught.value) == (
        "response.recorded_on: expected a day written YYYY-MM-DD, found '2025-13-01'"
    )


# --- shared model lists age like a test's own recordings -----------------------------------

MODELS_SUITE = """
import os
import httpx2

URL = os.environ["FAKE_URL"]


def test_models():
    with httpx2.Client() as c:
        r = c.get(URL + "/v1/models")
        assert r.status_code == 200
        print("MODELS", sorted(m["id"] for m in r.json()["data"]))
"""


def model_lists(root: Path) -> dict[str, dict[str, object]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(root.rglob("models-*.json"))}


def models_recorded(pytester: pytest.Pytester, mp: pytest.MonkeyPatch, extra: str) -> Path:
    pytester.makepyprojecttoml(PYPROJECT.format(extra=extra))
    (pytester.path / "suite").mkdir(exist_ok=True)
    (pytester.path / "suite" / "test_models.py").write_text(MODELS_SUITE)
    mp.setenv("HASHREPLAY_TODAY", DAY1)
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    lists = model_lists(pytester.path)
    assert len(lists) == 1
    assert [data["response"]["recorded_on"] for data in lists.values()] == [DAY1]  # type: ignore[index]
    return pytester.path


def test_a_stale_shared_model_list_warns_and_fails_naming_its_file_and_age(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream
) -> None:
    root = models_recorded(pytester, monkeypatch, 'max_age = "90d"')
    (name,) = model_lists(root)
    monkeypatch.setenv("HASHREPLAY_TODAY", "2025-05-01")  # 111 days
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "hashreplay: 1 recording(s) older than max_age used:",
            f"  */{name}: recorded on 2025-01-10, 111 days ago (max_age 90d), used by "
            "suite/test_models.py::test_models",
        ]
    )
    pytester.makepyprojecttoml(PYPROJECT.format(extra='max_age = "90d"\nstale = "fail"'))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*hashreplay: suite/test_models.py::test_models used 1 recording(s) older than "
            'max_age 90d (stale = "fail")',
            f"*  */{name}: recorded on 2025-01-10, 111 days ago (max_age 90d)*",
        ]
    )


def test_status_older_than_dates_a_shared_model_list_by_its_newest_file(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    upstream: FakeUpstream,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = models_recorded(pytester, monkeypatch, "")
    (old,) = model_lists(root)
    monkeypatch.setenv("HASHREPLAY_TODAY", "2025-05-01")
    capsys.readouterr()
    assert main(["status", "--root", str(root), "--older-than", "90d"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t")[:3] == ["111d", DAY1, "(shared model list)"]
    assert lines[0].endswith(old)
    assert lines[1] == "1 of 1 recording(s) older than 90d (today 2025-05-01)"

    # the endpoint answers another model set later: a second file; the list is that fresh
    upstream.models = [*upstream.models, "gpt-fake-new"]
    pytester.runpytest("--inference-mode=record").assert_outcomes(passed=1)
    assert len(model_lists(root)) == 2
    capsys.readouterr()
    assert main(["status", "--root", str(root), "--older-than", "90d"]) == 0
    assert capsys.readouterr().out == "0 of 2 recording(s) older than 90d (today 2025-05-01)\n"
    pytester.makepyprojecttoml(PYPROJECT.format(extra='max_age = "90d"\nstale = "fail"'))
    pytester.runpytest().assert_outcomes(passed=1)  # nor does replay call it stale


def test_refresh_rerecords_a_stale_shared_model_list_and_renews_only_its_day(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream
) -> None:
    root = models_recorded(pytester, monkeypatch, 'max_age = "90d"\nstale = "refresh"')
    before = model_lists(root)
    monkeypatch.setenv("HASHREPLAY_TODAY", "2025-06-01")
    calls = len(upstream.calls)
    result = pytester.runpytest("--inference-mode=record-if-missing")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["hashreplay: 0 replayed, 1 recorded, 0 missed *"])
    assert len(upstream.calls) == calls + 1
    after = model_lists(root)
    assert list(after) == list(before)  # the same set: the same file, only its day renewed
    for name, data in after.items():
        assert data["response"]["recorded_on"] == "2025-06-01"  # type: ignore[index]
        data["response"]["recorded_on"] = DAY1  # type: ignore[index]
        assert data == before[name]
    # fresh now: replayed, no call
    result = pytester.runpytest("--inference-mode=record-if-missing")
    result.stdout.fnmatch_lines(["hashreplay: 1 replayed, 0 recorded, 0 missed *"])
    assert len(upstream.calls) == calls + 1


def test_a_bad_today_is_a_usage_error_of_the_cli_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HASHREPLAY_TODAY", "2025-02-30")
    assert main(["status", "--root", str(tmp_path), "--older-than", "90d"]) == 2
    err = capsys.readouterr().err
    assert "HASHREPLAY_TODAY: expected a day written YYYY-MM-DD, found '2025-02-30'" in err
    assert "or unset it to use today's UTC date" in err


def test_the_marker_sets_stale_for_one_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream
) -> None:
    # stale = "warn" by default; the marker makes test_two's "fail"
    marked = '@pytest.mark.hashreplay(stale="fail")'
    _, result = run_marked(pytester, monkeypatch, 'max_age = "180d"', marked, today="2025-07-10")
    result.assert_outcomes(passed=1, failed=1)  # 181 days
    result.stdout.fnmatch_lines(
        [
            "*hashreplay: suite/test_app.py::test_two used 1 recording(s) older than max_age "
            '180d (stale = "fail")',
        ]
    )
    assert "FAILED suite/test_app.py::test_one" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*used by suite/test_app.py::test_one"])  # warned only
