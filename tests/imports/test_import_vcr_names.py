"""`hashreplay import vcr` names each cassette by the test pytest-recording made it for
(docs/design.md §14): the suite is collected (`pytest --collect-only` in a subprocess that
writes nothing, or `--test-ids FILE`) and each cassette maps to the one collected test whose
pytest-recording cassette name it has: parameters with characters a file name cannot hold,
test methods as `<Class>.<test>`, nested classes, names too long for a file. Cassettes that
match no test, or several, are skipped naming `--test-id`; without the collected ids the
layout's guess is used and the output says so."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from hashreplay.cli import main
from hashreplay.engine.import_vcr import cassette_names
from tests.fakes.upstream import FakeUpstream
from tests.imports.test_import_vcr_e2e import PYPROJECT

pytest_plugins = ["pytester"]

APP_TESTS = """
import os
import openai
import pytest

def chat(text):
    client = openai.OpenAI(base_url=os.environ["FAKE_URL"] + "/v1", api_key="sk-test-000000000000",
                           max_retries=0)
    r = client.chat.completions.create(model="gpt-fake-1",
                                       messages=[{"role": "user", "content": text}])
    return r.choices[0].message.content

@pytest.mark.vcr
@pytest.mark.parametrize("where", ["a/b", "c:d", "e?f", "1.5", 'say "hi"'])
def test_param(where):
    print("TEXT:", chat(where))

class TestGroup:
    @pytest.mark.vcr
    def test_method(self):
        print("TEXT:", chat("method"))

    class TestInner:
        @pytest.mark.vcr
        def test_deep(self):
            print("TEXT:", chat("deep"))

@pytest.mark.vcr
@pytest.mark.parametrize("text", ["x" * 300], ids=["x" * 300])
def test_long(text):
    print("TEXT:", chat("long"))
"""

IDS = [
    "tests/test_app.py::TestGroup::TestInner::test_deep",
    "tests/test_app.py::TestGroup::test_method",
    "tests/test_app.py::test_long[" + "x" * 300 + "]",
    "tests/test_app.py::test_param[1.5]",
    "tests/test_app.py::test_param[a/b]",
    "tests/test_app.py::test_param[c:d]",
    "tests/test_app.py::test_param[e?f]",
    'tests/test_app.py::test_param[say "hi"]',
]


def _texts(result: pytest.RunResult) -> list[str]:
    return sorted(line[line.index("TEXT:") :] for line in result.outlines if "TEXT:" in line)


def _import(
    capsys: pytest.CaptureFixture[str], root: Path, *args: str
) -> tuple[int, list[str], list[str]]:
    capsys.readouterr()
    code = main(["import", "vcr", "--root", str(root), *args])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err.splitlines()


def _covered(lines: list[str]) -> list[str]:
    start = lines.index("Tests covered:") + 1
    return [line.strip() for line in lines[start:] if line.startswith("  ")]


@pytest.fixture
def project(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    """A pytest-recording project whose cassettes vcrpy recorded."""
    monkeypatch.setenv("FAKE_URL", upstream.url)
    for name in ("INFERENCE_MODE", "HASHREPLAY_ROOT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_app.py").write_text(APP_TESTS)
    recorded = pytester.runpytest("-p", "no:hashreplay", "--record-mode=once", "-s")
    recorded.assert_outcomes(passed=8)
    pytester.vcr_texts = _texts(recorded)  # type: ignore[attr-defined]
    return pytester


def test_pytest_recordings_names_are_what_it_names_cassettes() -> None:
    """The mapping key is pytest-recording's own naming (checked against its function)."""
    plugin = pytest.importorskip("pytest_recording.plugin")

    class TestGroup:
        pass

    for test_class, name in [
        (None, "test_x[a/b-1]"),
        (None, "test_x[<>?%*:|\"'/\\]"),
        (TestGroup, "test_method[c:d]"),
        (None, "test_plain"),
        (None, "test_x[1.5]"),
    ]:
        expected = plugin.get_default_cassette_name(test_class, name)
        class_name = test_class.__name__ if test_class else None
        assert expected in cassette_names(class_name, name)
    assert cassette_names(None, "test_x[a/b-1]") == {"test_x[a-b-1]"}
    assert cassette_names("TestGroup", "test_m") == {"TestGroup.test_m"}


