"""`hashreplay mv OLD NEW`: a renamed or moved test keeps its recordings (docs/design.md §14).

The test id is part of each recording's hash, so `mv` re-keys: the stored `test_id`, the
file name and, when the test moves to another directory, the recordings directory. Each form
(test id, test file, directory), parametrised ids, `--dry-run`, the usage log, and every
refusal, through `main(argv)` on stores recorded by the real engine against the fake upstream.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import orjson
import pytest

from hashreplay import Mode, test_context
from hashreplay.adapters import httpx as httpx_adapter
from hashreplay.core.hashing import request_hash
from hashreplay.engine.usage import RunUsage, TestUsage, read_usage, write_usage
from tests.cli.conftest import Cli
from tests.conftest import Recorder
from tests.fakes.upstream import FakeUpstream

A = "tests/test_a.py"
X = f"{A}::test_x"
LLM = "tests/llm/test_chat.py"

#: test id -> the questions it asks the fake upstream's /echo
CALLS = {
    X: ["one", "two"],
    f"{A}::test_p[1]": ["p1"],
    f"{A}::test_p[2]": ["p2"],
    f"{A}::TestGroup::test_m": ["m"],
    f"{A}::test_other": ["other"],
    f"{LLM}::test_hello": ["hello"],
    f"{LLM}::test_bye[sk-abcdefghijklmnopqrstuvwxyz0123]": ["bye"],
}


def record(root: Path, url: str, calls: dict[str, list[str]]) -> None:
    recorder = Recorder(root)
    try:
        session = recorder.start(Mode.RECORD)
        for test_id, questions in calls.items():
            with test_context(test_id):
                for question in questions:
                    httpx.post(f"{url}/echo", json={"q": question}).raise_for_status()
        with test_context(X):
            httpx.get(f"{url}/v1/models").raise_for_status()  # a shared model list
        session.close()
    finally:
        httpx_adapter.uninstall()


@pytest.fixture
def store(tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[tool.hashreplay]\n")
    record(root, upstream.url, CALLS)
    monkeypatch.chdir(root)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    return root


def by_test(root: Path) -> dict[str, list[str]]:
    """Each stored test id -> its files (relative), sorted; model lists under "(shared)"."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.json")):
        if ".hashreplay" in path.parts or path.name == "pyproject.json":
            continue
        data = orjson.loads(path.read_bytes())
        key = "(shared)" if path.name.startswith("models-") else data["test_id"]
        found.setdefault(key, []).append(str(path.relative_to(root)))
    return {k: sorted(v) for k, v in sorted(found.items())}


def named_by_its_request(root: Path, relative: str) -> bool:
    data = orjson.loads((root / relative).read_bytes())
    request = data["request"]
    expected = request_hash(
        request["method"], request["endpoint"], request["body"], data["test_id"]
    )
    return Path(relative).name == f"{expected}.json"


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_a_test_id_moves_to_another_file_and_directory(store: Path, cli: Cli) -> None:
    before = by_test(store)
    new = "tests/unit/test_b.py::test_y"
    result = cli("mv", X, new)
    assert result.code == 0, result.err
    after = by_test(store)
    assert X not in after
    assert len(after[new]) == 2
    assert all(f.startswith("tests/unit/recordings/") for f in after[new])
    assert all(named_by_its_request(store, f) for f in after[new])
    assert not any((store / f).exists() for f in before[X])
    # nothing else changed: other tests, the shared model list
    assert {k: v for k, v in after.items() if k != new} == {
        k: v for k, v in before.items() if k != X
    }
    moves = sorted(line for line in result.lines if line.startswith("Moved: "))
    assert len(moves) == 2
    assert all(line.endswith(f"({X} -> {new})") for line in moves)
    assert {line.split(" -> ")[0].removeprefix("Moved: ") for line in moves} == set(before[X])
    assert result.lines[-1] == "Summary: 2 recordings of 1 test moved"
    assert cli("verify").code == 0


def test_a_test_id_takes_its_parametrised_cases_and_a_class_its_methods(
    store: Path, cli: Cli
) -> None:
    result = cli("mv", f"{A}::test_p", f"{A}::test_param")
    assert result.code == 0, result.err
    after = by_test(store)
    assert f"{A}::test_param[1]" in after
    assert f"{A}::test_param[2]" in after
    assert not any(k.startswith(f"{A}::test_p[") for k in after)
    assert result.lines[-1] == "Summary: 2 recordings of 2 tests moved"

    one = cli("mv", f"{A}::test_param[2]", f"{A}::test_param[two]")
    assert one.code == 0, one.err
    assert f"{A}::test_param[two]" in by_test(store)
    assert f"{A}::test_param[1]" in by_test(store)

    group = cli("mv", f"{A}::TestGroup", f"{A}::TestTeam")
    assert group.code == 0, group.err
    assert f"{A}::TestTeam::test_m" in by_test(store)
    # a prefix that is not a whole name does not match: test_x is not test_x2's
    assert cli("mv", f"{A}::test_oth", f"{A}::test_z").code == 1