def test_mangled_cassette_names_map_back_to_the_collected_ids(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str], upstream: FakeUpstream
) -> None:
    cassettes = sorted(p.name for p in (project.path / "tests/cassettes/test_app").iterdir())
    assert "test_param[a-b].yaml" in cassettes  # what pytest-recording made of `a/b`
    assert "TestInner.test_deep.yaml" in cassettes
    assert any("..." in name for name in cassettes)  # the long name, shortened with an md5

    shutil.rmtree(project.path / ".pytest_cache")  # the recording run's
    code, out, err = _import(capsys, project.path, str(project.path / "tests"))
    assert code == 0, err
    assert out[0] == "Test ids: 8 collected by pytest --collect-only"
    assert _covered(out) == IDS
    assert out[-1].startswith("Summary: 8 imported from 8 files into 8 recordings (8 new,")
    # the collection wrote nothing in the project
    assert not (project.path / ".hashreplay" / "usage.json").exists()
    assert not (project.path / ".pytest_cache").exists()

    upstream.stop()
    replayed = project.runpytest("-p", "hashreplay", "-p", "no:recording", "-s")
    replayed.assert_outcomes(passed=8)
    replayed.stdout.fnmatch_lines(["hashreplay: 8 replayed, 0 recorded, 0 missed (replay)"])
    assert _texts(replayed) == project.vcr_texts  # type: ignore[attr-defined]


def test_without_collection_the_layout_guess_is_used_and_said(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = _import(capsys, project.path, "--no-collect", "--dry-run", "tests")
    assert code == 0
    assert out[0].startswith(
        "Test ids: guessed from pytest-recording's layout (<dir>/cassettes/<module>/"
        "[<Class>.]<test>.yaml -> <dir>/<module>.py::[<Class>::]<test>), as --no-collect asks; "
        "a parameter pytest-recording changed in a cassette name (any of <>?%*:|\"'/\\ became -) "
        "comes out wrong: check 'Tests covered' below, or pass --test-ids FILE"
    )
    covered = _covered(out)
    assert "tests/test_app.py::test_param[a-b]" in covered  # the guess, not the real id
    assert "tests/test_app.py::TestInner::test_deep" in covered

    # `--test-ids FILE`: the ids as `pytest --collect-only -q` prints them
    listing = project.runpytest("--collect-only", "-q", "-p", "no:hashreplay")
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(listing.outlines) + "\n")
    code, out, err = _import(capsys, project.path, "--test-ids", str(ids), "--dry-run", "tests")
    assert code == 0, err
    assert out[0] == f"Test ids: 8 read from {ids}"
    assert _covered(out) == IDS

    empty = tmp_path / "empty.txt"
    empty.write_text("no tests ran\n")
    code, _, err = _import(capsys, project.path, "--test-ids", str(empty), "tests")
    assert code == 2
    assert err == [
        f"error: --test-ids {empty} holds no test ids (one a line, as "
        "`pytest --collect-only -q` prints them)"
    ]