def test_a_test_file_moves_every_test_id_in_it(store: Path, cli: Cli) -> None:
    before = by_test(store)
    result = cli("mv", A, "tests/test_renamed.py")
    assert result.code == 0, result.err
    after = by_test(store)
    moved = {k.replace(A, "tests/test_renamed.py") for k in before if k.startswith(A)}
    assert moved <= set(after)
    assert not any(k.startswith(f"{A}::") for k in after)
    assert "tests/test_renamed.py::test_p[1]" in after
    assert "tests/test_renamed.py::TestGroup::test_m" in after
    # the same directory: the files stay in tests/recordings, renamed
    assert all(f.startswith("tests/recordings/") for k in moved for f in after[k])
    assert result.lines[-1] == "Summary: 6 recordings of 5 tests moved"
    assert after["(shared)"] == before["(shared)"]


def test_a_directory_moves_with_its_recordings_directory(store: Path, cli: Cli) -> None:
    result = cli("mv", "tests/llm/", "tests/providers")
    assert result.code == 0, result.err
    after = by_test(store)
    assert "tests/providers/test_chat.py::test_hello" in after
    assert all(
        f.startswith("tests/providers/recordings/")
        for k, files in after.items()
        if k.startswith("tests/providers/")
        for f in files
    )
    assert not (store / "tests" / "llm" / "recordings").exists()  # emptied: removed
    assert cli("verify").code == 0


def test_a_secret_in_the_new_id_is_redacted_as_a_write_redacts_it(store: Path, cli: Cli) -> None:
    stored = f"{LLM}::test_bye[[secret removed]]"
    assert stored in by_test(store)  # as the recorder wrote it
    secret = "sk-zyxwvutsrqponmlkjihgfedcba9876"
    # OLD as the user copies it from pytest's output (with the real value) finds it too
    result = cli(
        "mv", f"{LLM}::test_bye[sk-abcdefghijklmnopqrstuvwxyz0123]", f"{LLM}::test_ciao[{secret}]"
    )
    assert result.code == 0, result.err
    assert secret not in result.out
    after = by_test(store)
    assert f"{LLM}::test_ciao[[secret removed]]" in after
    assert all(secret.encode() not in p.read_bytes() for p in store.rglob("*.json"))
    assert cli("verify").code == 0


def test_dry_run_lists_and_writes_nothing(store: Path, cli: Cli) -> None:
    before = snapshot(store)
    result = cli("mv", "--dry-run", A, "tests/test_b.py")
    assert result.code == 0, result.err
    assert snapshot(store) == before
    lines = [line for line in result.lines if line.startswith("Would move: ")]
    assert len(lines) == 6
    assert f"({X} -> tests/test_b.py::test_x)" in "\n".join(lines)
    assert result.lines[-1] == (
        "Summary: 6 recordings of 5 tests would move; dry run: nothing written"
    )


def test_a_different_recording_at_the_target_stops_everything(store: Path, cli: Cli) -> None:
    # test_y was recorded already, differently: its answer to "one" is not test_x's
    target = by_test(store)
    source = next(
        f
        for f in target[X]
        if orjson.loads((store / f).read_bytes())["request"]["body"]["q"] == "one"
    )
    new = f"{A}::test_y"
    data = orjson.loads((store / source).read_bytes())
    data["test_id"] = new
    data["response"]["body"]["extra"] = "recorded by test_y"
    request = data["request"]
    name = request_hash(request["method"], request["endpoint"], request["body"], new)
    clash = store / "tests" / "recordings" / f"{name}.json"
    clash.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    before = snapshot(store)

    result = cli("mv", X, new)
    assert result.code == 1
    assert snapshot(store) == before  # nothing moved, not even the other file of test_x
    assert result.err.splitlines() == [
        f"error: conflict: tests/recordings/{name}.json already exists and holds a different "
        f"recording than {source}, which would move there; compare them (hashreplay diff "
        f"{source} tests/recordings/{name}.json), delete the one no test needs, then run "
        "the mv again"
    ]
    assert result.lines[-1] == (
        f"Nothing moved: 1 problem above (2 recordings of test '{X}' (with its "
        "parametrised cases and methods) left as they are)"
    )

    # once the user deleted the one no test needs, the move goes through
    clash.unlink()
    moved = cli("mv", X, new)
    assert moved.code == 0, moved.err
    assert len(by_test(store)[new]) == 2