def test_when_collection_fails_the_layout_guess_is_used_and_said(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    (project.path / "conftest.py").write_text("import os\nos._exit(3)\n")
    code, out, _ = _import(capsys, project.path, "--dry-run", "tests")
    assert code == 0
    assert out[0].startswith(
        "Test ids: guessed from pytest-recording's layout (<dir>/cassettes/<module>/"
        "[<Class>.]<test>.yaml -> <dir>/<module>.py::[<Class>::]<test>), not collected: "
        "pytest --collect-only failed ("
    )


def test_cassettes_of_no_test_or_of_several_are_skipped_naming_test_id(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = Path("tests")  # as the user types it (pytester runs in the project)
    made = tests / "cassettes" / "test_app" / "TestGroup.test_method.yaml"
    # two parameters pytest-recording gave one cassette name
    (tests / "test_shared.py").write_text(
        "import pytest\n@pytest.mark.parametrize('p', ['x/y', 'x:y'])\ndef test_s(p): pass\n"
    )
    shared = tests / "cassettes" / "test_shared" / "test_s[x-y].yaml"
    shared.parent.mkdir()
    shutil.copy(made, shared)
    renamed = made.with_name("test_renamed_since.yaml")
    shutil.copy(made, renamed)
    removed = tests / "cassettes" / "test_removed" / "test_gone.yaml"
    removed.parent.mkdir()
    shutil.copy(made, removed)
    # a module that does not import: its tests are not collected, the layout guesses
    (tests / "test_broken.py").write_text("import not_installed_anywhere\ndef test_b(): pass\n")
    broken = tests / "cassettes" / "test_broken" / "test_b.yaml"
    broken.parent.mkdir()
    shutil.copy(made, broken)

    code, out, err = _import(capsys, project.path, "tests")
    assert code == 1
    assert out[0] == "Test ids: 10 collected by pytest --collect-only (it reported errors, exit 2)"
    # what pytest said, without the ids it listed: the module that does not import
    assert out[1] == "pytest --collect-only said:"
    said = out[2 : out.index(next(line for line in out[2:] if not line.startswith("  ")))]
    assert "  ERROR collecting tests/test_broken.py" in said
    assert "  E   ModuleNotFoundError: No module named 'not_installed_anywhere'" in said
    assert not any("::" in line for line in said)
    first = "tests/test_shared.py::test_s[x/y]"
    assert (
        f"error: skipped: {shared}: the cassette name 'test_s[x-y]' is pytest-recording's name "
        f"for 2 collected tests ({first}, tests/test_shared.py::test_s[x:y]), which shared it; "
        f"import it for each with --test-id (hashreplay import vcr --test-id "
        f"{shlex.quote(first)} {shlex.quote(str(shared))})"
    ) in err
    assert (
        f"error: skipped: {renamed}: no collected test of tests/test_app.py has the cassette "
        "name 'test_renamed_since' (renamed or removed, or named by "
        "@pytest.mark.default_cassette?): import it with --test-id (hashreplay import vcr "
        f"--test-id 'TEST ID' {renamed}), or delete it"
    ) in err
    assert (
        f"error: skipped: {removed}: its test module tests/test_removed.py does not exist "
        "(removed or renamed?): delete the cassette, or import it with --test-id "
        f"(hashreplay import vcr --test-id 'TEST ID' {removed})"
    ) in err
    assert (
        f"Note: {broken}: pytest collected no tests of tests/test_broken.py (does it import? "
        "pytest --collect-only tests/test_broken.py); imported under the layout's guess "
        "tests/test_broken.py::test_b"
    ) in out
    assert [*IDS, "tests/test_broken.py::test_b"] == sorted(
        _covered(out), key=[*IDS, "tests/test_broken.py::test_b"].index
    )
    assert out[-1].endswith("3 skipped")

    # the fix the message names: one import per test that shared the cassette
    for test_id in (first, "tests/test_shared.py::test_s[x:y]"):
        code, out, err = _import(capsys, project.path, "--test-id", test_id, str(shared))
        assert code == 0, err
        assert _covered(out) == [test_id]


def test_a_cassette_outside_the_layout_maps_by_its_name(
    project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    """A project whose `vcr_cassette_dir` moved the cassettes: the name alone decides, when
    one collected test has it."""
    elsewhere = project.path / "recorded" / "test_param[e-f].yaml"
    elsewhere.parent.mkdir()
    shutil.copy(project.path / "tests/cassettes/test_app/test_param[e-f].yaml", elsewhere)
    code, out, err = _import(capsys, project.path, "--dry-run", str(elsewhere))
    assert code == 0, err
    assert _covered(out) == ["tests/test_app.py::test_param[e?f]"]