def test_an_interrupted_mv_finishes_when_run_again(store: Path, cli: Cli) -> None:
    """A crash between writing the new file and removing the old leaves both: the next run
    finds the target holding the same bytes and removes the source."""
    originals = {f: (store / f).read_bytes() for f in by_test(store)[X]}
    assert cli("mv", X, f"{A}::test_y").code == 0
    for f, content in originals.items():  # as if it had stopped before removing these
        (store / f).write_bytes(content)
    result = cli("mv", X, f"{A}::test_y")
    assert result.code == 0, result.err
    assert len([line for line in result.lines if line.startswith("Removed duplicate: ")]) == 2
    assert X not in by_test(store)
    assert len(by_test(store)[f"{A}::test_y"]) == 2


def test_nothing_matched_names_the_near_test_ids(store: Path, cli: Cli) -> None:
    before = snapshot(store)
    result = cli("mv", f"{A}::test_xx", f"{A}::test_y")
    assert result.code == 1
    assert snapshot(store) == before
    assert result.err.strip() == (
        f"error: no recording belongs to test '{A}::test_xx' (with its parametrised "
        f"cases and methods); recorded names like it: {X}. `hashreplay list --test PATTERN` "
        "lists the recorded test ids"
    )
    file = cli("mv", "tests/test_aa.py", "tests/test_b.py")
    assert file.code == 1
    assert "no recording belongs to test file 'tests/test_aa.py'; recorded names like it: " in (
        file.err
    )
    assert A in file.err
    directory = cli("mv", "tests/lm", "tests/x")
    assert "no recording belongs to directory 'tests/lm/'; recorded names like it: " in (
        directory.err
    )
    assert "tests/llm/" in directory.err
    nothing = cli("mv", "elsewhere/", "x/")
    assert nothing.err.strip() == (
        "error: no recording belongs to directory 'elsewhere/'. `hashreplay list "
        "--test PATTERN` lists the recorded test ids"
    )


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            X,
            "tests/test_b.py",
            "OLD 'tests/test_a.py::test_x' is a test id (path/test_file.py"
            "::test_name) and NEW 'tests/test_b.py' is a test file (path/test_file.py): give "
            "both in the same form",
        ),
        (
            A,
            "tests/new/",
            "OLD 'tests/test_a.py' is a test file (path/test_file.py) and NEW "
            "'tests/new' is a directory (path/to/tests/): give both in the same form",
        ),
        (X, " ", "NEW is empty: give a test id, a test file or a directory"),
        (
            X,
            "tests/test_a.py::test_*",
            "NEW 'tests/test_a.py::test_*' holds a wildcard, a "
            "backslash or a space: give a test id, a test file or a directory exactly as pytest "
            "names it (tests/test_a.py::test_x, tests/test_a.py, tests/old/), with / between "
            "directories",
        ),
        (X, r"tests\test_b.py::test_y", "holds a wildcard, a backslash or a space"),
        (
            X,
            "../other/test_b.py::test_y",
            "NEW '../other/test_b.py::test_y' leads outside "
            "the project: give it relative to the project root, as pytest prints node ids",
        ),
        (X, "/abs/test_b.py::test_y", "leads outside the project"),
        (
            X,
            "tests/test_b.py::",
            "NEW 'tests/test_b.py::' is not a test id: write it as path/test_file.py::test_name",
        ),
        (X, "::test_y", "is not a test id"),
        (
            X,
            f"{A}::test_y[1]",
            "NEW 'tests/test_a.py::test_y[1]' names a parametrised case "
            "but OLD 'tests/test_a.py::test_x' names the whole test: its cases keep their "
            "parameters; drop the [...] from NEW",
        ),
        (X, f"./{X}", "OLD and NEW are both 'tests/test_a.py::test_x': nothing to move"),
        ("tests/", "./", "the project root itself cannot be moved"),
    ],
)
def test_malformed_names_are_usage_errors(
    store: Path, cli: Cli, old: str, new: str, message: str
) -> None:
    before = snapshot(store)
    result = cli("mv", old, new)
    assert result.code == 2
    assert message in result.err
    assert result.err.startswith("error: ")
    assert snapshot(store) == before


def test_an_unreadable_recording_of_old_stops_the_move(store: Path, cli: Cli) -> None:
    path = store / by_test(store)[X][0]
    text = path.read_text().replace('"format_version": 1', '"format_version": 99')
    path.write_text(text)
    before = snapshot(store)
    result = cli("mv", X, f"{A}::test_y")
    assert result.code == 1
    assert snapshot(store) == before
    shown = str(path.relative_to(store))
    assert result.err.startswith(f"error: cannot move {shown}: unreadable: ")
    assert "then run the mv again" in result.err
    # unreadable files of other tests do not stop it
    assert cli("mv", f"{A}::test_other", f"{A}::test_another").code == 0


def test_the_usage_log_follows_the_move(store: Path, cli: Cli) -> None:
    """After a full run, a test renamed in its file: `mv` renames it in the usage log too, so
    `prune` keeps what moved even when the files carry dates from before the run (copied
    with their dates kept, `cp -p`, `rsync -t`), so the log alone decides. The log as it was
    never collected the new test id, so it prunes none of them either."""
    files = by_test(store)
    shared = files.pop("(shared)")
    passed = {"setup": "passed", "call": "passed", "teardown": "passed", "mode": "replay"}
    run = RunUsage(
        collected=sorted(files),
        tests={test_id: TestUsage(**passed, files=used) for test_id, used in files.items()},
        outside_tests=shared,
        root=str(store),
        full_suite=True,
    )
    write_usage(run, store)
    old_log = store.parent / "old-usage.json"
    old_log.write_bytes((store / ".hashreplay" / "usage.json").read_bytes())
    new = f"{A}::test_y"
    result = cli("mv", X, new)
    assert result.code == 0, result.err
    assert result.lines[-1] == (
        "Summary: 2 recordings of 1 test moved; usage log: 1 test ids renamed"
    )
    log = read_usage(store)
    assert log.collected == sorted([new, *(t for t in files if t != X)])
    assert log.tests[new].files == by_test(store)[new]
    assert X not in log.tests
    assert log.tests[f"{A}::test_other"].files == files[f"{A}::test_other"]

    for path in by_test(store)[new]:
        os.utime(store / path, (run.started - 60, run.started - 60))

    def would_prune(usage_log: str) -> list[str]:
        pruned = cli("prune", "--dry-run", "--usage-log", usage_log)
        return [line for line in pruned.lines if line.startswith("Would prune:")]

    assert would_prune(".hashreplay/usage.json") == []
    # the log from before the move never collected the new id either: it prunes nothing
    assert would_prune(str(old_log)) == []
    assert cli("prune", "--usage-log", ".hashreplay/usage.json").code == 0
    assert len(by_test(store)[new]) == 2  # prune kept them

    # an unreadable log is left as it is, with a warning
    (store / ".hashreplay" / "usage.json").write_text("{not json")
    warned = cli("mv", new, X)
    assert warned.code == 0
    assert "warning: the usage log was left as it is: the usage log" in warned.err
    assert (store / ".hashreplay" / "usage.json").read_text() == "{not json"
    assert len(by_test(store)[X]) == 2


def test_a_recording_under_a_narrower_rule_moves_under_its_own_rule(
    tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    root = tmp_path / "narrow"
    root.mkdir()
    (root / "pyproject.toml").write_text('[tool.hashreplay]\nmatch_on = ["method", "endpoint"]\n')
    recorder = Recorder(root)
    try:
        session = recorder.start(Mode.RECORD, match_on=["method", "endpoint"])
        with test_context(X):
            httpx.post(f"{upstream.url}/echo", json={"q": "loose"}).raise_for_status()
        session.close()
    finally:
        httpx_adapter.uninstall()
    monkeypatch.chdir(root)
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    result = cli("mv", X, f"{A}::test_loose")
    assert result.code == 0, result.err
    (path,) = by_test(root)[f"{A}::test_loose"]
    data = orjson.loads((root / path).read_bytes())
    assert data["match"]["match_on"] == ["method", "endpoint"]  # its rule, kept
    assert not named_by_its_request(root, path)  # not the strict key: the body is left out
    assert cli("verify").code == 0  # verify names it by its own rule: the name is right


@pytest.mark.parametrize(
    ("old", "new", "inside"),
    [
        (A, "tests/recordings/test_a.py", "tests/recordings"),
        (X, "recordings/blobs/test_a.py::test_x", "recordings"),
        ("tests/llm/", "tests/llm/recordings/", "tests/llm/recordings"),
    ],
)
def test_mv_into_a_recordings_directory_is_refused_and_moves_nothing(
    store: Path, cli: Cli, old: str, new: str, inside: str
) -> None:
    """NEW would put the recordings inside a store (`…/recordings/recordings/`, the blobs):
    refused naming it, with every file left where it was."""
    before = by_test(store)
    result = cli("mv", old, new)
    assert result.code != 0
    assert "Traceback" not in result.err
    # the command line shows paths relative to the project
    assert f"lies inside the recordings directory {inside}: " in result.err
    assert f"move the test file out of {inside}" in result.err
    assert by_test(store) == before
